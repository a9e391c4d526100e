/**
 * The check-and-record rule (S2 and S3 of docs/protocol.md): for one resource, the
 * decision to sign is taken against the durable record, and the record that
 * decision needs is on stable storage before anyone can act on it.
 *
 *   - Atomic per resource: calls for one resource run one after another (a
 *     queue per resource); a second call decides only after the first one's
 *     write is durable, so nobody can check, await, and write around another.
 *   - Calls for different resources run concurrently: an uncontended call
 *     decides in the very turn it is made, so the writes of one event-loop
 *     turn share one LMDB transaction and one sync (group commit).
 *   - Whatever the caller decided, a write that would lower the watermark or
 *     change the holder at an equal epoch is refused (`mayReplace`).
 */
import { bytesEqual } from '../common/bytes.js';
import { QuorumFenceError } from '../common/errors.js';
import type { SignedRecord } from './policy.js';

/** What a caller decides inside the per-resource critical section. */
export interface RecordChange<T> {
  /** Write this record (durably) before returning; absent when nothing durable changes. */
  readonly record?: SignedRecord;
  readonly result: T;
}

/**
 * Whether `next` may replace `current`: a higher epoch, or the same grant
 * again; without a record, an epoch above the floor (which stands for every
 * compacted record, docs/storage.md). Anything else would lower a watermark
 * or sign a second holder, so the store refuses it whatever the caller decided.
 */
export function mayReplace(current: SignedRecord | undefined, next: SignedRecord, floor = 0n): boolean {
  if (!current) return next.epoch > floor;
  if (next.epoch > current.epoch) return true;
  return (
    next.epoch === current.epoch &&
    bytesEqual(next.holder, current.holder) &&
    bytesEqual(next.grantDigest, current.grantDigest)
  );
}

/** The storage the rule runs against. */
export interface RecordAccess {
  /** The durable record now (undefined when none); throws CLOSED once closed. */
  read(resource: string): SignedRecord | undefined;
  /** The epoch floor now. */
  floor(): bigint;
  /** Resolves only once `record` is on stable storage. */
  writeDurably(resource: string, record: SignedRecord): Promise<void>;
  /** Throws when the store may sign nothing more (frozen for a reshare); checked before each decision. */
  refuseIfFrozen?(): void;
}

/** The per-resource critical sections of one store. */
export class CheckAndRecord {
  readonly #access: RecordAccess;
  /** Per resource: the promise of the last queued call. */
  readonly #tails = new Map<string, Promise<void>>();

  constructor(access: RecordAccess) {
    this.#access = access;
  }

  /** Whether a call for `resource` is queued or running. */
  isBusy(resource: string): boolean {
    return this.#tails.has(resource);
  }

  /**
   * Runs `decide` inside the critical section of `resource` with its current
   * record; writes (and flushes) the record it returns before resolving.
   * @throws QuorumFenceError INTERNAL (a refused write); whatever read, writeDurably or decide throw
   */
  run<T>(resource: string, decide: (current: SignedRecord | undefined) => RecordChange<T>): Promise<T> {
    const run = (): Promise<T> => this.#decideAndWrite(resource, decide);
    const previous = this.#tails.get(resource);
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

  /** Whether no call is queued or running. */
  get idle(): boolean {
    return this.#tails.size === 0;
  }

  /**
   * Resolves once no call is queued or running (calls made meanwhile are waited for too). A caller
   * that must act with no call in flight re-checks `idle` synchronously after the await, since a
   * call may start in between: `while (!sections.idle) await sections.drain();`
   */
  async drain(): Promise<void> {
    while (this.#tails.size > 0) await Promise.all([...this.#tails.values()]);
  }

  async #decideAndWrite<T>(
    resource: string,
    decide: (current: SignedRecord | undefined) => RecordChange<T>,
  ): Promise<T> {
    this.#access.refuseIfFrozen?.();
    const current = this.#access.read(resource);
    const change = decide(current);
    if (change.record) {
      if (!mayReplace(current, change.record, this.#access.floor())) {
        throw new QuorumFenceError(
          'INTERNAL',
          `refusing to lower the watermark (or the floor) or change the holder of "${resource.slice(0, 64)}" at epoch ${change.record.epoch}`,
        );
      }
      await this.#access.writeDurably(resource, change.record);
    }
    return change.result;
  }
}
