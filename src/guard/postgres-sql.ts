/**
 * The PostgreSQL guard's tables, its two server-side functions, the SQL text
 * of its statements and the shape of a caller's statement (postgres-guard.ts
 * runs them). Kept apart from the adapter so each SQL shape is written once
 * and can be read in one place.
 *
 * Tables (prefix `quorumfence_` by default):
 *   meta       format, clusterId, refusedKept, refusedDropped
 *   barrier    one row per resource: epoch, token digest, token, replay window
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
import { BoundedMap } from '../common/bounded-map.js';
import { createHash } from 'node:crypto';
import {
  escapeLiteral,
  type PostgresPoolClient,
  type PostgresQueryResult,
  type PostgresRow,
} from './postgres-driver.js';
import type { MutationRefusal } from './adapter.js';
import { QuorumFenceError } from '../common/errors.js';
import type { Cluster } from '../cluster/description.js';
import type { Barrier } from './fence.js';

export const POSTGRES_GUARD_FORMAT = 'quorumfence/guard-postgres/v1';
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
         replay_seen numeric(20, 0)
       )`,
    );
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

export interface BarrierRow {
  epoch: string;
  token_digest: Buffer;
  token: Buffer;
  replay_high: string | null;
  replay_seen: string | null;
}

export const BARRIER_COLUMNS = 'epoch, token_digest, token, replay_high, replay_seen';

export function toBarrier(row: BarrierRow): Barrier | undefined {
  if (row.epoch === '0') return undefined; // the placeholder of a resource nothing was accepted for yet
  return {
    epoch: BigInt(row.epoch),
    tokenDigest: new Uint8Array(row.token_digest),
    token: new Uint8Array(row.token),
    replay: row.replay_high === null ? null : { high: BigInt(row.replay_high), seen: BigInt(row.replay_seen ?? '0') },
  };
}

/**
 * A SQL literal. The guard's batched statements go through the simple-query
 * protocol (several statements, one round trip), which takes no parameters;
 * every value in them passes through here (pg's escaping, right whatever
 * standard_conforming_strings says).
 */
export function literal(value: string | bigint | Uint8Array | null): string {
  if (value === null) return 'NULL';
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'string') return escapeLiteral(value);
  return `${escapeLiteral(`\\x${Buffer.from(value).toString('hex')}`)}::bytea`;
}

/** The columns of a barrier as SQL literals, in BARRIER_COLUMNS order. */
export function barrierLiterals(b: Barrier): string[] {
  return [
    literal(b.epoch),
    literal(b.tokenDigest),
    literal(b.token),
    literal(b.replay ? b.replay.high : null),
    b.replay ? `${b.replay.seen.toString()}::numeric` : 'NULL',
  ];
}

/**
 * Opens the transaction form: BEGIN, then locks and reads the barrier row.
 * With `placeholder` (the guard has not seen the row yet), first inserts a
 * placeholder row (epoch 0) unless one exists: a racing transaction waits on
 * our uncommitted row, then finds it and waits on its lock. Barrier rows are
 * never deleted once real, so a row the guard has seen needs no placeholder.
 */
export function lockSql(t: Tables, resource: string, placeholder: boolean): string {
  const r = literal(resource);
  const insert = `INSERT INTO ${t.barrier} (resource, epoch, token_digest, token) VALUES (${r}, 0, '\\x', '\\x')
      ON CONFLICT (resource) DO NOTHING RETURNING true AS placeholder;`;
  return `BEGIN; ${placeholder ? insert : ''}
    SELECT ${BARRIER_COLUMNS} FROM ${t.barrier} WHERE resource = ${r} FOR UPDATE`;
}

/** Stores the raised barrier. */
export function raiseSql(t: Tables, resource: string, next: Barrier): string {
  const [epoch, digest, token, high, seen] = barrierLiterals(next);
  return `UPDATE ${t.barrier} SET epoch = ${epoch}, token_digest = ${digest}, token = ${token},
    replay_high = ${high}, replay_seen = ${seen} WHERE resource = ${literal(resource)}`;
}

/** Appends one entry with its seq from the sequence; returns the entry as stored. */
export function appendSql(t: Tables, entryJson: string, resource: string, refused: boolean): string {
  return `WITH next AS (SELECT nextval('${t.seq}') AS seq)
    INSERT INTO ${t.log} (seq, resource, entry, refused)
    SELECT seq, ${literal(resource)}, ${literal(entryJson)}::jsonb || jsonb_build_object('seq', seq), ${refused} FROM next
    RETURNING entry`;
}

/**
 * What follows a refused entry's append, in its transaction: count it (the
 * row lock on refusedKept serialises refusals, so the next statement's fresh
 * snapshot sees every refused entry committed before), then drop the oldest
 * past `max` and move the counters.
 */
export function retainSql(t: Tables, max: number): string {
  return `UPDATE ${t.meta} SET value = (value::bigint + 1)::text WHERE key = 'refusedKept';
    WITH excess AS (SELECT greatest(0, value::bigint - ${max}) AS n FROM ${t.meta} WHERE key = 'refusedKept'),
    gone AS (
      DELETE FROM ${t.log} WHERE seq IN (SELECT seq FROM ${t.log} WHERE refused ORDER BY seq LIMIT (SELECT n FROM excess))
      RETURNING 1
    ),
    dropped AS (SELECT count(*) AS n FROM gone)
    UPDATE ${t.meta} SET value = (value::bigint + CASE key WHEN 'refusedDropped' THEN d.n ELSE -d.n END)::text
    FROM dropped d WHERE d.n > 0 AND key IN ('refusedKept', 'refusedDropped')`;
}

/**
 * The single-statement fenced write. The caller's statement keeps its own
 * parameters $1..$n; the guard's follow ($n+1..). Execution order is fixed by
 * what reads what: the primary SELECT calls fence_held on the log CTE, which
 * reads the fence CTE, so the barrier row is locked (compare-and-set on the
 * whole barrier the guard decided against, row-locked until commit: an UPDATE
 * when the barrier changes, SELECT ... FOR UPDATE when it does not, which
 * writes no new row version) before the caller's statement runs: after it,
 * when it is read through the LATERAL join, or at the end of the statement
 * when nothing reads it. A barrier that moved makes the fence CTE match no
 * row, fence_held raise FENCE_MOVED, and the statement (the caller's write
 * included) abort as one. It answers the new entry's seq; the entry itself is
 * the one the guard sent.
 */
export function statementSql(
  t: Tables,
  callerText: string,
  callerValues: number,
  options: { returning: boolean; requireRow: boolean; raise: boolean },
): { text: string; name: string } {
  const p = (i: number) => `$${callerValues + i}`;
  const expected = `resource = ${p(1)}::text AND epoch = ${p(2)}::bigint AND token_digest = ${p(3)}::bytea
        AND replay_high IS NOT DISTINCT FROM ${p(4)}::bigint AND replay_seen IS NOT DISTINCT FROM ${p(5)}::numeric`;
  const fence = options.raise
    ? `quorumfence_fence AS (
      UPDATE ${t.barrier} SET epoch = ${p(7)}::bigint, token_digest = ${p(8)}::bytea, token = ${p(9)}::bytea,
        replay_high = ${p(10)}::bigint, replay_seen = ${p(11)}::numeric
      WHERE ${expected}
      RETURNING resource
    )`
    : `quorumfence_fence AS (SELECT resource FROM ${t.barrier} WHERE ${expected} FOR UPDATE)`;
  const logged = `quorumfence_logged AS (
      INSERT INTO ${t.log} (seq, resource, entry)
      SELECT s.seq, ${p(1)}::text, ${p(6)}::jsonb || jsonb_build_object('seq', s.seq)
      FROM (SELECT nextval('${t.seq}') AS seq FROM quorumfence_fence) s
      RETURNING seq
    )`;
  const head = `WITH ${fence}, ${logged}, quorumfence_write AS (${callerText})`;
  // Target-list order: the fence first, then (with requireRow) the caller's rows.
  const found = options.requireRow
    ? `, ${t.rowRequired}((SELECT true FROM quorumfence_write LIMIT 1)) AS quorumfence_found`
    : '';
  const held = `SELECT ${t.fenceHeld}((SELECT seq FROM quorumfence_logged)) AS quorumfence_seq${found}`;
  const text = !options.returning
    ? `${head} ${held}`
    : `${head}
    SELECT g.*, w.* FROM (${held}) g
    LEFT JOIN LATERAL (SELECT true AS quorumfence_row, * FROM quorumfence_write WHERE g.quorumfence_seq IS NOT NULL) w
    ON true`;
  return { text, name: preparedName(text) };
}

/** The guard's parameters of statementSql, after the caller's: the new barrier only when it raises. */
export function statementValues(
  resource: string,
  expected: Barrier,
  next: Barrier | undefined,
  entryJson: string,
): unknown[] {
  const columns = (b: Barrier) => [
    b.epoch.toString(),
    Buffer.from(b.tokenDigest),
    Buffer.from(b.token),
    b.replay ? b.replay.high.toString() : null,
    b.replay ? b.replay.seen.toString() : null,
  ];
  const [epoch, digest, , high, seen] = columns(expected);
  return [resource, epoch, digest, high, seen, entryJson, ...(next ? columns(next) : [])];
}

export type PostgresMutationRefusal = MutationRefusal;

/** What the caller's mutation gets: SQL inside the guard's transaction. */
export interface PostgresWriteContext {
  readonly resource: string;
  readonly epoch: bigint;
  readonly holder: Uint8Array;
  /** Runs one statement in the guard's transaction, on the guard's connection. */
  query<R extends PostgresRow = PostgresRow>(text: string, values?: unknown[]): Promise<PostgresQueryResult<R>>;
  /** Refuse the attempt (e.g. an UPDATE ... WHERE version = $n matched no row); everything is rolled back. */
  refuse(reason: 'version_mismatch', message?: string): PostgresMutationRefusal;
}

export type PostgresMutation<T> = (tx: PostgresWriteContext) => T | Promise<T>;

/** How a write went, for the bench and tests: `statement` = one round trip. */
export type WriteForm = 'statement' | 'transaction';

/** One data statement for `writeStatement`. */
export interface FencedStatement {
  /** INSERT, UPDATE or DELETE (it runs as a CTE), with its own parameters $1..$n; no trailing semicolon needed. */
  readonly text: string;
  readonly values?: readonly unknown[];
  /** The statement ends in RETURNING: its rows come back in `result.rows`. Default false. */
  readonly returning?: boolean;
  /** Refuse with version_mismatch, applying nothing, when the statement returns no row (needs `returning`). */
  readonly requireRow?: boolean;
  /**
   * Run it as a named prepared statement (parsed and planned once per
   * connection). Default true: keep the text constant and the values in
   * `values`; pass false for text built per call, or each connection keeps
   * every text it saw.
   */
  readonly prepare?: boolean;
}

export interface StatementResult<R> {
  /** The statement's RETURNING rows; empty without `returning`. */
  readonly rows: R[];
}

export const NO_ROW = 'the statement changed no row';

/**
 * The statement's text, checked; a trailing semicolon is dropped (it runs inside the guard's WITH).
 * @throws QuorumFenceError INVALID_ARGUMENT
 */
export function checkStatement(statement: FencedStatement): string {
  const bad = (field: string, expected: string) =>
    new QuorumFenceError('INVALID_ARGUMENT', `"${field}" expected ${expected}`, { field });
  if (typeof statement !== 'object' || statement === null) throw bad('statement', 'an object');
  if (typeof statement.text !== 'string') throw bad('text', 'a string');
  const text = statement.text.trim().replace(/;+$/, '').trim();
  if (text.length === 0) throw bad('text', 'a statement');
  if (statement.values !== undefined && !Array.isArray(statement.values)) throw bad('values', 'an array');
  if (statement.requireRow && !statement.returning) throw bad('requireRow', 'a statement with returning: true');
  for (const flag of ['returning', 'requireRow', 'prepare'] as const) {
    if (statement[flag] !== undefined && typeof statement[flag] !== 'boolean') throw bad(flag, 'a boolean');
  }
  return text;
}

/** Several statements in one simple-query message (one round trip); pg answers one result per statement. */
export async function batch(client: PostgresPoolClient, text: string): Promise<PostgresQueryResult[]> {
  const results = (await client.query(text)) as unknown as PostgresQueryResult | PostgresQueryResult[];
  return Array.isArray(results) ? results : [results];
}

/**
 * PostgreSQL text and jsonb cannot hold U+0000: refused before any SQL rather than failing inside a transaction.
 * @throws QuorumFenceError INVALID_ARGUMENT
 */
export function checkNoNul(request: { resource: string; key?: string; op?: string }): void {
  for (const [field, value] of [
    ['resource', request.resource],
    ['key', request.key ?? ''],
    ['op', request.op ?? ''],
  ] as const) {
    if (value.includes('\u0000'))
      throw new QuorumFenceError('INVALID_ARGUMENT', `"${field}" must not contain U+0000 in a PostgreSQL guard`, {
        field,
      });
  }
}

/** The caller's RETURNING rows out of statementSql's answer: real rows only, the guard's columns removed. */
export function statementRows<R>(rows: Record<string, unknown>[]): R[] {
  return rows
    .filter((row) => row.quorumfence_row === true)
    .map(({ quorumfence_seq: _s, quorumfence_row: _r, quorumfence_found: _f, ...rest }) => rest as R);
}

/** A prepared statement's name, from its text: one text, one name, on every connection. */
export function preparedName(sql: string): string {
  return `quorumfence_${createHash('sha256').update(sql).digest('hex').slice(0, 32)}`;
}

/** Statement texts whose guard SQL is kept built (first in, first out). */
const BUILT_TEXTS = 256;

/** statementSql per caller text, built once: a hot loop sends one text, and hashing it per write shows in the bench. */
export class StatementTexts {
  readonly #built = new BoundedMap<string, { text: string; name: string }>(BUILT_TEXTS);
  constructor(private readonly tables: Tables) {}

  /** The guard's SQL around `text`, with its prepared-statement name unless `prepare` is false. */
  get(
    text: string,
    values: number,
    options: { returning: boolean; requireRow: boolean; raise: boolean },
    prepare = true,
  ): { text: string; name?: string } {
    const key = `${values}|${options.returning}|${options.requireRow}|${options.raise}|${text}`;
    let sql = this.#built.get(key);
    if (sql === undefined) {
      sql = statementSql(this.tables, text, values, options);
      // Bounded: texts built per call (prepare: false) must not grow it without end.
      this.#built.set(key, sql);
    }
    return prepare ? sql : { text: sql.text };
  }
}

/** Carries a mutation's own error past the connection clean-up, so the connection is not discarded for it. */
export class MutationFailure extends Error {
  constructor(override readonly cause: unknown) {
    super('mutation failed');
  }
}
