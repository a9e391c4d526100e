/**
 * The PostgreSQL guard's tables and its two server-side functions: their names for a table prefix, and
 * `createSchema`, which creates what is missing (upgrading v1 tables in place) and checks the tables belong to
 * the guard's cluster. The SQL that uses them is postgres-sql.ts.
 *
 * Tables (prefix `quorumfence_` by default):
 *   meta       format, clusterId, refusedKept, refusedDropped
 *   barrier    one row per resource: epoch, token digest, token, replay window, and `writes`: the accepted
 *              writes so far, which every accepted write raises by one, so a single statement's compare-and-set
 *              fails when any write landed since its guard last saw the row (docs/guard-postgres.md, Isolation)
 *   guard_log  seq, resource, entry (jsonb), refused (counts toward retention)
 *   guard_log_seq
 * Functions:
 *   <prefix>fence_held(seq)     raises FENCE_MOVED when seq is null: the
 *                               single-statement write's barrier compare-and-set
 *                               matched no row, so the whole statement aborts
 *   <prefix>row_required(present) raises ROW_REQUIRED when present is null: the
 *                               caller's statement changed no row and asked to
 *                               be refused then
 */
import type { PostgresPoolClient } from './postgres-driver.js';
import { QuorumFenceError } from '../common/errors.js';
import type { Cluster } from '../cluster/description.js';

/**
 * v2 added `barrier.writes`. `open` upgrades v1 tables in place; a v1 guard refuses v2 tables (their format is not
 * its own), since its writes would not count in `writes` and a v2 single statement could then miss them.
 */
export const POSTGRES_GUARD_FORMAT = 'quorumfence/guard-postgres/v2';
const UPGRADED_FORMAT = 'quorumfence/guard-postgres/v1';
/** SQLSTATE of fence_held: the barrier is not the one the guard expected (class QF: quorumfence's own). */
export const FENCE_MOVED = 'QF001';
/** SQLSTATE of row_required. */
export const ROW_REQUIRED = 'QF002';

const TABLE_PREFIX = /^[a-z_][a-z0-9_]{0,39}$/;
/** Any constant: the advisory lock that serialises concurrent schema creation. */
const SCHEMA_LOCK = 0x71f3_0001;

export interface Tables {
  readonly meta: string;
  readonly barrier: string;
  readonly log: string;
  readonly seq: string;
  readonly fenceHeld: string;
  readonly rowRequired: string;
}

/** @throws QuorumFenceError INVALID_ARGUMENT for a prefix that is not a plain lowercase identifier */
export function tablesFor(prefix: string): Tables {
  if (!TABLE_PREFIX.test(prefix)) {
    throw new QuorumFenceError('INVALID_ARGUMENT', '"tablePrefix" expected lowercase letters, digits and underscores', {
      field: 'tablePrefix',
    });
  }
  return {
    meta: `${prefix}meta`,
    barrier: `${prefix}barrier`,
    log: `${prefix}guard_log`,
    seq: `${prefix}guard_log_seq`,
    fenceHeld: `${prefix}fence_held`,
    rowRequired: `${prefix}row_required`,
  };
}

/**
 * Creates what is missing and checks the tables belong to `cluster`.
 * @throws QuorumFenceError STORE_CORRUPT, CLUSTER_MISMATCH
 */
export async function createSchema(client: PostgresPoolClient, t: Tables, cluster: Cluster): Promise<void> {
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock($1)', [SCHEMA_LOCK]);
    await client.query(`CREATE TABLE IF NOT EXISTS ${t.meta} (key text PRIMARY KEY, value text NOT NULL)`);
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${t.barrier} (
         resource text PRIMARY KEY,
         epoch bigint NOT NULL CHECK (epoch >= 0),
         token_digest bytea NOT NULL,
         token bytea NOT NULL,
         replay_high bigint,
         replay_seen numeric(20, 0),
         writes bigint NOT NULL DEFAULT 0
       )`,
    );
    // v1 tables: their rows start at 0 writes, which is all a compare-and-set on `writes` needs.
    await client.query(`ALTER TABLE ${t.barrier} ADD COLUMN IF NOT EXISTS writes bigint NOT NULL DEFAULT 0`);
    await client.query(`CREATE SEQUENCE IF NOT EXISTS ${t.seq}`);
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${t.log} (seq bigint PRIMARY KEY, resource text NOT NULL, entry jsonb NOT NULL)`,
    );
    // Added after the first tables shipped: entries written before it are never counted or dropped.
    await client.query(`ALTER TABLE ${t.log} ADD COLUMN IF NOT EXISTS refused boolean NOT NULL DEFAULT false`);
    await client.query(`CREATE INDEX IF NOT EXISTS ${t.log}_refused ON ${t.log} (seq) WHERE refused`);
    await client.query(
      `CREATE OR REPLACE FUNCTION ${t.fenceHeld}(seq bigint) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
       BEGIN
         IF seq IS NULL THEN
           RAISE EXCEPTION USING ERRCODE = '${FENCE_MOVED}', MESSAGE = 'quorumfence guard: the barrier moved';
         END IF;
         RETURN seq;
       END $$`,
    );
    await client.query(
      `CREATE OR REPLACE FUNCTION ${t.rowRequired}(present boolean) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
       BEGIN
         IF present IS NULL THEN
           RAISE EXCEPTION USING ERRCODE = '${ROW_REQUIRED}', MESSAGE = 'quorumfence guard: the statement changed no row';
         END IF;
         RETURN true;
       END $$`,
    );
    await client.query(
      `INSERT INTO ${t.meta} (key, value) VALUES ('format', $1), ('clusterId', $2), ('refusedKept', '0'), ('refusedDropped', '0')
       ON CONFLICT (key) DO NOTHING`,
      [POSTGRES_GUARD_FORMAT, cluster.idHex],
    );
    await client.query(`UPDATE ${t.meta} SET value = $1 WHERE key = 'format' AND value = $2`, [
      POSTGRES_GUARD_FORMAT,
      UPGRADED_FORMAT,
    ]);
    const rows = (await client.query<{ key: string; value: string }>(`SELECT key, value FROM ${t.meta}`)).rows;
    const meta = new Map(rows.map((r) => [r.key, r.value]));
    if (meta.get('format') !== POSTGRES_GUARD_FORMAT) {
      throw new QuorumFenceError('STORE_CORRUPT', `guard tables: unknown format ${JSON.stringify(meta.get('format'))}`);
    }
    if (meta.get('clusterId') !== cluster.idHex) {
      throw new QuorumFenceError(
        'CLUSTER_MISMATCH',
        `guard tables belong to cluster ${String(meta.get('clusterId')).slice(0, 16)}…, not ${cluster.idHex.slice(0, 16)}…`,
      );
    }
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  }
}
