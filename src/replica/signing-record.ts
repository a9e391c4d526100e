/**
 * The signing record: per resource, the highest epoch this replica signed,
 * the holder and grant digest at that epoch, and the replica-wide epoch
 * floor. It lives in LMDB (an embedded, crash-safe B-tree) in the replica's
 * data directory. Watermarks are never lowered; a record is removed only by
 * compaction, in the transaction that raises the floor to at least its epoch
 * (docs/storage.md).
 *
 * One entry point decides and writes: `checkAndRecord` (the rule itself is in
 * check-and-record.ts). It is atomic per
 * resource inside the store (a queue per resource: a second call for the same
 * resource starts only after the first one's write is durable), so no caller
 * can check, await, and write around another. Calls for different resources
 * run concurrently, and their writes share LMDB transactions (group commit:
 * every put issued in one event-loop turn lands in one transaction, and one
 * sync covers them all).
 *
 * Durability (S3), from lmdb-js 3.5.6's source:
 *   - With the default `overlappingSync: true` (non-Windows), the writer
 *     thread begins each transaction with MDB_NOSYNC (src/writer.cpp,
 *     WriteWorker::Write), and mdb_txn_commit calls the "visible" callback
 *     (txn_callback(ctx, 0) → SendUpdate) right after writing the meta page,
 *     *before* the overlapped mdb_env_sync0 (liblmdb/mdb.c,
 *     mdb_txn_commit, the `done:` block). The put's promise resolves on that
 *     callback, so it means committed, not flushed; only `db.flushed`
 *     (write.js: flushResolvers, run when the writer thread returns) waits
 *     for the sync. The README says as much under "Overlapping Sync Options".
 *   - With `overlappingSync: false` no MDB_NOSYNC is set: mdb_txn_commit
 *     runs mdb_env_sync0 (fsync/fdatasync of the data pages) before writing
 *     the meta page, and the meta page is written through a descriptor opened
 *     with O_DSYNC (MDB_O_META), so the commit returns only when both are on
 *     stable storage. The put's promise resolves after mdb_txn_commit returns
 *     (TXN_COMMITTED is set after it), i.e. after the flush.
 * We open with `overlappingSync: false`: then "visible to a reader" and
 * "on stable storage" are the same instant, even across a restart (with
 * overlapping sync, a restart on the same boot may read a committed but
 * unflushed transaction, and resending its partial would break S3 if the
 * machine then lost power). We still await `env.flushed` after the commit,
 * which costs a microtask, so that turning overlapping sync back on could
 * never silently weaken S3.
 *
 * Opening the data directory (its lock, the child-process probe, the identity
 * checks, and the files it holds besides LMDB's) is store-open.ts.
 */
import { FROZEN_KEY, frozenError, readFrozen, type FrozenState } from './freeze-marker.js';
import type { Database, RootDatabase } from 'lmdb';
import { QuorumFenceError } from '../common/errors.js';
import { bytesEqual, toHex } from '../common/bytes.js';
import { decodeResource } from '../common/check.js';
import { CheckAndRecord, type RecordChange } from './check-and-record.js';
import type { SignedRecord } from './policy.js';
import { decodeRecord, decodeStoredRecord, encodeRecord, parseFloor } from './record-codec.js';
import { storeCorrupt as corrupt } from './store-errors.js';
import type { StoreIdentity } from './store-identity.js';
import { openStore, signingRecordExists } from './store-open.js';

export { probeSigningRecord } from './store-probe.js';
export { signingRecordExists } from './store-open.js';
export type { RecordChange } from './check-and-record.js';
export { STORE_FORMAT, type StoreIdentity } from './store-identity.js';
export type { FrozenState } from './freeze-marker.js';

/** Meta key of the replica-wide epoch floor (docs/storage.md). */
const FLOOR_KEY = 'floor';

export interface SigningRecordOptions {
  /** Open without writing or locking (export, audits). The store must already exist. */
  readonly readOnly?: boolean;
  /** Called with the milliseconds each durable write took (commit + flush), for metrics. */
  readonly onFlush?: (ms: number) => void;
  /**
   * Read the whole store in a throwaway child process first, so a damaged
   * file is reported instead of crashing this process (default true; see
   * probeStore). Only a caller that would rather crash than wait ~0.2 s
   * (a test reading a store it just watched being written) turns it off.
   */
  readonly probe?: boolean;
  /** Wall-clock milliseconds, stamped on each record for the retention window (default Date.now). */
  readonly wallClock?: () => number;
  /**
   * A writable open may create the store when there is none (default false: STORE_MISSING). Only what knows the
   * replica is new says so: `replica init`, `keygen --data` and `dkg run` (a key just made has signed nothing),
   * `reshare inherit` and `replica import` (which raise it from the records they are given). A replica never
   * creates its own: starting from an empty record it would sign again what it signed before (docs/storage.md).
   */
  readonly create?: boolean;
}

/** What compaction may fold into the floor; called inside the compaction transaction, must not yield. */
export type CompactionTest = (resource: string, record: SignedRecord, grantedAtMs: number) => boolean;

export interface CompactionStep {
  /** Records removed (their epochs folded into the floor). */
  readonly compacted: number;
  /** Records looked at. */
  readonly scanned: number;
  /** Where the next step starts; undefined when the scan reached the end. */
  readonly next: Buffer | undefined;
}

export interface RecordEntry {
  readonly resource: string;
  readonly record: SignedRecord;
}

export interface ImportSummary {
  /** Entries that raised a watermark or created one. */
  readonly raised: number;
  /** Entries at or below the local watermark (same holder at an equal epoch), or at or below the floor. */
  readonly unchanged: number;
}

export class SigningRecord {
  readonly dir: string;
  readonly identity: StoreIdentity;
  /** Resources found when the store was opened (each counts as leased for maxTtl after a restart). */
  readonly openedWith: { readonly resources: number };
  readonly #env: RootDatabase;
  readonly #records: Database<Buffer, Buffer>;
  readonly #meta: Database<string, string>;
  readonly #wallClock: () => number;
  /** The durable floor (read at open, changed only inside a transaction that writes it). */
  #floor: bigint;
  /** Reshare freeze (see freeze()); loaded at open, set once, never cleared. */
  #frozen: FrozenState | undefined;
  /** The freeze being made durable, or made (a store opened frozen starts with one). */
  #freezing: Promise<FrozenState> | undefined;
  readonly #onFlush: ((ms: number) => void) | undefined;
  readonly #releaseLock: (() => void) | undefined;
  readonly #sections: CheckAndRecord;
  #closed = false;

  private constructor(
    dir: string,
    identity: StoreIdentity,
    env: RootDatabase,
    records: Database<Buffer, Buffer>,
    meta: Database<string, string>,
    options: SigningRecordOptions,
    releaseLock: (() => void) | undefined,
  ) {
    this.dir = dir;
    this.identity = identity;
    this.#env = env;
    this.#records = records;
    this.#meta = meta;
    this.#wallClock = options.wallClock ?? Date.now;
    this.#onFlush = options.onFlush;
    this.#releaseLock = releaseLock;
    this.#sections = new CheckAndRecord({
      read: (resource) => this.get(resource),
      floor: () => this.#floor,
      refuseIfFrozen: () => {
        if (this.#frozen) throw frozenError(this.#frozen);
      },
      writeDurably: (resource, record) => this.#writeDurably(resource, record),
    });
    // No scan: start-up must not grow with the store. LMDB's own statistics give the count, and the
    // child-process probe has read every page already; a damaged record is reported when it is read.
    try {
      this.#floor = parseFloor(meta.get(FLOOR_KEY), dir);
      this.#frozen = readFrozen(meta.get(FROZEN_KEY));
      if (this.#frozen) this.#freezing = Promise.resolve(this.#frozen);
      this.openedWith = { resources: (records.getStats() as { entryCount: number }).entryCount };
    } catch (error) {
      if (error instanceof QuorumFenceError) throw error;
      throw corrupt(dir, `cannot read it: ${(error as Error).message}`, error);
    }
  }

  /**
   * Opens the signing record in `dir` (creating it when there is none only with `options.create`).
   * @param expected the cluster and replica this store must belong to; a
   *   read-only open may leave it out to read any store.
   * @throws QuorumFenceError CLUSTER_MISMATCH (another cluster or replica index), STORE_CORRUPT
   *   (unreadable, inconsistent, or reset), STORE_MISSING (none there, and not told to create one),
   *   STORE_LOCKED (another live process has it open), IO_ERROR
   */
  static open(dir: string, expected: StoreIdentity | undefined, options: SigningRecordOptions = {}): SigningRecord {
    const store = openStore(dir, expected, options);
    try {
      return new SigningRecord(dir, store.identity, store.env, store.records, store.meta, options, store.releaseLock);
    } catch (error) {
      // The constructor reads the floor and the freeze marker: a store it cannot read stays neither open nor locked.
      void store.env.close().catch(() => undefined);
      store.releaseLock?.();
      throw error;
    }
  }

  /**
   * The replica-wide epoch floor: at least the epoch of every record compacted
   * away. A resource without a record is treated as signed up to the floor.
   */
  get floor(): bigint {
    return this.#floor;
  }

  /** Records in the store now (LMDB's count, no scan). */
  get size(): number {
    if (this.#closed) return 0;
    return (this.#records.getStats() as { entryCount: number }).entryCount;
  }

  /**
   * The durable record of a resource, or undefined when it has none (never signed, or compacted:
   * then `floor` stands for it). @throws QuorumFenceError STORE_CORRUPT, CLOSED
   */
  get(resource: string): SignedRecord | undefined {
    if (this.#closed) throw new QuorumFenceError('CLOSED', 'the signing record is closed');
    const bytes = this.#records.getBinary(Buffer.from(resource, 'utf8'));
    return bytes === undefined ? undefined : decodeRecord(bytes, this.dir);
  }

  /**
   * The one way to change the record. `decide` runs synchronously inside the
   * per-resource critical section with the current record; if it returns a
   * record, that record is written and flushed to stable storage before the
   * returned promise resolves (and before any later call for the resource
   * sees the record). A record that would lower the watermark or change the
   * holder at an equal epoch is refused (INTERNAL) whatever `decide` said.
   * @throws QuorumFenceError CLOSED, STORE_CORRUPT, INTERNAL (refused write, or LMDB failing); whatever `decide` throws
   */
  checkAndRecord<T>(resource: string, decide: (current: SignedRecord | undefined) => RecordChange<T>): Promise<T> {
    if (this.#closed) return Promise.reject(new QuorumFenceError('CLOSED', 'the signing record is closed'));
    return this.#sections.run(resource, decide);
  }

  /** Commit (which, with overlappingSync off, includes the sync), then the flush barrier (see the header). */
  async #writeDurably(resource: string, record: SignedRecord): Promise<void> {
    const started = performance.now();
    try {
      await this.#records.put(Buffer.from(resource, 'utf8'), Buffer.from(encodeRecord(record, this.#wallClock())));
      await this.#env.flushed;
    } catch (error) {
      throw new QuorumFenceError(
        'INTERNAL',
        `cannot write the signing record: ${(error as Error).message}`,
        undefined,
        { cause: error },
      );
    }
    this.#onFlush?.(performance.now() - started);
  }

  /** Every record, in resource order (UTF-8 byte order). @throws QuorumFenceError STORE_CORRUPT */
  *entries(): Generator<RecordEntry> {
    for (const { key, value } of this.#records.getRange({})) {
      let resource: string;
      try {
        resource = decodeResource(key, 'resource', { storedBeforeNameContract: true });
      } catch {
        throw corrupt(this.dir, 'a record key is not a valid resource name');
      }
      yield { resource, record: decodeRecord(value, this.dir) };
    }
  }

  /**
   * Raises watermarks from another copy of a signing record (import). All or
   * nothing, in one synchronous, durable transaction: an entry whose epoch
   * equals the local one with a different holder or digest refuses the whole
   * import; lower entries are ignored; higher or new ones replace the local
   * record (their leases count as running until maxTtl after the next start,
   * as every record's does). The floor becomes the larger of the two floors,
   * and an entry at or below it for a resource without a local record is
   * ignored: the floor already stands for it.
   * Waits until no checkAndRecord call is queued, then runs without yielding,
   * so no grant can be decided against a watermark the import is raising.
   * @throws QuorumFenceError BAD_INTERCHANGE (conflict), CLOSED, INTERNAL
   */
  async raiseFrom(entries: readonly RecordEntry[], floor = 0n): Promise<ImportSummary> {
    while (!this.#sections.idle) await this.#sections.drain();
    if (this.#closed) throw new QuorumFenceError('CLOSED', 'the signing record is closed');
    let raised = 0;
    let unchanged = 0;
    const newFloor = floor > this.#floor ? floor : this.#floor;
    const grantedAtMs = this.#wallClock();
    this.#env.transactionSync(() => {
      for (const { resource, record } of entries) {
        const current = this.get(resource);
        if (current && record.epoch === current.epoch) {
          if (!bytesEqual(record.holder, current.holder) || !bytesEqual(record.grantDigest, current.grantDigest)) {
            throw new QuorumFenceError(
              'BAD_INTERCHANGE',
              `conflict at "${resource.slice(0, 64)}" epoch ${record.epoch}: the file names holder ${toHex(record.holder).slice(0, 16)}…, this store ${toHex(current.holder).slice(0, 16)}…; nothing was imported`,
              { resource, epoch: record.epoch.toString() },
            );
          }
          unchanged++;
        } else if ((current && record.epoch < current.epoch) || (!current && record.epoch <= newFloor)) {
          unchanged++;
        } else {
          this.#records.putSync(Buffer.from(resource, 'utf8'), Buffer.from(encodeRecord(record, grantedAtMs)));
          raised++;
        }
      }
      if (newFloor > this.#floor) this.#meta.putSync(FLOOR_KEY, newFloor.toString());
    });
    this.#floor = newFloor;
    return { raised, unchanged };
  }

  /**
   * One step of compaction: looks at up to `limit` records from `from` on and
   * removes those `test` accepts, raising the floor to their largest epoch,
   * in one synchronous, durable transaction. Runs without yielding, and
   * skips every resource with a checkAndRecord call queued or running, so no
   * decision is ever taken against a record this step removes, and the floor
   * is raised in the same commit that removes the records it stands for.
   * @throws QuorumFenceError CLOSED, STORE_CORRUPT, INTERNAL
   */
  compactStep(from: Buffer | undefined, limit: number, test: CompactionTest): CompactionStep {
    if (this.#closed) throw new QuorumFenceError('CLOSED', 'the signing record is closed');
    let compacted = 0;
    let scanned = 0;
    let next: Buffer | undefined;
    let floor = this.#floor;
    try {
      this.#env.transactionSync(() => {
        const doomed: Buffer[] = [];
        for (const { key, value } of this.#records.getRange(from ? { start: from } : {})) {
          if (scanned === limit) {
            next = Buffer.from(key);
            break;
          }
          scanned++;
          const resource = key.toString('utf8');
          if (this.#sections.isBusy(resource)) continue;
          const { record, grantedAtMs } = decodeStoredRecord(value, this.dir);
          if (!test(resource, record, grantedAtMs)) continue;
          doomed.push(Buffer.from(key));
          if (record.epoch > floor) floor = record.epoch;
        }
        for (const key of doomed) this.#records.removeSync(key);
        compacted = doomed.length;
        if (floor > this.#floor) this.#meta.putSync(FLOOR_KEY, floor.toString());
      });
    } catch (error) {
      if (error instanceof QuorumFenceError) throw error;
      throw new QuorumFenceError(
        'INTERNAL',
        `cannot compact the signing record: ${(error as Error).message}`,
        undefined,
        {
          cause: error,
        },
      );
    }
    this.#floor = floor;
    return { compacted, scanned, next };
  }

  /** The reshare freeze, when this store is frozen. */
  get frozen(): FrozenState | undefined {
    return this.#frozen;
  }

  /**
   * Freezes the store for a reshare, on this and every later open. From the call on, every
   * checkAndRecord that has not yet decided refuses with REPLICA_FROZEN; the calls already past
   * that check (deciding, or flushing their record) are waited for; then the marker is written
   * and flushed. So when this resolves, the store holds every grant it will ever have signed, and an
   * export taken afterwards is final. It works while the replica serves (a steady stream of grants
   * cannot starve it: new ones are refused at once). Calls while a freeze runs share it; freezing
   * a frozen store keeps the first freeze.
   * @throws QuorumFenceError CLOSED, INTERNAL (the marker could not be flushed; grants stay refused)
   */
  freeze(reason: string): Promise<FrozenState> {
    if (this.#closed) return Promise.reject(new QuorumFenceError('CLOSED', 'the signing record is closed'));
    this.#freezing ??= this.#freezeDurably(reason).catch((error: unknown) => {
      this.#freezing = undefined; // a later call may try the write again; grants stay refused meanwhile
      throw error;
    });
    return this.#freezing;
  }

  async #freezeDurably(reason: string): Promise<FrozenState> {
    const state: FrozenState = this.#frozen ?? { at: new Date().toISOString(), reason: reason.slice(0, 200) };
    // Before any await: no decision taken after this line signs.
    this.#frozen = state;
    while (!this.#sections.idle) await this.#sections.drain();
    if (this.#closed) throw new QuorumFenceError('CLOSED', 'the signing record is closed');
    try {
      this.#meta.putSync(FROZEN_KEY, JSON.stringify(state));
      await this.#env.flushed;
    } catch (error) {
      throw new QuorumFenceError('INTERNAL', `cannot record the freeze: ${(error as Error).message}`, undefined, {
        cause: error,
      });
    }
    return state;
  }

  /** Waits for queued calls, then closes LMDB and releases the lock. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    while (!this.#sections.idle) await this.#sections.drain();
    this.#closed = true;
    try {
      await this.#env.close();
    } finally {
      this.#releaseLock?.();
    }
  }
}

/**
 * Makes the empty signing record of a new replica in `dir`, and closes it: for the commands that know the replica
 * is new (SigningRecordOptions.create). Refuses a directory that holds a record already: a record is never
 * replaced by an empty one.
 * @throws QuorumFenceError FILE_EXISTS, and SigningRecord.open's
 */
export async function createSigningRecord(dir: string, identity: StoreIdentity): Promise<void> {
  if (signingRecordExists(dir))
    throw new QuorumFenceError(
      'FILE_EXISTS',
      `${dir} already holds a signing record; a replica's record is made once and never replaced by an empty one ` +
        `(it is what stops the replica from signing twice)`,
      { dir },
    );
  const store = SigningRecord.open(dir, identity, { create: true, probe: false });
  await store.close();
}
