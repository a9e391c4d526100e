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
