/**
 * The holder's view of its lease, pure arithmetic on the client's monotonic
 * clock. The view starts at `sentAt`, read before the first request left, so
 * it starts no later than any replica's lease (which starts on receipt); a
 * margin at the end covers clocks that run at slightly different rates.
 * Hence the holder always believes the lease over before any replica does.
 */

export interface LeaseTimingPolicy {
  readonly expiryMarginFraction: number;
  readonly minExpiryMarginMs: number;
  readonly renewAtFraction: number;
}

/** The margin kept at the end of a ttl. Never more than half the ttl. */
export function expiryMarginMs(ttlMs: number, policy: LeaseTimingPolicy): number {
  return Math.min(ttlMs / 2, Math.max(policy.minExpiryMarginMs, ttlMs * policy.expiryMarginFraction));
}

/** When the holder must consider the lease over: sentAt + ttl - margin. */
export function localExpiry(sentAt: number, ttlMs: number, policy: LeaseTimingPolicy): number {
  return sentAt + ttlMs - expiryMarginMs(ttlMs, policy);
}

/** When to start the automatic renewal: a share of the ttl after sentAt, and never after the local expiry. */
export function renewalTime(sentAt: number, ttlMs: number, policy: LeaseTimingPolicy): number {
  return Math.min(sentAt + ttlMs * policy.renewAtFraction, localExpiry(sentAt, ttlMs, policy));
}

/** A held lease's non-signers are asked to join it this share of its ttl after the grant (joinTime)... */
export const JOIN_DELAY_FRACTION = 0.1;
/** ...but never later than this. */
export const MAX_JOIN_DELAY_MS = 1_000;

/**
 * When a lease asks the replicas that did not sign it to join it (lease.ts; docs/protocol.md, "Leases that outlive f
 * signers"): a tenth of its ttl after sentAt, at most MAX_JOIN_DELAY_MS, and never after its first renewal (which
 * carries the same evidence to every replica that does not hold the lease yet, so it joins whoever did not). Late
 * enough that a lease held a moment (acquire, write, release) costs no replica a join; early enough that one held
 * longer has them well before that renewal, the first moment it needs t replicas again.
 */
export function joinTime(sentAt: number, ttlMs: number, policy: LeaseTimingPolicy): number {
  const delayMs = Math.min(ttlMs * JOIN_DELAY_FRACTION, MAX_JOIN_DELAY_MS);
  return Math.min(sentAt + delayMs, renewalTime(sentAt, ttlMs, policy));
}
