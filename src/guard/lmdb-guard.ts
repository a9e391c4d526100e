/**
 * The embedded guard store (the default): LMDB through lmdb-js. Barrier,
 * data, guard log and the log's sequence counter live in one LMDB
 * environment, so each attempt's check-barrier + raise-barrier + mutation +
 * log append is one LMDB write transaction: atomic, and isolated because LMDB
 * has a single writer.
 *
 * Durability. lmdb-js enables `overlappingSync` by default on Linux and
 * macOS: a transaction's promise resolves when it is *committed* (visible),
 * and the fsync runs afterwards, overlapping the next transaction. Its README
 * ("overlappingSync", "db.flushed") says the durable point is the
 * environment's `flushed` promise: "resolves when all previous writes have
 * been committed and fully flushed/synced to disk". So `write` awaits the
 * transaction and then `flushed` before it returns: a caller never sees an
 * acceptance that a crash could take back (S4: one atomic, durable step).
 * Without overlappingSync (Windows) the commit promise already waits for the
 * sync and `flushed` resolves at once, so the same code is right there too.
 * Never open this store with `noSync`.
 *
 * Group commit: lmdb-js runs every transaction callback queued in one event
 * turn inside one LMDB transaction (`eventTurnBatching`, on by default), so
 * concurrent writes share one commit and one fsync, and with overlappingSync
 * the fsync of one batch overlaps the commit of the next. Each callback still
 * sees the writes of the callbacks before it, so decisions stay sequential.
 *
 * The caller's mutation runs inside the transaction, synchronously, against a
 * buffer (reads see its own writes); the buffer is applied only when it
 * returns, so a mutation that throws or refuses leaves nothing behind but the
 * log entry. A token only opens its own resource: the mutation sees that
 * resource's keys and no others.
 */
import { open, type Database, type RootDatabase } from 'lmdb';
import { QuorumFenceError } from '../common/errors.js';
import { decodeStoreKey, storeKey } from '../common/bytes.js';
import { expectGuardKey, expectInteger, expectResource, expectString } from '../common/check.js';
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
import type { GuardLogEntry, GuardLogQuery } from './log.js';
import {
  DEFAULT_MAX_LOG_PAGE,
  DEFAULT_MAX_REFUSED_LOG_ENTRIES,
  GuardAdapter,
  type GuardAdapterOptions,
  type LogRetention,
} from './adapter.js';
import {
  BufferedContext,
  isRefusal,
  type DataRecord,
  type LmdbMutation,
  type LmdbWriteContext,
  type MutationRefusal,
  type StoredValue,
  type VersionCondition,
} from './lmdb-context.js';

export type { LmdbMutation, LmdbWriteContext, MutationRefusal, StoredValue, VersionCondition };
export { DEFAULT_MAX_LOG_PAGE, DEFAULT_MAX_REFUSED_LOG_ENTRIES };

/**
 * v2: barrier and data keys are storeKey encodings (length-prefixed UTF-8
 * parts). v1 used lmdb-js's default key encoding, under which different
 * (resource, key) pairs could share a key; v1 stores are refused.
 */
export const LMDB_GUARD_FORMAT = 'quorumfence/guard-lmdb/v2';
const REFUSED_FORMATS: Readonly<Record<string, string>> = {
  'quorumfence/guard-lmdb/v1':
    "it was written by an earlier build whose store keys could let one resource write another resource's data; " +
    'start from an empty directory (the barriers rebuild from the next accepted tokens)',
};

export interface LmdbGuardOptions extends GuardAdapterOptions {
  /** Largest value one put may store, in bytes. Default DEFAULT_MAX_VALUE_BYTES. */
  readonly maxValueBytes?: number;
}

/** 1 MiB: the reference resource's default body limit; LMDB handles larger, but a guard has no reason to. */
export const DEFAULT_MAX_VALUE_BYTES = 1 << 20;

export interface LmdbWriteRequest extends GuardRequest {
  readonly ifVersion?: VersionCondition;
}

interface BarrierRecord {
  epoch: string;
  tokenDigest: Uint8Array;
  token: Uint8Array;
  replayHigh: string | null;
  replaySeen: string | null;
}

function toBarrier(record: BarrierRecord): Barrier {
  return {
    epoch: BigInt(record.epoch),
    tokenDigest: record.tokenDigest,
    token: record.token,
    replay:
      record.replayHigh === null ? null : { high: BigInt(record.replayHigh), seen: BigInt(record.replaySeen ?? '0') },
  };
}

function toRecord(barrier: Barrier): BarrierRecord {
  return {
    epoch: barrier.epoch.toString(),
    tokenDigest: barrier.tokenDigest,
    token: barrier.token,
    replayHigh: barrier.replay ? barrier.replay.high.toString() : null,
    replaySeen: barrier.replay ? barrier.replay.seen.toString() : null,
  };
}

type TxnOutcome<T> = { entry: GuardLogEntry; result: GuardResult<T>; thrown?: unknown };

export class LmdbGuard extends GuardAdapter {
  readonly #root: RootDatabase;
  readonly #barriers: Database<BarrierRecord, Buffer>;
  readonly #data: Database<DataRecord, Buffer>;
  readonly #log: Database<GuardLogEntry, number>;
  readonly #meta: Database<unknown, string>;
  /** seq of every refused entry the log still holds (conflicts excepted), oldest first: the retention queue. */
  readonly #refused: Database<true, number>;
  readonly #maxValueBytes: number;

  private constructor(root: RootDatabase, cluster: Cluster, options: LmdbGuardOptions) {
    super(cluster, options);
    this.#maxValueBytes = expectInteger(options.maxValueBytes ?? DEFAULT_MAX_VALUE_BYTES, 0, 1 << 30, 'maxValueBytes');
    this.#root = root;
    // Binary keys built by storeKey: injective, unlike the default key encoding (see LMDB_GUARD_FORMAT).
    this.#barriers = root.openDB({ name: 'barrier', keyEncoding: 'binary' });
    this.#data = root.openDB({ name: 'data', keyEncoding: 'binary' });
    this.#log = root.openDB({ name: 'log' });
    this.#meta = root.openDB({ name: 'meta' });
    this.#refused = root.openDB({ name: 'refused' });
  }

  /**
   * Opens (or creates) the store in directory `path`, and checks it belongs to
   * `cluster`: barriers set by another cluster's tokens mean nothing here.
   * @throws QuorumFenceError CLUSTER_MISMATCH, STORE_CORRUPT, IO_ERROR, INVALID_ARGUMENT (options)
   */
  static async open(path: string, cluster: Cluster, options: LmdbGuardOptions = {}): Promise<LmdbGuard> {
    expectString(path, 'path');
    let root: RootDatabase;
    try {
      root = open({ path, maxDbs: 8 });
    } catch (error) {
      throw new QuorumFenceError(
        'IO_ERROR',
        `cannot open the guard store at ${path}: ${(error as Error).message}`,
        { path },
        { cause: error },
      );
    }
    let guard: LmdbGuard;
    try {
      guard = new LmdbGuard(root, cluster, options);
      await guard.#checkIdentity(cluster);
    } catch (error) {
      await root.close();
      throw error;
    }
    return guard;
  }

  async #checkIdentity(cluster: Cluster): Promise<void> {
    const format = this.#meta.get('format');
    const clusterId = this.#meta.get('clusterId');
    if (format === undefined && clusterId === undefined && this.#meta.get('lastSeq') === undefined) {
      await this.#meta.transaction(() => {
        this.#meta.putSync('format', LMDB_GUARD_FORMAT);
        this.#meta.putSync('clusterId', cluster.idHex);
      });
      await this.#root.flushed;
      return;
    }
    const refusedBecause = typeof format === 'string' ? REFUSED_FORMATS[format] : undefined;
    if (refusedBecause !== undefined)
      throw new QuorumFenceError('STORE_CORRUPT', `guard store: format ${format} is refused: ${refusedBecause}`);
    if (format !== LMDB_GUARD_FORMAT) {
      throw new QuorumFenceError(
        'STORE_CORRUPT',
        `guard store: unknown format ${JSON.stringify(format)} (expected ${LMDB_GUARD_FORMAT})`,
      );
    }
    if (clusterId !== cluster.idHex) {
      throw new QuorumFenceError(
        'CLUSTER_MISMATCH',
        `guard store belongs to cluster ${String(clusterId).slice(0, 16)}…, not ${cluster.idHex.slice(0, 16)}…`,
      );
    }
  }

  /**
   * One guarded attempt: verify, fence, apply `mutation`, append the log
   * entry, all in one durable transaction. Resolves once it is on disk.
   * Expected refusals are values; a refusal at admission (the token or the
   * proof) is answered without a transaction and not logged; a mutation that
   * throws is logged as `aborted` and its error rethrown.
   * @throws QuorumFenceError INVALID_ARGUMENT (request shape), CLOSED, and whatever `mutation` throws
   */
  async write<T = undefined>(request: LmdbWriteRequest, mutation?: LmdbMutation<T>): Promise<GuardResult<T>> {
    this.checkOpen();
    checkGuardRequest(request, this.core.maxKeyBytes);
    if (request.ifVersion !== undefined) {
      expectInteger(request.ifVersion.version, 0, Number.MAX_SAFE_INTEGER, 'ifVersion.version');
      expectGuardKey(request.ifVersion.key, this.core.maxKeyBytes, 'ifVersion.key');
    }
    return this.tracked(async () => {
      const admission = await this.core.admit(request);
      if (!admission.ok) return this.core.refusedAtAdmission(request, admission);
      const outcome = await this.#root.transaction(() => this.#decideAndApply(request, admission, mutation));
      // The durable point (see the header): committed is not yet flushed under overlappingSync.
      await this.#root.flushed;
      this.core.committed(outcome.entry);
      if ('thrown' in outcome) throw outcome.thrown;
      return outcome.result;
    });
  }

  /** Runs inside the LMDB write transaction: reads, decides and writes synchronously. */
  #decideAndApply<T>(
    request: LmdbWriteRequest,
    admission: Extract<Admission, { ok: true }>,
    mutation: LmdbMutation<T> | undefined,
  ): TxnOutcome<T> {
    const seq = ((this.#meta.get('lastSeq') as number | undefined) ?? 0) + 1;
    const barrierKey = storeKey(request.resource);
    const stored = this.#barriers.get(barrierKey);
    const barrier = stored ? toBarrier(stored) : undefined;
    const before = barrier?.epoch;

    const refuse = (
      reason: GuardLogEntry['outcome'],
      message: string,
      conflictingToken?: Uint8Array,
    ): TxnOutcome<T> => {
      const entry = this.refusalEntry(seq, request, admission, reason, before, conflictingToken);
      this.#meta.putSync('lastSeq', seq);
      this.#log.putSync(seq, entry);
      if (reason !== 'conflict') this.#retainRefused(seq);
      return { entry, result: refusedResult(entry, message, before) };
    };

    const epoch = admission.token.grant.epoch;
    const decision = this.core.decide(admission, barrier);
    if (!decision.ok) {
      return refuse(
        decision.reason,
        fenceMessage(decision, epoch),
        decision.reason === 'conflict' ? decision.barrierToken : undefined,
      );
    }
    if (request.ifVersion !== undefined) {
      const current = this.#data.get(storeKey(request.resource, request.ifVersion.key))?.version ?? 0;
      if (current !== request.ifVersion.version) {
        return refuse(
          'version_mismatch',
          `key ${JSON.stringify(request.ifVersion.key)} is at version ${current}, not ${request.ifVersion.version}`,
        );
      }
    }

    const context = new BufferedContext(
      request.resource,
      epoch,
      admission.token.grant.holder,
      seq,
      this.#data,
      this.core.maxKeyBytes,
      this.#maxValueBytes,
    );
    let result: T;
    try {
      result = mutation ? mutation(context) : (undefined as T);
      if (typeof (result as { then?: unknown } | null)?.then === 'function') {
        throw new QuorumFenceError(
          'INVALID_ARGUMENT',
          'an LMDB guard mutation must be synchronous (it runs inside the write transaction)',
        );
      }
    } catch (error) {
      return { ...refuse('aborted', `the mutation threw: ${(error as Error).message}`), thrown: error };
    }
    if (isRefusal(result)) return refuse(result.refusal, result.message);

    const version = context.changes.size > 0 ? seq : null;
    for (const [key, value] of context.changes) {
      if (value === null) this.#data.removeSync(storeKey(request.resource, key));
      else this.#data.putSync(storeKey(request.resource, key), { value, version: seq });
    }
    if (!sameBarrier(barrier, decision.barrier)) this.#barriers.putSync(barrierKey, toRecord(decision.barrier));
    const entry = this.core.entry({
      seq,
      request,
      admission,
      outcome: 'accepted',
      barrierBefore: before,
      barrierAfter: decision.barrier.epoch,
      version,
    });
    this.#meta.putSync('lastSeq', seq);
    this.#log.putSync(seq, entry);
    return {
      entry,
      result: { ok: true, seq, epoch, barrier: decision.barrier.epoch, raised: decision.raised, version, result },
    };
  }

  /** Inside the write transaction: queue a refused entry, dropping the oldest past maxRefusedLogEntries. */
  #retainRefused(seq: number): void {
    this.#refused.putSync(seq, true);
    let kept = ((this.#meta.get('refusedKept') as number | undefined) ?? 0) + 1;
    if (kept > this.maxRefusedLogEntries) {
      let dropped = (this.#meta.get('refusedDropped') as number | undefined) ?? 0;
      for (const oldest of this.#refused.getKeys({ limit: kept - this.maxRefusedLogEntries })) {
        this.#log.removeSync(oldest);
        this.#refused.removeSync(oldest);
        kept--;
        dropped++;
      }
      this.#meta.putSync('refusedDropped', dropped);
    }
    this.#meta.putSync('refusedKept', kept);
  }

  /** How the log's retention stands: refused entries kept (conflicts excepted) and dropped so far. */
  logRetention(): LogRetention {
    return {
      refusedKept: (this.#meta.get('refusedKept') as number | undefined) ?? 0,
      refusedDropped: (this.#meta.get('refusedDropped') as number | undefined) ?? 0,
      maxRefused: this.maxRefusedLogEntries,
    };
  }

  /**
   * A plain, unfenced read of one key (the committed state).
   * @throws QuorumFenceError for a resource or key outside the name contract
   */
  read(resource: string, key: string): StoredValue | undefined {
    expectResource(resource);
    expectGuardKey(key, this.core.maxKeyBytes);
    const record = this.#data.get(storeKey(resource, key));
    return record && { value: record.value, version: record.version };
  }

  /**
   * Every key of a resource with its value and version (for tests and tools;
   * unbounded), in store order: shorter keys first, then by UTF-8 bytes.
   */
  entries(resource: string): { key: string; value: Uint8Array; version: number }[] {
    expectResource(resource);
    const prefix = storeKey(resource);
    // Every key part starts with its u16 length, at most 1024: its first byte is below 0xff.
    const end = Buffer.concat([prefix, Buffer.of(0xff)]);
    const out: { key: string; value: Uint8Array; version: number }[] = [];
    for (const { key, value } of this.#data.getRange({ start: prefix, end })) {
      const [owner, name] = decodeStoreKey(key);
      if (owner !== resource || name === undefined) continue;
      out.push({ key: name, value: value.value, version: value.version });
    }
    return out;
  }

  /** The barrier of a resource, or undefined when no write was ever accepted. */
  barrier(resource: string): Barrier | undefined {
    expectResource(resource);
    const record = this.#barriers.get(storeKey(resource));
    return record && toBarrier(record);
  }

  /** Every resource that has a barrier, in store order: shorter names first, then by UTF-8 bytes (for tools and tests). */
  resources(): string[] {
    return [...this.#barriers.getKeys()].map((key) => decodeStoreKey(key)[0]!);
  }

  /** The last seq written (0 for an empty log). */
  lastSeq(): number {
    return (this.#meta.get('lastSeq') as number | undefined) ?? 0;
  }

  /**
   * Log entries with seq > after, in seq order. Accepted and conflict entries
   * are never removed; refused ones past maxRefusedLogEntries are, oldest
   * first, so seqs may skip where they were.
   */
  readLog(query: GuardLogQuery = {}): GuardLogEntry[] {
    const { after, limit } = this.logPage(query);
    return [...this.#log.getRange({ start: after + 1, limit }).map(({ value }) => value)];
  }

  /** After the writes in flight (GuardAdapter.close): the environment. */
  protected async closeStore(): Promise<void> {
    await this.#root.close();
  }
}
