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
 *   3 resend    same (R, e, H) as the record, not released: the same partial again (BLS is deterministic)
 *   4 stale     e <= record.epoch (the floor when the resource has no record)
 *   5 busy      another holder's lease is running and not released
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
 *     recorded epoch, to max(current end, now + ttl); it may revive a lease
 *     that ran out, since nobody else was signed in between.
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
  Outcome,
  ReleaseOutcome,
  RenewOutcome,
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

/** The durable record plus the volatile lease state. */
export interface PolicyRecord extends SignedRecord {
  /** When the lease ends (monotonic ms; 0 when no lease runs). */
  readonly leaseEndsAt: number;
  /** The holder released the lease since this replica started (volatile, see the header). */
  readonly released: boolean;
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
  /** Set the volatile lease end; nothing durable changes. */
  | { readonly action: 'renew'; readonly leaseEndsAt: number; readonly outcome: RenewOutcome }
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

function leaseRunning(record: PolicyRecord, now: number): boolean {
  return !record.released && record.leaseEndsAt > now;
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
): Decision {
  const refused = precheck(request, holder, config);
  if (refused) return refused;
  switch (request.type) {
    case 'acquire':
      return decideAcquire(record, request, holder, now, config, floor, support);
    case 'renew':
      return decideRenew(record, request, holder, now, floor);
    case 'release':
      return decideRelease(record, request, holder, floor);
    case 'status':
      return { action: 'reply', outcome: statusOf(record, now, floor) };
  }
}

/** renew: only the recorded holder's unreleased lease at the recorded epoch, to max(current end, now + ttl). */
function decideRenew(
  record: PolicyRecord | undefined,
  request: { readonly epoch: bigint; readonly ttlMs: number },
  holder: Uint8Array,
  now: number,
  floor: bigint,
): Decision {
  if (!record || record.released || record.epoch !== request.epoch || !bytesEqual(record.holder, holder)) {
    return { action: 'reply', outcome: { status: 'not_holder', epoch: record?.epoch ?? floor } };
  }
  const leaseEndsAt = Math.max(record.leaseEndsAt, now + request.ttlMs);
  return {
    action: 'renew',
    leaseEndsAt,
    outcome: { status: 'renewed', remainingMs: remainingMs(leaseEndsAt, now) },
  };
}

/** release: only the recorded holder at the recorded epoch; a second release answers `released` again. */
function decideRelease(
  record: PolicyRecord | undefined,
  request: { readonly epoch: bigint },
  holder: Uint8Array,
  floor: bigint,
): Decision {
  if (!record || record.epoch !== request.epoch || !bytesEqual(record.holder, holder)) {
    return { action: 'reply', outcome: { status: 'not_holder', epoch: record?.epoch ?? floor } };
  }
  if (record.released) return { action: 'reply', outcome: { status: 'released' } };
  return { action: 'release', outcome: { status: 'released' } };
}

function decideAcquire(
  record: PolicyRecord | undefined,
  { resource, epoch, ttlMs }: { resource: string; epoch: bigint; ttlMs: number },
  holder: Uint8Array,
  now: number,
  config: PolicyConfig,
  floor: bigint,
  support: readonly EpochSupport[],
): Decision {
  const current = record?.epoch ?? floor;
  if (record && !record.released && record.epoch === epoch && bytesEqual(record.holder, holder)) {
    return { action: 'resend', leaseEndsAt: Math.max(record.leaseEndsAt, now + ttlMs) };
  }
  if (epoch <= current)
    return { action: 'reply', outcome: { status: 'stale', epoch: current } satisfies AcquireOutcome };
  if (record && leaseRunning(record, now) && !bytesEqual(record.holder, holder)) {
    return {
      action: 'reply',
      outcome: { status: 'busy', epoch: record.epoch, remainingMs: remainingMs(record.leaseEndsAt, now) },
    };
  }
  if (!epochStepAllowed(current, record !== undefined, epoch, support, config))
    return { action: 'reply', outcome: { status: 'too_far', epoch: current } };
  const digest = grantDigest({ clusterId: config.clusterId, resource, epoch, holder });
  return { action: 'grant', record: { epoch, holder, grantDigest: digest }, leaseEndsAt: now + ttlMs };
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
