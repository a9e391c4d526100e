/**
 * The grant policy: the replica rules of docs/protocol.md as one pure function,
 * `(record, request, holder, now, config) → decision`. No I/O, no clock
 * reads, no randomness: the caller supplies the record (durable fields plus
 * the volatile lease end) and the monotonic time, and carries the decision
 * out (record durably, then sign; or just reply).
 *
 * Acquire checks, cheapest first and in the order docs/protocol.md fixes:
 *   1 invalid   resource 1..256 UTF-8 bytes, epoch 1..2^63-1, ttl in [minTtlMs, maxTtlMs]
 *   2 forbidden the access rules do not give this holder this resource
 *   3 resend    same (R, e, H) as the record, not released, asked by the session holding its lease: the same
 *               partial again (BLS is deterministic)
 *   4 stale     e <= record.epoch (the floor when the resource has no record)
 *   5 busy      another holder's lease is running and not released, or the same holder's under another session
 *               (docs/protocol.md, "Sessions"; `resume` ends the holder's own other session's lease instead)
 *   6 too_far   e too far above the record (or the floor) for the evidence the request carries (epochStep)
 *   7 grant     record (R, e, H) durably, then sign
 *
 * Step 6 (docs/protocol.md, "Epoch steps"): an epoch within the free step of the record is granted as is
 * (freeEpochStep for a resource with a record, maxEpochStep above the floor for one without); beyond it, only
 * with catch-up evidence: partials by f+1 other replicas on grants to this holder at epochs >= e allow any
 * distance (one of them is honest, so an honest replica is already there and the cluster's epochs do not grow),
 * partials by fewer allow up to maxEpochStep. So a client alone can push one replica ahead of the others by at
 * most the free step per grant, and the others can always follow it.
 *
 * Lease choices (documented in README.md):
 *   - A resend of an unreleased grant renews its lease as a fresh acquire would
 *     (the lease ends at max(current end, now + ttl)): a retried acquire means
 *     the holder still wants the lease. A released grant is not sent again:
 *     the identical request is `stale`. Handing back its partial would give
 *     the holder a token with no lease behind it, while the next epoch goes to
 *     someone else (a client that proposes an epoch it does not know to be
 *     free, as the first attempt on an unknown resource does, would hit this);
 *     no honest client needs it, since it never asks again for an epoch it
 *     released.
 *   - renew extends only the recorded holder's unreleased lease at the
 *     recorded epoch, to max(current end, now + ttl); the holding session may
 *     revive its lease that ran out, since nobody else was signed in between,
 *     but a session this replica does not know (it restarted) renews only a
 *     lease still running (the restart rule's): a lapsed lease is over for
 *     every other process of the identity (docs/protocol.md, "Sessions").
 *   - renew on a replica that holds no lease of the grant yet joins it: a grant
 *     the replica may make (steps 4-6 of acquire, the grant's evidence counted)
 *     is recorded durably and its lease starts, without a partial: the holder
 *     has its token, and the same (R, e, H) is not a second grant. So a lease
 *     comes to be held at every replica that could have granted it, and any t
 *     of them renew it (docs/protocol.md, "Leases that outlive f signers").
 *   - release ends the lease only for the recorded holder at the recorded
 *     epoch; releasing an already released grant answers `released` again.
 *     The release is kept in memory, not in the signing record: who may be
 *     signed never depends on it, and after a restart the lease simply counts
 *     as running for maxTtl, as every recorded lease does.
 *
 * The rules live here for every request's steps 1 and 2, acquire and status; renew, join and release in
 * policy-renew-release.ts; step 6 in policy-epoch-step.ts; the lease as they read it in policy-lease.ts; the shapes
 * they read and answer in policy-types.ts (exported from here too).
 */
import { isQuorumFenceError } from '../common/errors.js';
import { expectResource } from '../common/check.js';
import { MAX_EPOCH, MIN_EPOCH } from '../common/limits.js';
import { grantDigest } from '../token/grant.js';
import type { AcquireOutcome, AcquireRequest, Request, StatusOutcome } from '../protocol/messages.js';
import { mayAccess } from './access.js';
import { epochStepAllowed } from './policy-epoch-step.js';
import { hasRecord, isGrant, leaseInTheWay, leaseRunning, remainingMs } from './policy-lease.js';
import { decideRelease, decideRenew } from './policy-renew-release.js';
import type { Caller, Decision, EpochSupport, PolicyConfig, PolicyRecord } from './policy-types.js';

export { epochStepAllowed } from './policy-epoch-step.js';
export { remainingMs } from './policy-lease.js';
export {
  floorRecord,
  type Caller,
  type Decision,
  type EpochSupport,
  type JoinedLease,
  type LeaseGrant,
  type PolicyConfig,
  type PolicyRecord,
  type SignedRecord,
} from './policy-types.js';

function invalid(message: string): { action: 'reply'; outcome: { status: 'invalid'; message: string } } {
  return { action: 'reply', outcome: { status: 'invalid', message } };
}

const FORBIDDEN = { action: 'reply', outcome: { status: 'forbidden' } } as const;

/**
 * Step 1 and 2 for any request: bounds, then access. Returns a refusal, or
 * undefined when the request may go on to the record.
 */
export function precheck(request: Request, holder: Uint8Array, config: PolicyConfig): Decision | undefined {
  try {
    expectResource(request.resource);
  } catch (error) {
    if (isQuorumFenceError(error)) return invalid(error.message);
    throw error;
  }
  if (request.type !== 'status' && (request.epoch < MIN_EPOCH || request.epoch > MAX_EPOCH)) {
    // Never echo the refused value: a reply must not grow with what the peer sent.
    return invalid('"epoch" expected 1 .. 2^63-1');
  }
  if (
    (request.type === 'acquire' || request.type === 'renew') &&
    (request.ttlMs < config.minTtlMs || request.ttlMs > config.maxTtlMs)
  ) {
    return invalid(`"ttlMs" expected ${config.minTtlMs}..${config.maxTtlMs}`);
  }
  if (!mayAccess(config.access, holder, request.resource)) return FORBIDDEN;
  return undefined;
}

/**
 * The policy. `record` is undefined when the resource has no record: never
 * signed, or compacted; `floor` (the store's replica-wide epoch floor, at
 * least every compacted record's epoch) then stands for its epoch, so a
 * compacted resource is never signed again at an epoch it already had.
 * Throws only for programmer errors (it is total over every decoded request).
 */
export function decide(
  record: PolicyRecord | undefined,
  request: Request,
  holder: Uint8Array,
  now: number,
  config: PolicyConfig,
  floor = 0n,
  support: readonly EpochSupport[] = [],
  session = '',
): Decision {
  return (
    precheck(request, holder, config) ?? decideChecked(record, request, holder, now, config, floor, support, session)
  );
}

/** Steps 3 onwards: the rules for a request that passed steps 1 and 2 (`precheck`). */
export function decideChecked(
  record: PolicyRecord | undefined,
  request: Request,
  holder: Uint8Array,
  now: number,
  config: PolicyConfig,
  floor = 0n,
  support: readonly EpochSupport[] = [],
  session = '',
): Decision {
  const caller = { holder, session };
  switch (request.type) {
    case 'acquire':
      return decideAcquire(record, request, caller, now, config, floor, support);
    case 'renew':
      return decideRenew(record, request, caller, now, config, floor, support);
    case 'release':
      return decideRelease(record, request, caller, now, floor);
    case 'status':
      return { action: 'reply', outcome: statusOf(record, now, floor) };
  }
}

/**
 * Step 3: the record is this grant, unreleased, and its lease is the asking session's (a lease joined below the record
 * since then, once over, hands it back, as a lapsed lease is revived).
 */
function resendable(record: PolicyRecord, epoch: bigint, caller: Caller, now: number): boolean {
  if (record.released || !isGrant(record, epoch, caller.holder) || record.session !== caller.session) return false;
  return !record.joined || !leaseRunning(record, now);
}

function decideAcquire(
  record: PolicyRecord | undefined,
  request: AcquireRequest,
  caller: Caller,
  now: number,
  config: PolicyConfig,
  floor: bigint,
  support: readonly EpochSupport[],
): Decision {
  const { resource, epoch, ttlMs } = request;
  const current = record?.epoch ?? floor;
  // Only the session holding the grant gets its partial again: another process of the same identity is another holder.
  if (record && resendable(record, epoch, caller, now))
    return { action: 'resend', leaseEndsAt: Math.max(record.leaseEndsAt, now + ttlMs) };
  if (epoch <= current)
    return { action: 'reply', outcome: { status: 'stale', epoch: current } satisfies AcquireOutcome };
  if (leaseInTheWay(record, caller, request.resume === true, now))
    return {
      action: 'reply',
      outcome: { status: 'busy', epoch: record!.epoch, remainingMs: remainingMs(record!.leaseEndsAt, now) },
    };
  if (!epochStepAllowed(current, hasRecord(record), epoch, support, config))
    return { action: 'reply', outcome: { status: 'too_far', epoch: current } };
  const digest = grantDigest({ clusterId: config.clusterId, resource, epoch, holder: caller.holder });
  return { action: 'grant', record: { epoch, holder: caller.holder, grantDigest: digest }, leaseEndsAt: now + ttlMs };
}

export function statusOf(record: PolicyRecord | undefined, now: number, floor = 0n): StatusOutcome {
  if (!record) return { status: 'ok', epoch: floor, leased: false, remainingMs: 0 };
  const leased = leaseRunning(record, now);
  return { status: 'ok', epoch: record.epoch, leased, remainingMs: leased ? remainingMs(record.leaseEndsAt, now) : 0 };
}
