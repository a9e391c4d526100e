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
 */
import { bytesEqual } from '../common/bytes.js';
import { isQuorumFenceError } from '../common/errors.js';
import { expectResource } from '../common/check.js';
import { MAX_EPOCH, MIN_EPOCH } from '../common/limits.js';
import { grantDigest } from '../token/grant.js';
import type {
  AcquireOutcome,
  AcquireRequest,
  Outcome,
  ReleaseOutcome,
  RenewOutcome,
  RenewRequest,
  Request,
  StatusOutcome,
} from '../protocol/messages.js';
import { mayAccess, type AccessRules } from './access.js';

/** What the signing record keeps durably per resource (never lowered). */
export interface SignedRecord {
  /** The highest epoch signed for the resource. */
  readonly epoch: bigint;
  /** The holder signed at that epoch. */
  readonly holder: Uint8Array;
  /** grantDigest of (cluster, resource, epoch, holder): 32 bytes. */
  readonly grantDigest: Uint8Array;
}

/** A grant a lease belongs to: its epoch and holder. */
export interface LeaseGrant {
  readonly epoch: bigint;
  readonly holder: Uint8Array;
}

/** A lease joined below the record (docs/protocol.md, "Leases that outlive f signers"): its grant, session, release. */
export interface JoinedLease extends LeaseGrant {
  readonly session: string;
  readonly released: boolean;
}

/** The durable record plus the volatile lease state. */
export interface PolicyRecord extends SignedRecord {
  /** When the lease now (the joined one, or the record's grant's) ends (monotonic ms; 0 when no lease runs). */
  readonly leaseEndsAt: number;
  /** The holder of the record's grant released its lease since this replica started (volatile, see the header). */
  readonly released: boolean;
  /**
   * The client session holding the record's grant's lease ('' for a sessionless client), or undefined when unknown:
   * the replica restarted since (volatile, docs/protocol.md "Sessions").
   */
  readonly session?: string | undefined;
  /**
   * The lease this replica joined below its record, when the lease now is that one and not the record's grant's
   * (volatile); `leaseEndsAt` is then its end.
   */
  readonly joined?: JoinedLease | undefined;
  /**
   * There is no record (compacted, or never signed): the floor stands for it (`epoch`, with no holder), and this
   * carries only a lease joined below the floor (`joined`).
   */
  readonly compacted?: boolean;
}

/** No holder: the place of a record's holder in a record that stands for the floor (no Ed25519 key is all zeros). */
const NO_HOLDER = new Uint8Array(32);

/**
 * A resource without a record, as the policy sees it while a lease joined below the floor runs there: the floor in the
 * record's place, holding only that lease.
 */
export function floorRecord(floor: bigint, joined: JoinedLease, leaseEndsAt: number): PolicyRecord {
  return {
    epoch: floor,
    holder: NO_HOLDER,
    grantDigest: NO_HOLDER,
    compacted: true,
    joined,
    leaseEndsAt,
    released: false,
  };
}

export interface PolicyConfig {
  readonly clusterId: Uint8Array;
  readonly minTtlMs: number;
  readonly maxTtlMs: number;
  /** How far above a resource's record an acquire may go without evidence (step 6). */
  readonly freeEpochStep: bigint;
  /** How far above the record (without one: above the floor, with no evidence) an acquire may go with evidence from fewer than f+1 replicas. */
  readonly maxEpochStep: bigint;
  /** The cluster's f: evidence from f+1 replicas includes an honest one. */
  readonly faultTolerance: number;
  readonly access: AccessRules;
}

/** Another replica's verified partial on a grant of the request's resource to the same holder at `epoch`. */
export interface EpochSupport {
  readonly replica: number;
  readonly epoch: bigint;
}

export type Decision =
  /** Answer without changing any state (refusals, status, idempotent release). */
  | { readonly action: 'reply'; readonly outcome: Outcome }
  /** Record this first (durably), set the lease, then sign and answer `granted`. */
  | { readonly action: 'grant'; readonly record: SignedRecord; readonly leaseEndsAt: number }
  /** The identical grant again: sign it again (same bytes) and answer `granted`. */
  | { readonly action: 'resend'; readonly leaseEndsAt: number }
  /**
   * Set the volatile lease end; nothing durable changes. `joined`: the lease renewed is that joined grant's (undefined:
   * the record's grant's, which it becomes again if a joined lease was there before).
   */
  | {
      readonly action: 'renew';
      readonly leaseEndsAt: number;
      readonly joined?: LeaseGrant;
      readonly outcome: RenewOutcome;
    }
  /**
   * A renew that joins a lease this replica does not hold yet, then answers `renewed`; nothing is signed (the holder
   * already has its token). Above the record: `record` is written first (durably), as for a grant. At or below it:
   * the lease is kept in memory for `joined`, a grant this replica never signed.
   */
  | {
      readonly action: 'join';
      readonly record?: SignedRecord;
      readonly joined?: LeaseGrant;
      readonly leaseEndsAt: number;
      readonly outcome: RenewOutcome;
    }
  /**
   * End the lease and remember the release (volatile: a release lost in a crash
   * only means the restart rule keeps the lease for maxTtl, a liveness cost, so
   * it is not worth an fsync), then answer.
   */
  | { readonly action: 'release'; readonly outcome: ReleaseOutcome };

/** Lease times on the wire fit in 2^31-1 ms (the codec's bound). */
const MAX_WIRE_MS = 0x7fff_ffff;

export function remainingMs(leaseEndsAt: number, now: number): number {
  return Math.min(MAX_WIRE_MS, Math.max(0, Math.ceil(leaseEndsAt - now)));
}

/** The lease now: the one joined below the record, or the record's grant's. */
function currentLease(record: PolicyRecord): LeaseGrant & { readonly session?: string; readonly released: boolean } {
  return record.joined ?? record;
}

function leaseRunning(record: PolicyRecord, now: number): boolean {
  return !currentLease(record).released && record.leaseEndsAt > now;
}

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

/** Who asks: the authenticated holder key and the client session of its connection ('' for none). */
export interface Caller {
  readonly holder: Uint8Array;
  readonly session: string;
}

/** A record, not the floor standing for one (epoch steps differ: docs/protocol.md, "Epoch steps"). */
function hasRecord(record: PolicyRecord | undefined): boolean {
  return record !== undefined && record.compacted !== true;
}

function isGrant(grant: LeaseGrant, epoch: bigint, holder: Uint8Array): boolean {
  return grant.epoch === epoch && bytesEqual(grant.holder, holder);
}

/** The caller holds the lease now, under the session that holds it (docs/protocol.md, "Sessions"). */
function holdsLease(record: PolicyRecord, caller: Caller): boolean {
  const lease = currentLease(record);
  return bytesEqual(lease.holder, caller.holder) && lease.session === caller.session;
}

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

function decideRenew(
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

function decideRelease(
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

/**
 * Whether another lease is in the way of the caller: one that runs and is not the caller's (another holder's, or
 * the same holder's under another session — unless the caller resumes, which ends its own identity's lease).
 */
function leaseInTheWay(record: PolicyRecord | undefined, caller: Caller, resume: boolean, now: number): boolean {
  if (!record || !leaseRunning(record, now) || holdsLease(record, caller)) return false;
  return !(resume && bytesEqual(currentLease(record).holder, caller.holder));
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

/**
 * Step 6: may a grant at `epoch` follow `current` (the record's epoch, or the floor when `hasRecord` is false)?
 * `support` is verified evidence from distinct other replicas (the caller checked the partials).
 */
export function epochStepAllowed(
  current: bigint,
  hasRecord: boolean,
  epoch: bigint,
  support: readonly EpochSupport[],
  config: PolicyConfig,
): boolean {
  const distance = epoch - current;
  // A resource without a record starts from the floor, which honest replicas compact at different times: the
  // wide step keeps a new resource's first acquire one round trip while their floors differ.
  if (distance <= (hasRecord ? config.freeEpochStep : config.maxEpochStep)) return true;
  let supporters = 0;
  for (const entry of support) if (entry.epoch >= epoch) supporters++;
  if (supporters > config.faultTolerance) return true;
  return supporters > 0 && distance <= config.maxEpochStep;
}
