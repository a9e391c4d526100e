/**
 * The rules of renew and release, steps 3 onwards (policy.ts decides steps 1 and 2 for every request): renew of the
 * lease a session holds, the join of a lease this replica does not hold yet (docs/protocol.md, "Leases that outlive f
 * signers"), and release. Apart from acquire's rules (policy.ts) because these only ever touch a lease: who may
 * manage it, and `not_holder` for everyone else. The lease choices they make are in policy.ts's header.
 */
import { bytesEqual } from '../common/bytes.js';
import { grantDigest } from '../token/grant.js';
import type { RenewRequest } from '../protocol/messages.js';
import { epochStepAllowed } from './policy-epoch-step.js';
import { currentLease, hasRecord, isGrant, leaseInTheWay, leaseRunning, remainingMs } from './policy-lease.js';
import type { Caller, Decision, EpochSupport, PolicyConfig, PolicyRecord } from './policy-types.js';

/**
 * Renew and release are the lease holder's: the session that holds it (remembered after the lease ends, until
 * compaction), or, when that is unknown (the replica restarted since), any session of the holder while the lease
 * runs, which then holds it. A running lease is never the word of one process of an identity against another's, but
 * after a restart nobody can tell them apart. A lease that ran out under a session nobody knows is over: another
 * session reviving it would hold the identical token without `resume` and without a new epoch (issue 43, item 1).
 */
function mayManage(record: PolicyRecord, caller: Caller, now: number): boolean {
  const lease = currentLease(record);
  if (!bytesEqual(lease.holder, caller.holder)) return false;
  if (lease.session === undefined) return leaseRunning(record, now);
  return lease.session === caller.session;
}

function notHolder(record: PolicyRecord | undefined, floor: bigint): Decision {
  return { action: 'reply', outcome: { status: 'not_holder', epoch: record?.epoch ?? floor } };
}

export function decideRenew(
  record: PolicyRecord | undefined,
  request: RenewRequest,
  caller: Caller,
  now: number,
  config: PolicyConfig,
  floor: bigint,
  support: readonly EpochSupport[],
): Decision {
  if (!record) return decideJoin(record, request, caller, now, config, floor, support);
  if (isGrant(currentLease(record), request.epoch, caller.holder)) {
    if (currentLease(record).released || !mayManage(record, caller, now)) return notHolder(record, floor);
    const leaseEndsAt = Math.max(record.leaseEndsAt, now + request.ttlMs);
    const outcome = { status: 'renewed', remainingMs: remainingMs(leaseEndsAt, now) } as const;
    return record.joined
      ? { action: 'renew', leaseEndsAt, joined: record.joined, outcome }
      : { action: 'renew', leaseEndsAt, outcome };
  }
  if (record.joined && isGrant(record, request.epoch, caller.holder)) {
    // The record's own grant, after a lease joined below it: its session takes its lease up again once that one is
    // over, as it revives a lease that ran out (nobody else was signed meanwhile).
    if (leaseRunning(record, now) || record.released || record.session !== caller.session)
      return notHolder(record, floor);
    const leaseEndsAt = now + request.ttlMs;
    return { action: 'renew', leaseEndsAt, outcome: { status: 'renewed', remainingMs: remainingMs(leaseEndsAt, now) } };
  }
  return decideJoin(record, request, caller, now, config, floor, support);
}

/**
 * A renew of a grant whose lease this replica does not hold: it joins the lease when no other lease runs here (nor
 * a line waits for one), and answers `not_holder` otherwise (docs/protocol.md, "Leases that outlive f signers").
 * Above its record, a join is a grant without a partial: within the epoch step the evidence allows, recorded
 * durably before `renewed` leaves (after a crash the restart rule keeps it). At or below its record (a contender
 * that lost the epoch, or the next one, got this replica first and let go), the lease is kept in memory for the
 * grant, which this replica never signed: a lease is only a promise not to sign anyone else meanwhile, so whose
 * grant it belongs to changes nothing this replica signs. The grant the record holds is not joined again: a lease of
 * it that ended or was released stays over.
 */
function decideJoin(
  record: PolicyRecord | undefined,
  request: RenewRequest,
  caller: Caller,
  now: number,
  config: PolicyConfig,
  floor: bigint,
  support: readonly EpochSupport[],
): Decision {
  const { resource, epoch, ttlMs } = request;
  const current = record?.epoch ?? floor;
  const leaseEndsAt = now + ttlMs;
  const outcome = { status: 'renewed', remainingMs: remainingMs(leaseEndsAt, now) } as const;
  if (epoch <= current) {
    // Below the record (or the floor), only where no lease runs at all: not even the caller's own, which a grant it
    // never got must not replace. (The record's own grant never gets here: decideRenew judged it.)
    if (record && leaseRunning(record, now)) return notHolder(record, floor);
    return { action: 'join', joined: { epoch, holder: caller.holder }, leaseEndsAt, outcome };
  }
  if (
    leaseInTheWay(record, caller, false, now) ||
    !epochStepAllowed(current, hasRecord(record), epoch, support, config)
  )
    return notHolder(record, floor);
  const digest = grantDigest({ clusterId: config.clusterId, resource, epoch, holder: caller.holder });
  return { action: 'join', record: { epoch, holder: caller.holder, grantDigest: digest }, leaseEndsAt, outcome };
}

export function decideRelease(
  record: PolicyRecord | undefined,
  request: { readonly epoch: bigint },
  caller: Caller,
  now: number,
  floor: bigint,
): Decision {
  if (!record) return notHolder(record, floor);
  const lease = currentLease(record);
  if (lease.epoch === request.epoch && mayManage(record, caller, now)) {
    if (lease.released) return { action: 'reply', outcome: { status: 'released' } };
    return { action: 'release', outcome: { status: 'released' } };
  }
  // The record's own grant while a lease joined below it is the lease now: no lease of it runs to end.
  if (record.joined && isGrant(record, request.epoch, caller.holder) && record.session === caller.session)
    return { action: 'reply', outcome: { status: 'released' } };
  return notHolder(record, floor);
}
