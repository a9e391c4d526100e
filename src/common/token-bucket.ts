/**
 * A token bucket on a caller's clock: `take` spends one token if one is there, refilling at `perSecond` up to
 * `burst`. Pure arithmetic over the times it is given, so a test drives it with any clock. One implementation for
 * every per-connection rate the project enforces.
 */
export class TokenBucket {
  readonly #perMs: number;
  readonly #burst: number;
  #tokens: number;
  #refilledAt: number;

  /** Starts full at time `now` (ms). */
  constructor(perSecond: number, burst: number, now: number) {
    this.#perMs = perSecond / 1000;
    this.#burst = burst;
    this.#tokens = burst;
    this.#refilledAt = now;
  }

  /** Spends one token at time `now` (ms, never earlier than the last call's); false when the bucket is empty. */
  take(now: number): boolean {
    if (!this.holds(now)) return false;
    this.#tokens -= 1;
    return true;
  }

  /** Whether a token is there at time `now`, spending none: a caller drawing on several buckets at once asks each first. */
  holds(now: number): boolean {
    this.#tokens = Math.min(this.#burst, this.#tokens + Math.max(0, now - this.#refilledAt) * this.#perMs);
    this.#refilledAt = now;
    return this.#tokens >= 1;
  }
}

/** Spends one token of every bucket at time `now`, or none when any of them is empty. */
export function takeFromAll(buckets: readonly TokenBucket[], now: number): boolean {
  if (!buckets.every((bucket) => bucket.holds(now))) return false;
  for (const bucket of buckets) bucket.take(now);
  return true;
}
