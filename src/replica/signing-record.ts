/**
 * The signing record: per resource, the highest epoch this replica signed,
 * the holder and grant digest at that epoch, and whether the holder released
 * it. It lives in LMDB (an embedded, crash-safe B-tree) in the replica's data
 * directory. Watermarks are never deleted or lowered.
 *
 * One entry point decides and writes: `checkAndRecord`. It is atomic per
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
 * The data directory holds, besides LMDB's files, `signing-record.json` (the
 * cluster id and replica index, written at creation) and `replica.lock` (the
 * pid of the process that has the store open for writing).
 */
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import { QuorumFenceError } from '../common/errors.js';
import { bytesEqual, fromHex, toHex } from '../common/bytes.js';
import { decodeResource } from '../common/check.js';
import { writeFileDurably } from '../common/files.js';
import { MAX_EPOCH, MIN_EPOCH } from '../common/limits.js';
import type { SignedRecord } from './policy.js';

export const STORE_FORMAT = 'quorumfence/signing-record-store/v1';
const IDENTITY_FILE = 'signing-record.json';
const LOCK_FILE = 'replica.lock';
const IDENTITY_KEY = 'identity';

/** version(1) ‖ flags(1) ‖ epoch(8) ‖ holder(32) ‖ grantDigest(32) */
const RECORD_VERSION = 1;
const RECORD_BYTES = 74;
const FLAG_RELEASED = 0x01;

export interface StoreIdentity {
  readonly clusterId: Uint8Array;
  readonly replicaIndex: number;
}

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
}

export interface RecordEntry {
  readonly resource: string;
  readonly record: SignedRecord;
}

/** What a caller decides inside the per-resource critical section. */
export interface RecordChange<T> {
  /** Write this record (durably) before returning; absent when nothing durable changes. */
  readonly record?: SignedRecord;
  readonly result: T;
}

export interface ImportSummary {
  /** Entries that raised a watermark or created one. */
  readonly raised: number;
  /** Entries at or below the local watermark (same holder at an equal epoch). */
  readonly unchanged: number;
}

function corrupt(dir: string, message: string, cause?: unknown): QuorumFenceError {
  return new QuorumFenceError(
    'STORE_CORRUPT',
    `signing record in ${dir}: ${message}`,
    { dir },
    cause === undefined ? undefined : { cause },
  );
}

export function encodeRecord(record: SignedRecord): Uint8Array {
  const out = new Uint8Array(RECORD_BYTES);
  const view = new DataView(out.buffer);
  out[0] = RECORD_VERSION;
  out[1] = record.released ? FLAG_RELEASED : 0;
  view.setBigUint64(2, record.epoch);
  out.set(record.holder, 10);
  out.set(record.grantDigest, 42);
  return out;
}

/** @throws QuorumFenceError STORE_CORRUPT */
export function decodeRecord(bytes: Uint8Array, where: string): SignedRecord {
  if (bytes.length !== RECORD_BYTES || bytes[0] !== RECORD_VERSION || (bytes[1]! & ~FLAG_RELEASED) !== 0) {
    throw corrupt(where, `a record has an unknown layout (${bytes.length} bytes, version ${bytes[0]})`);
  }
  const epoch = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getBigUint64(2);
  if (epoch < MIN_EPOCH || epoch > MAX_EPOCH) throw corrupt(where, `a record has epoch ${epoch} outside 1 .. 2^63-1`);
  return {
    epoch,
    // Plain Uint8Array copies: LMDB hands out Buffers over its own memory.
    holder: Uint8Array.from(bytes.subarray(10, 42)),
    grantDigest: Uint8Array.from(bytes.subarray(42, 74)),
    released: (bytes[1]! & FLAG_RELEASED) !== 0,
  };
}

/**
 * Whether `next` may replace `current`: a higher epoch, or the same grant
 * with its released flag set. Anything else would lower a watermark or sign
 * a second holder, so the store refuses it whatever the caller decided.
 */
export function mayReplace(current: SignedRecord | undefined, next: SignedRecord): boolean {
  if (!current) return true;
  if (next.epoch > current.epoch) return true;
  return (
    next.epoch === current.epoch &&
    bytesEqual(next.holder, current.holder) &&
    bytesEqual(next.grantDigest, current.grantDigest) &&
    (next.released || !current.released)
  );
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Takes `DIR/replica.lock`: two processes signing from one store would each
 * serialise only their own requests, and could both sign one (resource, epoch).
 * A lock left by a dead process (SIGKILL) is taken over.
 * @throws QuorumFenceError STORE_LOCKED, IO_ERROR
 */
function takeLock(dir: string): () => void {
  const path = join(dir, LOCK_FILE);
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const fd = openSync(path, 'wx', 0o600);
      try {
        writeSync(fd, `${process.pid}\n`);
      } finally {
        closeSync(fd);
      }
      return () => {
        try {
          if (readFileSync(path, 'utf8').trim() === String(process.pid)) unlinkSync(path);
        } catch {
          // Already gone: nothing to release.
        }
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') {
        throw new QuorumFenceError(
          'IO_ERROR',
          `cannot create ${path}: ${(error as Error).message}`,
          { path },
          { cause: error },
        );
      }
    }
    let owner: number;
    try {
      owner = Number(readFileSync(path, 'utf8').trim());
    } catch {
      continue; // Removed between our open and read: try again.
    }
    if (Number.isSafeInteger(owner) && owner > 0 && isAlive(owner)) {
      throw new QuorumFenceError(
        'STORE_LOCKED',
        `data directory ${dir} is in use by process ${owner}${owner === process.pid ? ' (this process)' : ''}; stop it first (or remove ${path} if no replica runs)`,
        { dir, pid: owner },
      );
    }
    try {
      unlinkSync(path); // Stale: its process is gone.
    } catch {
      // Someone else took it over first; the next attempt sees their lock.
    }
  }
  throw new QuorumFenceError('STORE_LOCKED', `could not take the lock ${path}`, { dir });
}

/**
 * LMDB trusts its pages: opening or reading a damaged data.mdb can crash the
 * whole process (a segfault, not an exception). So before this process opens
 * an existing store, a throwaway child process opens it read-only and reads
 * every page we will touch; if that child dies by a signal, the store is
 * reported corrupt with a clear error instead of taking the replica down.
 */
const PROBE_SCRIPT = `
const { open } = require(process.argv[1]);
const env = open({ path: process.argv[2], readOnly: true, maxDbs: 4 });
for (const name of ['records', 'meta']) {
  const db = env.openDB(name, { encoding: 'binary', keyEncoding: 'binary' });
  if (db) for (const entry of db.getRange({})) void entry;
}
`;
/** Reading every record of even a large store takes seconds at most; a minute means something is wrong. */
const PROBE_TIMEOUT_MS = 60_000;

function probeArgs(dir: string): string[] {
  return ['-e', PROBE_SCRIPT, createRequire(import.meta.url).resolve('lmdb'), dir];
}

function probeVerdict(dir: string, signal: NodeJS.Signals | null, error: Error | undefined): void {
  if (error) throw corrupt(dir, `cannot check it: ${error.message}`, error);
  // A JS-level error (a missing table, say) is left to the real open, which reports it precisely.
  if (signal) throw corrupt(dir, `LMDB crashed (${signal}) reading data.mdb: the file is damaged or not an LMDB file`);
}

function probeStore(dir: string): void {
  const probe = spawnSync(process.execPath, probeArgs(dir), { stdio: 'ignore', timeout: PROBE_TIMEOUT_MS });
  probeVerdict(dir, probe.signal, probe.error);
}

/**
 * The same check as the `probe` option of SigningRecord.open, in the
 * background, so a starting replica can overlap it with loading its key;
 * then open with `probe: false`. Resolves at once when there is no store yet.
 * @throws QuorumFenceError STORE_CORRUPT
 */
export function probeSigningRecord(dir: string): Promise<void> {
  if (!existsSync(join(dir, 'data.mdb'))) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, probeArgs(dir), { stdio: 'ignore', timeout: PROBE_TIMEOUT_MS });
    let failure: Error | undefined;
    child.once('error', (error) => (failure = error));
    child.once('close', (_code, signal) => {
      try {
        probeVerdict(dir, signal, failure);
        resolve();
      } catch (error) {
        reject(error);
      }
    });
  });
}

interface IdentityJson {
  format: string;
  clusterId: string;
  replica: number;
}

function parseIdentity(text: string | undefined, where: string): StoreIdentity {
  let json: Partial<IdentityJson>;
  try {
    json = JSON.parse(text ?? '') as Partial<IdentityJson>;
  } catch {
    throw corrupt(where, 'its identity is not valid JSON');
  }
  if (json.format !== STORE_FORMAT) throw corrupt(where, `unknown store format ${JSON.stringify(json.format)}`);
  let clusterId: Uint8Array;
  try {
    clusterId = fromHex(json.clusterId, 32, 'clusterId');
  } catch {
    throw corrupt(where, 'its identity has no valid cluster id');
  }
  if (typeof json.replica !== 'number' || !Number.isInteger(json.replica) || json.replica < 1) {
    throw corrupt(where, 'its identity has no valid replica index');
  }
  return { clusterId, replicaIndex: json.replica };
}

function identityText(identity: StoreIdentity): string {
  const json: IdentityJson = {
    format: STORE_FORMAT,
    clusterId: toHex(identity.clusterId),
    replica: identity.replicaIndex,
  };
  return JSON.stringify(json);
}

export class SigningRecord {
  readonly dir: string;
  readonly identity: StoreIdentity;
  /** Resources and unreleased records found when the store was opened. */
  readonly openedWith: { readonly resources: number; readonly unreleased: number };
  readonly #env: RootDatabase;
  readonly #records: Database<Buffer, Buffer>;
  readonly #onFlush: ((ms: number) => void) | undefined;
  readonly #releaseLock: (() => void) | undefined;
  /** Per resource: the promise of the last queued call (the per-resource critical section). */
  readonly #tails = new Map<string, Promise<void>>();
  #closed = false;
  /** Reshare freeze (see freeze()); loaded at open, set once, never cleared. */
  #frozen: FrozenState | undefined;

  private constructor(
    dir: string,
    identity: StoreIdentity,
    env: RootDatabase,
    records: Database<Buffer, Buffer>,
    options: SigningRecordOptions,
    releaseLock: (() => void) | undefined,
  ) {
    this.dir = dir;
    this.identity = identity;
    this.#env = env;
    this.#records = records;
    this.#onFlush = options.onFlush;
    this.#releaseLock = releaseLock;
    let resources = 0;
    let unreleased = 0;
    // Decode every record once at open: a corrupt store must stop the start, not a request hours later.
    for (const { record } of this.entries()) {
      resources++;
      if (!record.released) unreleased++;
    }
    this.openedWith = { resources, unreleased };
    this.#frozen = readFrozen(env, dir);
  }

  /**
   * Opens (creating when empty and writable) the signing record in `dir`.
   * @param expected the cluster and replica this store must belong to; a
   *   read-only open may leave it out to read any store.
   * @throws QuorumFenceError CLUSTER_MISMATCH (another cluster or replica index), STORE_CORRUPT
   *   (unreadable, inconsistent, or reset), STORE_LOCKED (another live process has it open), IO_ERROR
   */
  static open(dir: string, expected: StoreIdentity | undefined, options: SigningRecordOptions = {}): SigningRecord {
    const readOnly = options.readOnly ?? false;
    if (!readOnly && !expected)
      throw new QuorumFenceError(
        'INVALID_ARGUMENT',
        'a writable signing record needs its cluster id and replica index',
      );
    if (readOnly && !existsSync(join(dir, 'data.mdb')))
      throw corrupt(dir, 'no signing record here (data.mdb is missing)');
    if (!readOnly) {
      try {
        mkdirSync(dir, { recursive: true, mode: 0o700 });
      } catch (error) {
        throw new QuorumFenceError(
          'IO_ERROR',
          `cannot create data directory ${dir}: ${(error as Error).message}`,
          { dir },
          { cause: error },
        );
      }
    }
    const releaseLock = readOnly ? undefined : takeLock(dir);
    let env: RootDatabase | undefined;
    try {
      const fileIdentityPath = join(dir, IDENTITY_FILE);
      const fileIdentity = existsSync(fileIdentityPath)
        ? parseIdentity(readFileSync(fileIdentityPath, 'utf8'), dir)
        : undefined;
      if (fileIdentity && !existsSync(join(dir, 'data.mdb'))) {
        throw corrupt(
          dir,
          `data.mdb is missing but ${IDENTITY_FILE} says a store was created here; refusing to start from empty watermarks`,
        );
      }
      if ((options.probe ?? true) && existsSync(join(dir, 'data.mdb'))) probeStore(dir);
      try {
        env = open({ path: dir, overlappingSync: false, readOnly, maxDbs: 4 });
      } catch (error) {
        throw corrupt(dir, `LMDB cannot open it: ${(error as Error).message}`, error);
      }
      let records: Database<Buffer, Buffer>;
      let meta: Database<string, string>;
      try {
        records = env.openDB<Buffer, Buffer>('records', { encoding: 'binary', keyEncoding: 'binary' });
        meta = env.openDB<string, string>('meta', { encoding: 'string' });
      } catch (error) {
        throw corrupt(dir, `LMDB cannot open its tables: ${(error as Error).message}`, error);
      }
      let storedText: string | undefined;
      try {
        storedText = meta.get(IDENTITY_KEY);
      } catch (error) {
        throw corrupt(dir, `cannot read its identity: ${(error as Error).message}`, error);
      }
      let identity: StoreIdentity;
      if (storedText === undefined) {
        if (fileIdentity)
          throw corrupt(
            dir,
            `its LMDB data was reset (${IDENTITY_FILE} exists but the store has no identity); refusing to start from empty watermarks`,
          );
        let empty: boolean;
        try {
          empty = records.getKeysCount() === 0;
        } catch (error) {
          throw corrupt(dir, `cannot read it: ${(error as Error).message}`, error);
        }
        if (!empty) throw corrupt(dir, 'it holds records but no identity');
        if (readOnly || !expected) throw corrupt(dir, 'it was never initialised');
        // Identity in LMDB first, then the file: a crash in between leaves a store the next open completes.
        meta.putSync(IDENTITY_KEY, identityText(expected));
        identity = expected;
      } else {
        identity = parseIdentity(storedText, dir);
        if (
          fileIdentity &&
          (!bytesEqual(fileIdentity.clusterId, identity.clusterId) ||
            fileIdentity.replicaIndex !== identity.replicaIndex)
        ) {
          throw corrupt(dir, `${IDENTITY_FILE} and the LMDB identity disagree`);
        }
      }
      if (expected && !bytesEqual(identity.clusterId, expected.clusterId)) {
        throw new QuorumFenceError(
          'CLUSTER_MISMATCH',
          `data directory ${dir} holds the signing record of cluster ${toHex(identity.clusterId).slice(0, 16)}…, not of this cluster ${toHex(expected.clusterId).slice(0, 16)}…`,
          { dir },
        );
      }
      if (expected && identity.replicaIndex !== expected.replicaIndex) {
        throw new QuorumFenceError(
          'CLUSTER_MISMATCH',
          `data directory ${dir} holds the signing record of replica ${identity.replicaIndex}, not of replica ${expected.replicaIndex}`,
          { dir },
        );
      }
      if (!readOnly && !fileIdentity)
        writeFileDurably(fileIdentityPath, identityText(identity) + '\n', { mode: 0o600 });
      return new SigningRecord(dir, identity, env, records, options, releaseLock);
    } catch (error) {
      void env?.close().catch(() => undefined);
      releaseLock?.();
      throw error;
    }
  }

  /** The durable record of a resource, or undefined when never signed. @throws QuorumFenceError STORE_CORRUPT, CLOSED */
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
    const run = (): Promise<T> => this.#decideAndWrite(resource, decide);
    const previous = this.#tails.get(resource);
    // Uncontended: decide in this very turn, so concurrent grants for other resources join one transaction.
    const result = previous ? previous.then(run) : run();
    const tail = result.then(
      () => undefined,
      () => undefined,
    );
    this.#tails.set(resource, tail);
    void tail.then(() => {
      if (this.#tails.get(resource) === tail) this.#tails.delete(resource);
    });
    return result;
  }

  async #decideAndWrite<T>(
    resource: string,
    decide: (current: SignedRecord | undefined) => RecordChange<T>,
  ): Promise<T> {
    if (this.#closed) throw new QuorumFenceError('CLOSED', 'the signing record is closed');
    if (this.#frozen) throw frozenError(this.#frozen);
    const current = this.get(resource);
    const change = decide(current);
    if (change.record) {
      if (!mayReplace(current, change.record)) {
        throw new QuorumFenceError(
          'INTERNAL',
          `refusing to lower the watermark or change the holder of "${resource.slice(0, 64)}" at epoch ${change.record.epoch}`,
        );
      }
      const started = performance.now();
      try {
        // Commit (which, with overlappingSync off, includes the sync), then the flush barrier (see the header).
        await this.#records.put(Buffer.from(resource, 'utf8'), Buffer.from(encodeRecord(change.record)));
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
    return change.result;
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
   * record (as unreleased, so the restart lease rule covers them).
   * Waits until no checkAndRecord call is queued, then runs without yielding,
   * so no grant can be decided against a watermark the import is raising.
   * @throws QuorumFenceError BAD_INTERCHANGE (conflict), CLOSED, INTERNAL
   */
  async raiseFrom(entries: readonly RecordEntry[]): Promise<ImportSummary> {
    while (this.#tails.size > 0) await Promise.all([...this.#tails.values()]);
    if (this.#closed) throw new QuorumFenceError('CLOSED', 'the signing record is closed');
    let raised = 0;
    let unchanged = 0;
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
        } else if (current && record.epoch < current.epoch) {
          unchanged++;
        } else {
          this.#records.putSync(
            Buffer.from(resource, 'utf8'),
            Buffer.from(encodeRecord({ ...record, released: false })),
          );
          raised++;
        }
      }
    });
    return { raised, unchanged };
  }

  /** The reshare freeze, when this store is frozen. */
  get frozen(): FrozenState | undefined {
    return this.#frozen;
  }

  /**
   * Freezes the store for a reshare: waits until no checkAndRecord call is
   * queued, then durably records the freeze; from then on every
   * checkAndRecord refuses with REPLICA_FROZEN, on this and every later open.
   * Freezing a frozen store keeps the first freeze. An export taken after this
   * resolves holds every grant this replica will ever have signed.
   * @throws QuorumFenceError CLOSED, INTERNAL
   */
  async freeze(reason: string): Promise<FrozenState> {
    while (this.#tails.size > 0) await Promise.all([...this.#tails.values()]);
    if (this.#closed) throw new QuorumFenceError('CLOSED', 'the signing record is closed');
    if (this.#frozen) return this.#frozen;
    const state: FrozenState = { at: new Date().toISOString(), reason: reason.slice(0, 200) };
    // Set before any await, so no grant decided after this line sees an unfrozen store.
    this.#frozen = state;
    try {
      this.#env.openDB<string, string>('meta', { encoding: 'string' }).putSync(FROZEN_KEY, JSON.stringify(state));
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
    while (this.#tails.size > 0) await Promise.all([...this.#tails.values()]);
    this.#closed = true;
    try {
      await this.#env.close();
    } finally {
      this.#releaseLock?.();
    }
  }
}

// --- reshare freeze (kept apart from the rest so the store's own logic stays untouched) ---

/** Why and when a store was frozen for a reshare. */
export interface FrozenState {
  readonly at: string;
  readonly reason: string;
}

const FROZEN_KEY = 'frozen';

function readFrozen(env: RootDatabase, dir: string): FrozenState | undefined {
  let text: string | undefined;
  try {
    text = env.openDB<string, string>('meta', { encoding: 'string' }).get(FROZEN_KEY);
  } catch (error) {
    throw corrupt(dir, `cannot read its freeze marker: ${(error as Error).message}`, error);
  }
  if (text === undefined) return undefined;
  try {
    const json = JSON.parse(text) as Partial<FrozenState>;
    if (typeof json.at === 'string' && typeof json.reason === 'string') return { at: json.at, reason: json.reason };
  } catch {
    // fall through: a marker that is there but unreadable still freezes (the safe side)
  }
  return { at: '(unreadable)', reason: '(unreadable freeze marker)' };
}

function frozenError(state: FrozenState): QuorumFenceError {
  return new QuorumFenceError(
    'REPLICA_FROZEN',
    `this replica's signing record was frozen for a reshare at ${state.at} (${state.reason}); it signs nothing more with this share`,
  );
}
