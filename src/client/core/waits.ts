/**
 * How long an acquire waits, pure arithmetic on the client's clock: its turn in the leader's line, and the poll
 * while a resource is held and no line serves it (docs/protocol.md, "Waiting" and "Lines under contention").
 */

/** The longest a leader may keep one attempt in its line (then the client falls back to polling). */
export const MAX_TURN_WAIT_MS = 5_000;

/** Extra wait beyond the quorum's remaining time, so that we arrive just after the lease ends, not just before. */
const BUSY_SLACK_MS = 1;

/**
 * How long the leader may keep this attempt in its line: within the caller's wait, and leaving time (up to a
 * request timeout, at most half of what remains) to gather the others' partials once our turn comes.
 */
export function turnWaitMs(now: number, waitUntil: number, deadline: number, requestTimeoutMs: number): number {
  const left = deadline - now;
  return Math.floor(
    Math.max(0, Math.min(waitUntil - now, left - Math.min(left / 2, requestTimeoutMs), MAX_TURN_WAIT_MS)),
  );
}

/**
 * One step of the wait toward the end of a busy lease: the quorum's remaining time (plus a millisecond), a
 * jittered poll, or what is left of the wait, whichever is shortest. Jitter spreads the waiters' polls, so the
 * first to see the release is not always the same one.
 * @param random a number in [0, 1).
 */
export function busyPauseMs(
  now: number,
  limit: number,
  remainingMs: number,
  busyPollMs: number,
  random: number,
): number {
  const poll = busyPollMs * (0.5 + random);
  return Math.max(0, Math.min(remainingMs + BUSY_SLACK_MS, poll, limit - now));
}
