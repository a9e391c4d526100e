/**
 * What an LmdbGuard mutation sees: its resource's keys inside the write
 * transaction, buffered (reads see its own writes) and applied only when it
 * returns. Keys follow the name contract (expectGuardKey) and are stored under
 * storeKey(resource, key), so a token opens only its own resource.
 */
import { QuorumFenceError } from '../common/errors.js';
import { copyBytes, storeKey } from '../common/bytes.js';
import { expectGuardKey } from '../common/check.js';
import { isRefusal, mutationRefusal, type MutationRefusal } from './adapter.js';

export { isRefusal, type MutationRefusal };

export interface StoredValue {
  readonly value: Uint8Array;
  /**
   * The seq of the write that stored this value. Seqs only grow, so a key that
   * is deleted and written again never returns to an old version (no ABA for
   * compare-and-set).
   */
  readonly version: number;
}

/** A compare-and-set precondition: `key` is at `version` (0: the key is absent). */
export interface VersionCondition {
  readonly key: string;
  readonly version: number;
}

/** What the caller's mutation sees: its resource's keys, inside the write transaction. */
export interface LmdbWriteContext {
  readonly resource: string;
  readonly epoch: bigint;
  /** The holder's Ed25519 public key. */
  readonly holder: Uint8Array;
  /** The version this write stamps on what it changes: its seq. */
  readonly version: number;
  get(key: string): StoredValue | undefined;
  put(key: string, value: Uint8Array): void;
  /** @returns whether the key existed */
  remove(key: string): boolean;
  /** Refuse the attempt (e.g. a precondition of the caller's own); nothing is applied. */
  refuse(reason: 'version_mismatch', message?: string): MutationRefusal;
}

/** Mutations run inside the LMDB write transaction and must be synchronous. */
export type LmdbMutation<T> = (tx: LmdbWriteContext) => T;

export interface DataRecord {
  value: Uint8Array;
  version: number;
}

/**
 * The one read the context makes of the data database. Its own type, not lmdb's: this file's declarations reach
 * the package's `quorumfence/guard/lmdb` types, and lmdb's own declarations do not compile under a consumer's
 * `module: nodenext` without skipLibCheck.
 */
export interface DataReader {
  get(key: Buffer): DataRecord | undefined;
}

export class BufferedContext implements LmdbWriteContext {
  readonly changes = new Map<string, Uint8Array | null>();
  constructor(
    readonly resource: string,
    readonly epoch: bigint,
    readonly holder: Uint8Array,
    readonly version: number,
    private readonly data: DataReader,
    private readonly maxKeyBytes: number,
    private readonly maxValueBytes: number,
  ) {}

  #key(key: string): string {
    return expectGuardKey(key, this.maxKeyBytes);
  }

  get(key: string): StoredValue | undefined {
    const pending = this.changes.get(this.#key(key));
    if (pending === null) return undefined;
    if (pending !== undefined) return { value: pending, version: this.version };
    const record = this.data.get(storeKey(this.resource, key));
    return record && { value: record.value, version: record.version };
  }

  put(key: string, value: Uint8Array): void {
    if (!(value instanceof Uint8Array))
      throw new QuorumFenceError('INVALID_ARGUMENT', '"value" expected bytes', { field: 'value' });
    if (value.length > this.maxValueBytes) {
      throw new QuorumFenceError(
        'INVALID_ARGUMENT',
        `"value" expected at most ${this.maxValueBytes} bytes, got ${value.length}`,
        { field: 'value' },
      );
    }
    // A real copy: Buffer#slice would be a view the caller could change before the commit.
    this.changes.set(this.#key(key), copyBytes(value));
  }

  remove(key: string): boolean {
    const existed = this.get(key) !== undefined;
    this.changes.set(this.#key(key), null);
    return existed;
  }

  refuse(reason: 'version_mismatch', message?: string): MutationRefusal {
    return mutationRefusal(reason, message);
  }
}
