/**
 * The PostgreSQL guard store, through `pg`. A barrier table with one row per
 * resource; each attempt runs in one transaction on one pooled connection:
 *
 *   BEGIN
 *   SELECT ... FROM barrier WHERE resource = $1 FOR UPDATE    row lock until COMMIT
 *     (first write to a resource: INSERT a placeholder row with epoch 0,
 *      ON CONFLICT DO NOTHING, then the SELECT again; a racing transaction
 *      waits on our uncommitted row, then finds it and waits on its lock)
 *   decide (pure, core.ts)
 *   the caller's SQL, through the same client
 *   UPDATE barrier + INSERT the log entry                     one statement
 *   COMMIT
 *
 * Concurrent attempts on one resource serialise on the row lock, so the
 * decision and the data change are one atomic step under READ COMMITTED
 * (the row is re-read after the lock is granted); attempts on different
 * resources run in parallel. Durability is PostgreSQL's: COMMIT returns once
 * the WAL is flushed (synchronous_commit = on, the default; a server running
 * with it off weakens S4 and is the operator's choice).
 *
 * A refusal decided before the caller's SQL runs (every fence refusal) is
 * logged in the same transaction, which changes nothing else. When the
 * caller's SQL throws or the mutation refuses (`tx.refuse`), the transaction
 * is rolled back whole and the refusal is logged by a second, single-statement
 * transaction before `write` returns: PostgreSQL aborts a transaction at its
 * first error, and a savepoint around every mutation would cost two more round
 * trips on every write to serve the rare case.
 */
import type { Pool, PoolClient, QueryResult, QueryResultRow } from 'pg';
import { QuorumFenceError } from '../common/errors.js';
import { expectResource } from '../common/check.js';
import type { Cluster } from '../cluster/description.js';
import type { Barrier } from './fence.js';
import {
  checkGuardRequest,
  fenceMessage,
  refusedResult,
  sameBarrier,
  type Admission,
  type GuardRequest,
  type GuardResult,
} from './core.js';
import { parseGuardLogEntry, type GuardLogEntry, type GuardLogQuery } from './log.js';
import {
  DEFAULT_MAX_LOG_PAGE,
  GuardAdapter,
  isRefusal,
  mutationRefusal,
  type GuardAdapterOptions,
  type MutationRefusal,
} from './adapter.js';

export const POSTGRES_GUARD_FORMAT = 'quorumfence/guard-postgres/v1';

export interface PostgresGuardOptions extends GuardAdapterOptions {
  /** Prefix of the guard's tables. Default `quorumfence_`. Lowercase letters, digits, underscores. */
  readonly tablePrefix?: string;
}

export { DEFAULT_MAX_LOG_PAGE };
const TABLE_PREFIX = /^[a-z_][a-z0-9_]{0,39}$/;
/** Any constant: the advisory lock that serialises concurrent schema creation. */
const SCHEMA_LOCK = 0x71f3_0001;

export type PostgresMutationRefusal = MutationRefusal;

/** What the caller's mutation gets: SQL inside the guard's transaction. */
export interface PostgresWriteContext {
  readonly resource: string;
  readonly epoch: bigint;
  readonly holder: Uint8Array;
  /** Runs one statement in the guard's transaction, on the guard's connection. */
  query<R extends QueryResultRow = QueryResultRow>(text: string, values?: unknown[]): Promise<QueryResult<R>>;
  /** Refuse the attempt (e.g. an UPDATE ... WHERE version = $n matched no row); everything is rolled back. */
  refuse(reason: 'version_mismatch', message?: string): PostgresMutationRefusal;
}

export type PostgresMutation<T> = (tx: PostgresWriteContext) => T | Promise<T>;

interface BarrierRow {
  epoch: string;
  token_digest: Buffer;
  token: Buffer;
  replay_high: string | null;
  replay_seen: string | null;
}

function toBarrier(row: BarrierRow): Barrier | undefined {
  if (row.epoch === '0') return undefined; // the placeholder of a resource nothing was accepted for yet
  return {
    epoch: BigInt(row.epoch),
    tokenDigest: new Uint8Array(row.token_digest),
    token: new Uint8Array(row.token),
    replay: row.replay_high === null ? null : { high: BigInt(row.replay_high), seen: BigInt(row.replay_seen ?? '0') },
  };
}

export class PostgresGuard extends GuardAdapter {
  readonly #pool: Pool;
  readonly #t: { meta: string; barrier: string; log: string; seq: string };

  private constructor(pool: Pool, cluster: Cluster, options: PostgresGuardOptions) {
    super(cluster, options);
    const prefix = options.tablePrefix ?? 'quorumfence_';
    if (!TABLE_PREFIX.test(prefix)) {
      throw new QuorumFenceError(
        'INVALID_ARGUMENT',
        '"tablePrefix" expected lowercase letters, digits and underscores',
        { field: 'tablePrefix' },
      );
    }
    this.#t = {
      meta: `${prefix}meta`,
      barrier: `${prefix}barrier`,
      log: `${prefix}guard_log`,
      seq: `${prefix}guard_log_seq`,
    };
    this.#pool = pool;
  }

  /**
   * Creates the guard's tables if missing and checks they belong to `cluster`.
   * The pool stays the caller's: `close` does not end it.
   * @throws QuorumFenceError CLUSTER_MISMATCH, STORE_CORRUPT, INVALID_ARGUMENT; pg errors when the server is unreachable
   */
  static async open(pool: Pool, cluster: Cluster, options: PostgresGuardOptions = {}): Promise<PostgresGuard> {
    const guard = new PostgresGuard(pool, cluster, options);
    await guard.#createSchema(cluster);
    return guard;
  }

  /** Table names, for callers that join against them or clean up. */
  get tables(): { readonly meta: string; readonly barrier: string; readonly log: string } {
    return this.#t;
  }

  async #createSchema(cluster: Cluster): Promise<void> {
    const t = this.#t;
    const client = await this.#pool.connect();
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
      await client.query(
        `INSERT INTO ${t.meta} (key, value) VALUES ('format', $1), ('clusterId', $2) ON CONFLICT (key) DO NOTHING`,
        [POSTGRES_GUARD_FORMAT, cluster.idHex],
      );
      const rows = (await client.query<{ key: string; value: string }>(`SELECT key, value FROM ${t.meta}`)).rows;
      const meta = new Map(rows.map((r) => [r.key, r.value]));
      if (meta.get('format') !== POSTGRES_GUARD_FORMAT) {
        throw new QuorumFenceError(
          'STORE_CORRUPT',
          `guard tables: unknown format ${JSON.stringify(meta.get('format'))}`,
        );
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
    } finally {
      client.release();
    }
  }

  /**
   * One guarded attempt: verify, lock and fence, run `mutation`'s SQL, raise
   * the barrier, append the log entry; durable when it resolves. A mutation
   * that throws is logged as `aborted` and its error rethrown.
   * @throws QuorumFenceError INVALID_ARGUMENT (request shape), CLOSED; pg errors; whatever `mutation` throws
   */
  async write<T = undefined>(request: GuardRequest, mutation?: PostgresMutation<T>): Promise<GuardResult<T>> {
    this.checkOpen();
    checkGuardRequest(request, this.core.maxKeyBytes);
    // PostgreSQL text and jsonb cannot hold U+0000; refuse it here rather than fail inside a transaction.
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
    const admission = this.core.admit(request);
    return this.tracked(async () => {
      const client = await this.#pool.connect();
      let broken = false;
      try {
        return await this.#attempt(client, request, admission, mutation);
      } catch (error) {
        broken = !(error instanceof MutationFailure);
        throw error instanceof MutationFailure ? error.cause : error;
      } finally {
        // A connection that failed mid-transaction is discarded rather than handed to the next writer.
        client.release(broken);
      }
    });
  }

  async #attempt<T>(
    client: PoolClient,
    request: GuardRequest,
    admission: Admission,
    mutation: PostgresMutation<T> | undefined,
  ): Promise<GuardResult<T>> {
    const t = this.#t;
    if (!admission.ok) {
      // Nothing to lock: the refusal needs no barrier. Its barrierBefore is what the table says now.
      const current = await this.#readBarrier(client, request.resource);
      const entry = await this.#appendLog(
        client,
        this.refusalEntry(0, request, admission, admission.reason, current?.epoch),
      );
      this.core.committed(entry);
      return refusedResult(entry, admission.message, current?.epoch);
    }
    const epoch = admission.token.grant.epoch;
    await client.query('BEGIN');
    let open = true;
    try {
      let row = await this.#lockBarrierRow(client, request.resource);
      let placeholder = false;
      if (row === undefined) {
        const inserted = await client.query(
          `INSERT INTO ${t.barrier} (resource, epoch, token_digest, token) VALUES ($1, 0, '\\x', '\\x') ON CONFLICT (resource) DO NOTHING`,
          [request.resource],
        );
        placeholder = inserted.rowCount === 1;
        row = await this.#lockBarrierRow(client, request.resource);
        if (row === undefined) throw new QuorumFenceError('INTERNAL', 'guard: the barrier row vanished under its lock');
      }
      const barrier = toBarrier(row);
      const before = barrier?.epoch;
      const decision = this.core.decide(admission, barrier);
      if (!decision.ok) {
        if (placeholder) await client.query(`DELETE FROM ${t.barrier} WHERE resource = $1`, [request.resource]);
        const entry = this.refusalEntry(
          0,
          request,
          admission,
          decision.reason,
          before,
          decision.reason === 'conflict' ? decision.barrierToken : undefined,
        );
        const logged = await this.#appendLog(client, entry);
        await client.query('COMMIT');
        open = false;
        this.core.committed(logged);
        return refusedResult(logged, fenceMessage(decision, epoch), before);
      }

      let result: T;
      try {
        result = mutation ? await mutation(this.#context(client, request.resource, admission)) : (undefined as T);
      } catch (error) {
        await client.query('ROLLBACK');
        open = false;
        const entry = await this.#appendLog(client, this.refusalEntry(0, request, admission, 'aborted', before));
        this.core.committed(entry);
        throw new MutationFailure(error);
      }
      if (isRefusal(result)) {
        await client.query('ROLLBACK');
        open = false;
        const entry = await this.#appendLog(client, this.refusalEntry(0, request, admission, result.refusal, before));
        this.core.committed(entry);
        return refusedResult(entry, result.message, before);
      }

      const next = decision.barrier;
      const entry = this.core.entry({
        seq: 0,
        request,
        admission,
        outcome: 'accepted',
        barrierBefore: before,
        barrierAfter: next.epoch,
        version: null,
      });
      const values = [
        JSON.stringify(entry),
        request.resource,
        next.epoch.toString(),
        Buffer.from(next.tokenDigest),
        Buffer.from(next.token),
        next.replay ? next.replay.high.toString() : null,
        next.replay ? next.replay.seen.toString() : null,
      ];
      // One round trip: raise the barrier (when it changed) and append the entry with its seq.
      const changed = !sameBarrier(barrier, next);
      const logged = await client.query<{ entry: unknown }>(
        `WITH ${
          changed
            ? `raised AS (
           UPDATE ${t.barrier} SET epoch = $3, token_digest = $4, token = $5, replay_high = $6, replay_seen = $7
           WHERE resource = $2
         ), `
            : ''
        }next AS (SELECT nextval('${t.seq}') AS seq)
         INSERT INTO ${t.log} (seq, resource, entry)
         SELECT seq, $2, $1::jsonb || jsonb_build_object('seq', seq) FROM next
         RETURNING entry`,
        changed ? values : values.slice(0, 2),
      );
      await client.query('COMMIT');
      open = false;
      const committed = parseGuardLogEntry(logged.rows[0]!.entry);
      this.core.committed(committed);
      return {
        ok: true,
        seq: committed.seq,
        epoch,
        barrier: next.epoch,
        raised: decision.raised,
        version: null,
        result,
      };
    } finally {
      if (open) await client.query('ROLLBACK').catch(() => undefined);
    }
  }

  #context(client: PoolClient, resource: string, admission: Extract<Admission, { ok: true }>): PostgresWriteContext {
    return {
      resource,
      epoch: admission.token.grant.epoch,
      holder: admission.token.grant.holder,
      query: (text, values) => client.query(text, values),
      refuse: mutationRefusal,
    };
  }

  /** Appends an entry (its seq from the sequence) and returns it as stored. Runs in the caller's transaction, or alone. */
  async #appendLog(client: PoolClient, entry: GuardLogEntry): Promise<GuardLogEntry> {
    const t = this.#t;
    const result = await client.query<{ entry: unknown }>(
      `WITH next AS (SELECT nextval('${t.seq}') AS seq)
       INSERT INTO ${t.log} (seq, resource, entry)
       SELECT seq, $2, $1::jsonb || jsonb_build_object('seq', seq) FROM next
       RETURNING entry`,
      [JSON.stringify(entry), entry.resource],
    );
    return parseGuardLogEntry(result.rows[0]!.entry);
  }

  async #lockBarrierRow(client: PoolClient, resource: string): Promise<BarrierRow | undefined> {
    const result = await client.query<BarrierRow>(
      `SELECT epoch, token_digest, token, replay_high, replay_seen FROM ${this.#t.barrier} WHERE resource = $1 FOR UPDATE`,
      [resource],
    );
    return result.rows[0];
  }

  async #readBarrier(client: PoolClient, resource: string): Promise<Barrier | undefined> {
    const result = await client.query<BarrierRow>(
      `SELECT epoch, token_digest, token, replay_high, replay_seen FROM ${this.#t.barrier} WHERE resource = $1`,
      [resource],
    );
    return result.rows[0] && toBarrier(result.rows[0]);
  }

  /**
   * The committed barrier of a resource, or undefined when no write was ever accepted.
   * @throws QuorumFenceError for a name outside the name contract (writes check it in checkGuardRequest)
   */
  async barrier(resource: string): Promise<Barrier | undefined> {
    expectResource(resource);
    const client = await this.#pool.connect();
    try {
      return await this.#readBarrier(client, resource);
    } finally {
      client.release();
    }
  }

  /**
   * Log entries with seq > after, in seq order. Within one resource, seq order
   * is decision order (the row lock is held while the seq is drawn). Across
   * resources, a transaction that drew a smaller seq may commit after one
   * that drew a larger seq, and rolled-back draws leave gaps: a reader
   * tailing a live log should re-read from a little before its cursor; a
   * reader of a quiescent log (a history checker after a run) sees it whole.
   */
  async readLog(query: GuardLogQuery = {}): Promise<GuardLogEntry[]> {
    const { after, limit } = this.logPage(query);
    const result = await this.#pool.query<{ entry: unknown }>(
      `SELECT entry FROM ${this.#t.log} WHERE seq > $1 ORDER BY seq LIMIT $2`,
      [after, limit],
    );
    return result.rows.map((row) => parseGuardLogEntry(row.entry));
  }

  /** Nothing beyond the writes in flight (GuardAdapter.close): the pool is the caller's to end. */
  protected closeStore(): Promise<void> {
    return Promise.resolve();
  }
}

/** Carries a mutation's own error past the connection clean-up, so the connection is not discarded for it. */
class MutationFailure extends Error {
  constructor(override readonly cause: unknown) {
    super('mutation failed');
  }
}
