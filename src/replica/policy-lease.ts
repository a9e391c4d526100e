/**
 * The lease now, as the replica rules read it from a `PolicyRecord`: whose it is (the one joined below the record, or
 * the record's grant's), whether it runs, whether the caller holds it or it is in the caller's way, and the time left
 * on the wire. Apart from the rules because acquire (policy.ts) and renew, join and release (policy-renew-release.ts)
 * read the lease the same way: one implementation of each of these tests.
 */
import { bytesEqual } from '../common/bytes.js';
import type { Caller, LeaseGrant, PolicyRecord } from './policy-types.js';

/** Lease times on the wire fit in 2^31-1 ms (the codec's bound). */
const MAX_WIRE_MS = 0x7fff_ffff;

export function remainingMs(leaseEndsAt: number, now: number): number {
  return Math.min(MAX_WIRE_MS, Math.max(0, Math.ceil(leaseEndsAt - now)));
}

/** The lease now: the one joined below the record, or the record's grant's. */
export function currentLease(
  record: PolicyRecord,
): LeaseGrant & { readonly session?: string; readonly released: boolean } {
  return record.joined ?? record;
}

export function leaseRunning(record: PolicyRecord, now: number): boolean {
  return !currentLease(record).released && record.leaseEndsAt > now;
}

/** A record, not the floor standing for one (epoch steps differ: docs/protocol.md, "Epoch steps"). */
export function hasRecord(record: PolicyRecord | undefined): boolean {
  return record !== undefined && record.compacted !== true;
}

export function isGrant(grant: LeaseGrant, epoch: bigint, holder: Uint8Array): boolean {
  return grant.epoch === epoch && bytesEqual(grant.holder, holder);
}

/** The caller holds the lease now, under the session that holds it (docs/protocol.md, "Sessions"). */
export function holdsLease(record: PolicyRecord, caller: Caller): boolean {
  const lease = currentLease(record);
  return bytesEqual(lease.holder, caller.holder) && lease.session === caller.session;
}

/**
 * Whether another lease is in the way of the caller: one that runs and is not the caller's (another holder's, or
 * the same holder's under another session — unless the caller resumes, which ends its own identity's lease).
 */
export function leaseInTheWay(record: PolicyRecord | undefined, caller: Caller, resume: boolean, now: number): boolean {
  if (!record || !leaseRunning(record, now) || holdsLease(record, caller)) return false;
  return !(resume && bytesEqual(currentLease(record).holder, caller.holder));
}
