/**
 * Volatile lease ends, on the replica's own monotonic clock (S6). Lost on a
 * restart, so the rule of docs/protocol.md applies: after a restart every recorded
 * grant counts as leased for `maxTtlMs` from the moment the store
 * opened. That default is computed on lookup instead of stored per resource,
 * so a store with millions of resources costs nothing extra at start.
 *
 * The ends are also indexed by time (buckets of maxTtl/1024), so the `leases` request walks from the latest end
 * down and stops after a bounded number of entries (`latestLeases`) instead of scanning and sorting them all.
 *
 * Only the replica service touches this table, and only inside the signing
 * record's per-resource critical section, so a lookup and the update that
 * follows it cannot interleave with another request for the same resource.
 */
import type { MonotonicClock } from '../common/clock.js';
import type { JoinedLease, LeaseGrant, SignedRecord } from './policy.js';

/** Sweeping expired entries is O(size); doing it at most this often keeps it off the hot path. */
const SWEEP_INTERVAL_MS = 5_000;
/**
 * Buckets of the end index between now and now + maxTtl: a lease end moves between buckets in O(1), and the
 * ordered list of non-empty buckets stays short enough (a few thousand at most) that keeping it sorted is cheap.
 */
const BUCKETS_PER_MAX_TTL = 1024;

/** One lease end, as the index yields it: buckets come latest first; within a bucket, in no particular order. */
export interface IndexedLeaseEnd {
  readonly resource: string;
  readonly endsAt: number;
  readonly bucket: number;
}

export class LeaseTable {
  readonly #clock: MonotonicClock;
  /** Until then, resources untouched since the restart count as leased. */
  readonly #restartLeaseEndsAt: number;
  /** Resource → lease end (0 when released or never leased since the restart). */
  readonly #ends = new Map<string, number>();
  /**
   * Resource → the epoch of the record's grant its holder released since the start (volatile, see policy.ts; compared
   * by epoch, so a later grant makes it moot). A joined lease's release is kept with it.
   */
  readonly #released = new Map<string, bigint>();
  /**
   * Resource → the client session that holds the record's grant's lease (docs/protocol.md, "Sessions"; '' for a
   * sessionless client), kept after the lease ends until compaction forgets the resource. Volatile: after a restart a
   * recorded lease's session is unknown, and no session may take it over by asking again.
   */
  readonly #sessions = new Map<string, string>();
  /**
   * Resource → the lease this replica joined below its record (docs/protocol.md, "Leases that outlive f signers"),
   * with its own session and release; while present, the lease end above is its. Volatile: after a restart the
   * restart rule gives the lease to the record's grant, as it always did.
   */
  readonly #joined = new Map<string, JoinedLease>();
  /** Records from before the restart that nobody has touched yet (for the active-lease gauge). */
  #untouchedRestartLeases: number;
  #lastSweep: number;
  /** Width of one bucket of the end index (ms). */
  readonly #bucketMs: number;
  /** Bucket → the resources whose (non-zero) lease end falls in it. */
  readonly #buckets = new Map<number, Set<string>>();
  /** The non-empty buckets, ascending. */
  readonly #bucketOrder: number[] = [];

  constructor(clock: MonotonicClock, maxTtlMs: number, recordsAtOpen: number) {
    this.#clock = clock;
    this.#bucketMs = Math.max(1, Math.ceil(maxTtlMs / BUCKETS_PER_MAX_TTL));
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
   * (kept as it was when not given). `joined`: the grant the lease belongs to when it is not the record's (a lease
   * joined below the record, held by `session`); undefined makes it the record's grant's again.
   */
  set(resource: string, record: SignedRecord | undefined, endsAt: number, session?: string, joined?: LeaseGrant): void {
    const previous = this.#ends.get(resource);
    if (previous === undefined && record && this.#untouchedRestartLeases > 0) this.#untouchedRestartLeases--;
    this.#ends.set(resource, endsAt);
    if (joined) {
      const before = this.#joined.get(resource);
      this.#joined.set(resource, {
        epoch: joined.epoch,
        holder: joined.holder,
        session: session ?? before?.session ?? '',
        released: false,
      });
    } else {
      this.#joined.delete(resource);
      if (session !== undefined) this.#sessions.set(resource, session);
    }
    if (previous !== endsAt) {
      this.#unindex(resource, previous);
      this.#index(resource, endsAt);
    }
    this.#sweepSometimes();
  }

  /** The session holding the record's grant's lease on `resource` (undefined when unknown: never leased since the start). */
  sessionOf(resource: string): string | undefined {
    return this.#sessions.get(resource);
  }

  /** The lease on `resource` when it was joined below the record (undefined: the lease is the record's grant's). */
  joinedOf(resource: string): JoinedLease | undefined {
    return this.#joined.get(resource);
  }

  /** The grant the lease on `resource` belongs to: the one joined below the record (or the floor), or the record's. */
  grantOf(resource: string, record: SignedRecord | undefined): LeaseGrant | undefined {
    return this.#joined.get(resource) ?? record;
  }

  /** Whether the holder of the record's grant released it since this start. */
  isReleased(resource: string, record: SignedRecord): boolean {
    return this.#released.get(resource) === record.epoch;
  }

  /** Whether the lease on `resource` now (joined, or the record's grant's) was released by its holder. */
  leaseReleased(resource: string, record: SignedRecord | undefined): boolean {
    const joined = this.#joined.get(resource);
    if (joined) return joined.released;
    return record !== undefined && this.isReleased(resource, record);
  }

  /** Ends the lease on `resource` and remembers that the holder of its grant (joined, or the record's) released it. */
  release(resource: string, record: SignedRecord | undefined): void {
    const joined = this.#joined.get(resource);
    this.set(resource, record, 0, undefined, joined);
    if (joined) this.#joined.set(resource, { ...this.#joined.get(resource)!, released: true });
    else if (record) this.#released.set(resource, record.epoch);
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
    this.#unindex(resource, this.#ends.get(resource));
    this.#ends.delete(resource);
    this.#released.delete(resource);
    this.#sessions.delete(resource);
    this.#joined.delete(resource);
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
   * The leases running now by an entry of this table, from the bucket with the latest ends down; a caller stops
   * when it has seen enough (see latestLeases). Leases that run only by the restart rule (records nobody touched
   * since the start) are not yielded: the table holds no entry for them. Nothing may change the table while the
   * walk is open.
   */
  *runningLatestFirst(): Generator<IndexedLeaseEnd> {
    const now = this.#clock.now();
    const lowest = this.#bucketOf(now);
    for (let k = this.#bucketOrder.length - 1; k >= 0 && this.#bucketOrder[k]! >= lowest; k--) {
      const bucket = this.#bucketOrder[k]!;
      for (const resource of this.#buckets.get(bucket)!) {
        const endsAt = this.#ends.get(resource)!;
        if (endsAt > now) yield { resource, endsAt, bucket };
      }
    }
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
        // The end and a joined grant go. Who held the lease, and whether it was released, stay until compaction
        // forgets the resource (one entry per record at most): a lease that ended is revived by nobody but the
        // session that held it, and a released one by nobody (issue 43, finding 1).
        this.#unindex(resource, end);
        this.#ends.delete(resource);
        this.#joined.delete(resource);
      }
    }
  }

  #bucketOf(endsAt: number): number {
    return Math.floor(endsAt / this.#bucketMs);
  }

  /** Adds `resource` to the bucket of `endsAt` (an end of 0, released or never leased, is not indexed). */
  #index(resource: string, endsAt: number): void {
    if (endsAt <= 0) return;
    const bucket = this.#bucketOf(endsAt);
    const members = this.#buckets.get(bucket);
    if (members) return void members.add(resource);
    this.#buckets.set(bucket, new Set([resource]));
    this.#bucketOrder.splice(insertionPoint(this.#bucketOrder, bucket), 0, bucket);
  }

  #unindex(resource: string, endsAt: number | undefined): void {
    if (endsAt === undefined || endsAt <= 0) return;
    const bucket = this.#bucketOf(endsAt);
    const members = this.#buckets.get(bucket);
    if (!members?.delete(resource) || members.size > 0) return;
    this.#buckets.delete(bucket);
    this.#bucketOrder.splice(insertionPoint(this.#bucketOrder, bucket), 1);
  }
}

/** Where `value` is or would go in the ascending `sorted` (new ends land near the top, so the top is tried first). */
function insertionPoint(sorted: readonly number[], value: number): number {
  let high = sorted.length;
  if (high === 0 || sorted[high - 1]! < value) return high;
  let low = 0;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (sorted[middle]! < value) low = middle + 1;
    else high = middle;
  }
  return low;
}

/**
 * Entries of the end index one `leases` answer may examine: eight answers' worth (8 × MAX_LEASES_PER_REPLY). Each
 * examined entry may cost a record read (a few microseconds), so this bounds an answer's cost near a millisecond
 * however many leases run, and a holder that may access few resources cannot make the walk longer.
 */
export const MAX_LEASES_EXAMINED = 256;

/**
 * The `leases` answer's choice, pure: walks `index` (latest buckets first) and keeps what `describe` returns (undefined:
 * not listed: not accessible, no record, released), then the `limit` ending last, ending last first. It stops at the
 * end of the first bucket after which more than `limit` were kept (entries of lower buckets all end earlier, so
 * the answer is exact), or after `maxExamined` entries; `more` is true when leases were left out or may have been
 * (the walk stopped at its bound).
 */
export function latestLeases<L>(
  index: Iterable<IndexedLeaseEnd>,
  describe: (resource: string, endsAt: number) => L | undefined,
  limit: number,
  maxExamined = MAX_LEASES_EXAMINED,
): { readonly leases: L[]; readonly more: boolean } {
  const kept: { lease: L; endsAt: number }[] = [];
  let examined = 0;
  let bucket: number | undefined;
  let cutShort = false;
  for (const entry of index) {
    if (entry.bucket !== bucket) {
      if (kept.length > limit) break;
      bucket = entry.bucket;
    }
    if (examined === maxExamined) {
      cutShort = true;
      break;
    }
    examined++;
    const lease = describe(entry.resource, entry.endsAt);
    if (lease !== undefined) kept.push({ lease, endsAt: entry.endsAt });
  }
  kept.sort((a, b) => b.endsAt - a.endsAt);
  return { leases: kept.slice(0, limit).map((k) => k.lease), more: cutShort || kept.length > limit };
}
