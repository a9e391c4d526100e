/**
 * Volatile lease ends, on the replica's own monotonic clock (S6). Lost on a
 * restart, so the rule of docs/protocol.md applies: after a restart every recorded
 * grant counts as leased for `maxTtlMs` from the moment the store
 * opened. That default is computed on lookup instead of stored per resource,
 * so a store with millions of resources costs nothing extra at start.
 *
 * Only the replica service touches this table, and only inside the signing
 * record's per-resource critical section, so a lookup and the update that
 * follows it cannot interleave with another request for the same resource.
 */
import type { MonotonicClock } from '../common/clock.js';
import type { SignedRecord } from './policy.js';

/** Sweeping expired entries is O(size); doing it at most this often keeps it off the hot path. */
const SWEEP_INTERVAL_MS = 5_000;

export class LeaseTable {
  readonly #clock: MonotonicClock;
  /** Until then, resources untouched since the restart count as leased. */
  readonly #restartLeaseEndsAt: number;
  /** Resource → lease end (0 when released or never leased since the restart). */
  readonly #ends = new Map<string, number>();
  /** Resource → the epoch its holder released since the start (volatile, see policy.ts; compared by epoch, so a later grant makes it moot). */
  readonly #released = new Map<string, bigint>();
  /**
   * Resource → the client session that holds its lease (docs/protocol.md, "Sessions"; '' for a sessionless client).
   * Volatile: after a restart a recorded lease's session is unknown, and no session may take it over by asking again.
   */
  readonly #sessions = new Map<string, string>();
  /** Records from before the restart that nobody has touched yet (for the active-lease gauge). */
  #untouchedRestartLeases: number;
  #lastSweep: number;

  constructor(clock: MonotonicClock, maxTtlMs: number, recordsAtOpen: number) {
    this.#clock = clock;
    const now = clock.now();
    this.#restartLeaseEndsAt = now + maxTtlMs;
    this.#untouchedRestartLeases = recordsAtOpen;
    this.#lastSweep = now;
  }

  /** When the lease on `resource` ends (monotonic ms; 0 or less than now when none runs). */
  endsAt(resource: string, record: SignedRecord | undefined): number {
    const known = this.#ends.get(resource);
    if (known !== undefined) return known;
    return record ? this.#restartLeaseEndsAt : 0;
  }

  /**
   * Sets the lease end of `resource`; `record` is the durable record as it was
   * before this change (to account for the restart lease it replaces). `session`: the session holding it now
   * (kept as it was when not given).
   */
  set(resource: string, record: SignedRecord | undefined, endsAt: number, session?: string): void {
    if (!this.#ends.has(resource) && record && this.#untouchedRestartLeases > 0) this.#untouchedRestartLeases--;
    this.#ends.set(resource, endsAt);
    if (session !== undefined) this.#sessions.set(resource, session);
    this.#sweepSometimes();
  }

  /** The session holding the lease on `resource` (undefined when unknown: never leased since the start). */
  sessionOf(resource: string): string | undefined {
    return this.#sessions.get(resource);
  }

  /** Whether the holder of the grant in `record` released it since this start. */
  isReleased(resource: string, record: SignedRecord): boolean {
    return this.#released.get(resource) === record.epoch;
  }

  /** Ends the lease on `resource` and remembers that the holder of `record`'s epoch released it. */
  release(resource: string, record: SignedRecord): void {
    this.set(resource, record, 0);
    this.#released.set(resource, record.epoch);
  }

  /** Whether a lease on `resource` (whose record is `record`) runs now, the restart rule included. */
  isRunning(resource: string, record: SignedRecord): boolean {
    return this.endsAt(resource, record) > this.#clock.now();
  }

  /**
   * Drops everything kept about `resource` (its record was compacted, and no
   * lease ran on it). Without a record, `endsAt` answers 0 for it anyway.
   */
  forget(resource: string): void {
    this.#ends.delete(resource);
    this.#released.delete(resource);
    this.#sessions.delete(resource);
  }

  /** Resources this table holds an entry for (memory follows running and recently ended leases). */
  get size(): number {
    return this.#ends.size;
  }

  /** Leases running now. */
  activeCount(): number {
    const now = this.#clock.now();
    let active = now < this.#restartLeaseEndsAt ? this.#untouchedRestartLeases : 0;
    for (const end of this.#ends.values()) if (end > now) active++;
    return active;
  }

  /**
   * The resources whose lease runs now by an entry of this table, with their ends. Leases that run only by the
   * restart rule (records nobody touched since the start) are not listed: the table holds no entry for them.
   */
  *running(): Generator<[resource: string, endsAt: number]> {
    const now = this.#clock.now();
    for (const [resource, end] of this.#ends) if (end > now) yield [resource, end];
  }

  /** Forgets expired entries now (compaction calls it; `set` does it at most every few seconds). */
  sweep(): void {
    this.#lastSweep = -Infinity;
    this.#sweepSometimes();
  }

  #sweepSometimes(): void {
    const now = this.#clock.now();
    // Forgetting an expired entry is only safe once the restart default has
    // expired too; before that, forgetting would bring the default back.
    if (now < this.#restartLeaseEndsAt || now - this.#lastSweep < SWEEP_INTERVAL_MS) return;
    this.#lastSweep = now;
    for (const [resource, end] of this.#ends) {
      if (end <= now) {
        this.#ends.delete(resource);
        this.#released.delete(resource);
        this.#sessions.delete(resource);
      }
    }
  }
}
