/**
 * The PostgreSQL guard store, through `pg` (docs/guard-postgres.md has the
 * SQL and the argument). Two forms of write, one decision (decideFence):
 *
 * - `writeStatement`: one data statement, one round trip, autocommit. The
 *   guard decides against the barrier row it last saw for the resource and
 *   sends one statement that compare-and-sets the whole row (its count of
 *   accepted writes included, so the statement's snapshot holds every earlier
 *   accepted write), appends the log entry and runs the caller's statement
 *   (postgres-sql.ts, statementSql). A row that changed aborts the statement
 *   whole; the guard then runs the transaction form, which decides again
 *   under the lock.
 * - `write`: any statements, three round trips: BEGIN + lock the barrier row
 *   (FOR UPDATE, a placeholder row first time); the caller's SQL; raise the
 *   barrier + append the entry + COMMIT. Batches go as one simple-query
 *   message (pg does not pipeline).
 *
 * Attempts on one resource serialise on its barrier row, so decision and data
 * commit as one step under READ COMMITTED; COMMIT is durable with
 * synchronous_commit = on (the default). A fence refusal is logged in the
 * transaction that saw it; when the caller's SQL fails or refuses, everything
 * is rolled back and the refusal logged by a second transaction (PostgreSQL
 * aborts a transaction at its first error; a savepoint per write would cost
 * every write for the rare case). Refused entries (conflicts excepted) are
 * kept up to maxRefusedLogEntries, as with LMDB (retainSql).
 */
import { BoundedMap } from '../common/bounded-map.js';
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
  GuardAdapter,
  isRefusal,
  mutationRefusal,
  type GuardAdapterOptions,
  type LogRetention,
  type MutationRefusal,
} from './adapter.js';
import {
  MutationFailure,
  NO_ROW,
  batch,
  checkNoNul,
  checkStatement,
  statementRows,
  type FencedStatement,
  type PostgresMutation,
  type PostgresWriteContext,
  type StatementResult,
  type WriteForm,
  appendSql,
  literal,
  lockSql,
  acceptSql,
  retainSql,
  StatementTexts,
  statementValues,
  toKnownBarrier,
  type BarrierRow,
  type KnownBarrier,
} from './postgres-sql.js';
import { FENCE_MOVED, ROW_REQUIRED, createSchema, tablesFor, type Tables } from './postgres-schema.js';
import { readBarrier, readLogPage, readRetention } from './postgres-read.js';
import {
  databaseErrorCode,
  loadPg,
  type PostgresPool,
  type PostgresPoolClient,
  type PostgresQueryResult,
  type PostgresRow,
} from './postgres-driver.js';

export interface PostgresGuardOptions extends GuardAdapterOptions {
  /** Prefix of the guard's tables and functions. Default `quorumfence_`. Lowercase letters, digits, underscores. */
  readonly tablePrefix?: string;
}

/** Barriers remembered for the single-statement form; a miss costs one transaction-form write. */
export const BARRIER_CACHE_SIZE = 4096;

export class PostgresGuard extends GuardAdapter {
  readonly #pool: PostgresPool;
  readonly #t: Tables;
  /** The last barrier row this guard committed or read per resource, LRU-bounded (insertion order). */
  readonly #barriers = new BoundedMap<string, KnownBarrier>(BARRIER_CACHE_SIZE);
  readonly #forms: Record<WriteForm, number> = { statement: 0, transaction: 0 };
  readonly #statements: StatementTexts;

  private constructor(pool: PostgresPool, cluster: Cluster, options: PostgresGuardOptions) {
    super(cluster, options);
    this.#t = tablesFor(options.tablePrefix ?? 'quorumfence_');
    this.#statements = new StatementTexts(this.#t);
    this.#pool = pool;
  }

  /**
   * Creates the guard's tables and functions if missing and checks they belong to `cluster`.
   * The pool stays the caller's: `close` does not end it.
   * @throws QuorumFenceError CLUSTER_MISMATCH, STORE_CORRUPT, INVALID_ARGUMENT, DEPENDENCY_MISSING (pg not installed);
   *   pg errors when the server is unreachable
   */
  static async open(pool: PostgresPool, cluster: Cluster, options: PostgresGuardOptions = {}): Promise<PostgresGuard> {
    await loadPg();
    const guard = new PostgresGuard(pool, cluster, options);
    const client = await pool.connect();
    try {
      await createSchema(client, guard.#t, cluster);
    } finally {
      client.release();
    }
    return guard;
  }

  /** Table names, for callers that join against them or clean up. */
  get tables(): { readonly meta: string; readonly barrier: string; readonly log: string } {
    return this.#t;
  }

  /**
   * Attempts so far by form: `statement` counts those decided in one statement
   * (accepted, or refused by the statement itself); `transaction` the rest
   * that reached a barrier, `write`s and fallbacks alike.
   */
  get forms(): Readonly<Record<WriteForm, number>> {
    return { ...this.#forms };
  }

  /**
   * One guarded transaction: verify, lock and fence, run `mutation`'s SQL, raise
   * the barrier, append the log entry; durable when it resolves. A mutation
   * that throws is logged as `aborted` and its error rethrown.
   * @throws QuorumFenceError INVALID_ARGUMENT (request shape), CLOSED; pg errors; whatever `mutation` throws
   */
  async write<T = undefined>(request: GuardRequest, mutation?: PostgresMutation<T>): Promise<GuardResult<T>> {
    const admission = await this.#admit(request);
    return this.tracked(() => this.#transaction(request, admission, mutation));
  }

  /**
   * One guarded data statement in one round trip (autocommit), when this guard
   * knows the resource's barrier; otherwise, or when the barrier moved, the
   * transaction form. Same atomicity, refusals and log as `write`.
   * @throws QuorumFenceError INVALID_ARGUMENT (request or statement shape), CLOSED; the statement's pg error (logged `aborted`)
   */
  async writeStatement<R extends PostgresRow = PostgresRow>(
    request: GuardRequest,
    statement: FencedStatement,
  ): Promise<GuardResult<StatementResult<R>>> {
    const text = checkStatement(statement);
    const admission = await this.#admit(request);
    const values = [...(statement.values ?? [])];
    const returning = statement.returning ?? false;
    const requireRow = statement.requireRow ?? false;
    // A refusal value never reaches an accepted result (#attempt turns it into a refusal): hence the cast.
    const viaTransaction = () =>
      this.#transaction(request, admission, async (tx): Promise<StatementResult<R> | MutationRefusal> => {
        const result = await tx.query<R>(text, values);
        if (requireRow && result.rows.length === 0) return tx.refuse('version_mismatch', NO_ROW);
        return { rows: returning ? result.rows : [] };
      }) as Promise<GuardResult<StatementResult<R>>>;
    return this.tracked(async () => {
      const known = this.#barriers.get(request.resource);
      if (!admission.ok || known === undefined) return viaTransaction();
      const cached = known.barrier;
      const decision = this.core.decide(admission, cached);
      // Refusals are rare and must name the barrier exactly: decided again under the lock.
      if (!decision.ok) return viaTransaction();
      const next = decision.barrier;
      const entry = this.core.entry({
        seq: 0,
        request,
        admission,
        outcome: 'accepted',
        barrierBefore: cached.epoch,
        barrierAfter: next.epoch,
        version: null,
      });
      let result: PostgresQueryResult;
      try {
        const raise = !sameBarrier(cached, next);
        const prepared = this.#statements.get(text, values.length, { returning, requireRow, raise }, statement.prepare);
        result = await this.#pool.query({
          ...prepared,
          values: [
            ...values,
            ...statementValues(request.resource, known, raise ? next : undefined, JSON.stringify(entry)),
          ],
        });
      } catch (error) {
        const code = databaseErrorCode(error);
        if (code === FENCE_MOVED) {
          this.#barriers.delete(request.resource);
          return viaTransaction();
        }
        if (code === undefined) throw error; // not the statement's doing (connection, pool): nothing to log
        this.#forms.statement++;
        const reason = code === ROW_REQUIRED ? 'version_mismatch' : 'aborted';
        // When the server is what failed, the log append fails too: the caller hears the first error, not the second.
        const logged = await this.#appendRefused(this.refusalEntry(0, request, admission, reason, cached.epoch)).catch(
          () => {
            throw error;
          },
        );
        this.core.committed(logged);
        if (reason === 'aborted') throw error;
        return refusedResult(logged, NO_ROW, cached.epoch);
      }
      const committed: GuardLogEntry = {
        ...entry,
        seq: Number((result.rows[0] as { quorumfence_seq: string }).quorumfence_seq),
      };
      this.#remember(request.resource, { barrier: next, writes: known.writes + 1n });
      this.#forms.statement++;
      this.core.committed(committed);
      const rows = returning ? statementRows<R>(result.rows) : [];
      return {
        ok: true,
        seq: committed.seq,
        epoch: admission.token.grant.epoch,
        barrier: next.epoch,
        raised: decision.raised,
        version: null,
        result: { rows },
      };
    });
  }

  async #admit(request: GuardRequest): Promise<Admission> {
    this.checkOpen();
    checkGuardRequest(request, this.core.maxKeyBytes);
    checkNoNul(request);
    return await this.core.admit(request);
  }

  #remember(resource: string, known: KnownBarrier): void {
    this.#barriers.set(resource, known);
  }

  async #transaction<T>(
    request: GuardRequest,
    admission: Admission,
    mutation: PostgresMutation<T> | undefined,
  ): Promise<GuardResult<T>> {
    // Decided without the tables: answered and counted, never written (GuardCore.refusedAtAdmission).
    if (!admission.ok) return this.core.refusedAtAdmission(request, admission);
    this.#forms.transaction++;
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
  }

  async #attempt<T>(
    client: PostgresPoolClient,
    request: GuardRequest,
    admission: Extract<Admission, { ok: true }>,
    mutation: PostgresMutation<T> | undefined,
  ): Promise<GuardResult<T>> {
    const t = this.#t;
    const epoch = admission.token.grant.epoch;
    let open = true;
    try {
      const seen = this.#barriers.has(request.resource);
      const opened = await batch(client, lockSql(t, request.resource, !seen));
      const placeholder = !seen && opened[1]!.rowCount === 1;
      const locked = opened[opened.length - 1];
      const row = locked!.rows[0] as BarrierRow | undefined;
      if (row === undefined) throw new QuorumFenceError('INTERNAL', 'guard: the barrier row vanished under its lock');
      const known = toKnownBarrier(row);
      if (known) this.#remember(request.resource, known);
      const barrier = known?.barrier;
      const before = barrier?.epoch;
      const decision = this.core.decide(admission, barrier);
      if (!decision.ok) {
        const conflict = decision.reason === 'conflict';
        const entry = this.refusalEntry(
          0,
          request,
          admission,
          decision.reason,
          before,
          decision.reason === 'conflict' ? decision.barrierToken : undefined,
        );
        const removePlaceholder = placeholder
          ? `DELETE FROM ${t.barrier} WHERE resource = ${literal(request.resource)};`
          : '';
        const results = await batch(
          client,
          `${removePlaceholder}${appendSql(t, JSON.stringify(entry), request.resource, !conflict)};
           ${conflict ? '' : `${retainSql(t, this.maxRefusedLogEntries)};`} COMMIT`,
        );
        open = false;
        const logged = parseGuardLogEntry(results[placeholder ? 1 : 0]!.rows[0]!.entry);
        this.core.committed(logged);
        return refusedResult(logged, fenceMessage(decision, epoch), before);
      }

      let result: T;
      try {
        result = mutation ? await mutation(this.#context(client, request.resource, admission)) : (undefined as T);
      } catch (error) {
        await client.query('ROLLBACK');
        open = false;
        this.core.committed(await this.#appendRefused(this.refusalEntry(0, request, admission, 'aborted', before)));
        throw new MutationFailure(error);
      }
      if (isRefusal(result)) {
        await client.query('ROLLBACK');
        open = false;
        const entry = await this.#appendRefused(this.refusalEntry(0, request, admission, result.refusal, before));
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
      // One round trip: count the write and raise the barrier (when it changed), append the entry, commit.
      const accept = acceptSql(t, request.resource, sameBarrier(barrier, next) ? undefined : next);
      const results = await batch(
        client,
        `${accept}; ${appendSql(t, JSON.stringify(entry), request.resource, false)}; COMMIT`,
      );
      open = false;
      const committed = parseGuardLogEntry(results[1]!.rows[0]!.entry);
      // The row was locked since it was read: this write made its count one more.
      this.#remember(request.resource, { barrier: next, writes: BigInt(row.writes) + 1n });
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

  #context(
    client: PostgresPoolClient,
    resource: string,
    admission: Extract<Admission, { ok: true }>,
  ): PostgresWriteContext {
    return {
      resource,
      epoch: admission.token.grant.epoch,
      holder: admission.token.grant.holder,
      query: (text, values) => client.query(text, values),
      refuse: mutationRefusal,
    };
  }

  /** Appends a refused entry in its own transaction, with the retention step; returns it as stored. */
  async #appendRefused(entry: GuardLogEntry): Promise<GuardLogEntry> {
    const t = this.#t;
    const client = await this.#pool.connect();
    let broken = true;
    try {
      // One simple-query message runs as one implicit transaction.
      const [appended] = await batch(
        client,
        `${appendSql(t, JSON.stringify(entry), entry.resource, true)}; ${retainSql(t, this.maxRefusedLogEntries)}`,
      );
      broken = false;
      return parseGuardLogEntry(appended!.rows[0]!.entry);
    } finally {
      client.release(broken);
    }
  }

  /**
   * The committed barrier of a resource, or undefined when no write was ever accepted.
   * @throws QuorumFenceError for a name outside the name contract (writes check it in checkGuardRequest)
   */
  async barrier(resource: string): Promise<Barrier | undefined> {
    expectResource(resource);
    return readBarrier(this.#pool, this.#t, resource);
  }

  /** How the log's retention stands: refused entries kept (conflicts excepted) and dropped so far. */
  async logRetention(): Promise<LogRetention> {
    return { ...(await readRetention(this.#pool, this.#t)), maxRefused: this.maxRefusedLogEntries };
  }

  /**
   * Log entries with seq > after, in seq order. Within one resource, seq order
   * is decision order (the row lock is held while the seq is drawn). Across
   * resources, a transaction that drew a smaller seq may commit after one
   * that drew a larger seq, and rolled-back draws leave gaps, as do refused
   * entries dropped past maxRefusedLogEntries: a reader tailing a live log
   * should re-read from a little before its cursor; a reader of a quiescent
   * log (a history checker after a run) sees it whole.
   */
  async readLog(query: GuardLogQuery = {}): Promise<GuardLogEntry[]> {
    const { after, limit } = this.logPage(query);
    return readLogPage(this.#pool, this.#t, after, limit);
  }

  /** Nothing beyond the writes in flight (GuardAdapter.close): the pool is the caller's to end. */
  protected closeStore(): Promise<void> {
    return Promise.resolve();
  }
}
