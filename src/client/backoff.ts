/**
 * Jittered exponential backoff, pure. Used for reconnects and for retrying
 * split votes: two contenders that back off by the same fixed delay collide
 * again, while random delays let one of them go first.
 */

export interface BackoffPolicy {
  readonly baseMs: number;
  readonly maxMs: number;
}

/**
 * "Equal jitter": half of the capped exponential delay, plus a random share
 * of the other half. Never zero for a nonzero base (so retries cannot spin)
 * and never above maxMs.
 * @param attempt 0 for the first retry.
 * @param random a number in [0, 1).
 */
export function backoffDelay(attempt: number, policy: BackoffPolicy, random: number): number {
  const exponent = Math.min(Math.max(attempt, 0), 30);
  const ceiling = Math.min(policy.maxMs, policy.baseMs * 2 ** exponent);
  const half = ceiling / 2;
  return half + half * Math.min(Math.max(random, 0), 1);
}
