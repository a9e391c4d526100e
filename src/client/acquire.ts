/**
 * Getting an admission token from a quorum (docs/protocol.md, Client rules).
 *
 * Each attempt picks an epoch, asks t replicas to sign (resource, epoch,
 * holder), the others too as soon as one of those says anything else or is
 * late, and combines the first t partials that verify. The epoch comes from
 * what replicas reported (the (f+1)-th largest, plus one), from the epoch
 * this client was last granted, or, when nothing is known yet, is simply the
 * lowest one not tried: an uncontended acquire is then one round trip, and a
 * resource that has moved on answers `stale` with each replica's epoch, which
 * the immediate retry uses. Failed attempts are classified:
 *
 * - busy (f+1 replicas hold someone else's lease): take a place in the line
 *   of the resource's leader, which answers when our turn comes, granting
 *   the resource's next epoch (docs/protocol.md, Hot handoffs); if the line
 *   is full, or our turn did not come within the wait we asked for, wait as
 *   before lines existed: for the time at least one honest replica says
 *   remains, or a replica's release notice, polling meanwhile;
 * - outdated (no grants, only stale or too_far answers): the epoch moved on
 *   while we were not looking; retry at once with what the answers reported;
 * - contended (split votes): retry after jittered exponential backoff,
 *   releasing whatever partial grants we got so the other contender is not
 *   blocked by our half-won lease; a turn the leader granted that was lost
 *   this way is retried in the line once before the call falls back to polling;
 * - forbidden / invalid (f+1 say so, so at least one honest replica): stop;
 * - unavailable (fewer than t replicas could answer): stop at once.
 *
 * Under contention (any retry, or a resource whose last acquire needed
 * retries or waited its turn in a line) an attempt goes leader-first: it asks one replica chosen by the
 * resource name, and the others only once that one granted. Contenders then
 * queue at one replica instead of splitting the votes of all of them, and a
 * waiter's poll costs one request instead of N. A replica that refuses
 * everyone cannot stall a client this way: every LEADER_FIRST_WINDOW_MS at
 * least one attempt asks all replicas, whose (f+1)-th rules decide again.
 *
 * Nothing a replica sends can make this throw, and every wait is cut short
 * by the caller's deadline and AbortSignal.
 *
 * The rules live in a core that does no I/O (src/client/core/acquire.ts, attempt.ts and answers.ts: its state plain
 * data, events in, actions out); this file runs it over the client's connections (src/client/drive.ts).
 */
import { acquireCore, newAcquire } from './core/acquire.js';
import type { AcquiredGrant, AcquireGrantResult } from './core/results.js';
import { connectionViews, coreEnv, drive } from './drive.js';
import { releaseQuietly, renewGrant } from './lease-calls.js';
import { renewalTime } from './lease-timing.js';
import type { QuorumContext } from './quorum-context.js';

// The call's results are the core's types (its decisions make them); re-exported here, where callers look.
export type { AcquiredGrant, AcquireGrantResult, AcquireRefusal, AcquireRefusalReason } from './core/results.js';

export interface AcquireRequest {
  readonly resource: string;
  readonly ttlMs: number;
  /** How long to keep waiting while the resource is held by someone else. */
  readonly waitMs: number;
  /** The whole call ends by then (ms from the start), whatever happens. */
  readonly timeoutMs: number;
  readonly signal?: AbortSignal | undefined;
  /** End this identity's lease held under another session (a crashed process's) instead of waiting it out. */
  readonly resume?: boolean;
}

/**
 * Runs the acquire protocol (its core is src/client/core/acquire.ts). Resolves with a grant or a refusal; the
 * caller (QuorumFenceClient) validates the request first and wraps the grant in a Lease.
 * @throws QuorumFenceError EPOCH_OUT_OF_RANGE when the resource's epochs are used up (2^63-1 grants).
 */
export async function acquireGrant(ctx: QuorumContext, request: AcquireRequest): Promise<AcquireGrantResult> {
  const { resource, ttlMs, waitMs, signal, resume } = request;
  const { clock } = ctx.options;
  const started = clock.now();
  for (let tries = 1; ; tries++) {
    const elapsed = clock.now() - started;
    const pollOnly = tries > 1;
    const state = newAcquire(
      {
        resource,
        ttlMs,
        waitMs: Math.max(0, waitMs - elapsed),
        timeoutMs: request.timeoutMs - elapsed,
        resume,
        pollOnly,
      },
      connectionViews(ctx),
      ctx.epochHints.get(resource),
      signal?.aborted ?? false,
    );
    const end = await drive(ctx, acquireCore(coreEnv(ctx), state), { signal, resource });
    if (end.hint) ctx.epochHints.set(resource, end.hint);
    if (!end.result.ok) return end.result;
    const grant = await freshView(ctx, end.result.grant, signal);
    if (grant) return { ...end.result, grant };
    // Its lease ended before it could be held: let it go and ask for the next epoch, while the call's time lasts.
    releaseQuietly(ctx, { resource, epoch: end.result.grant.token.grant.epoch });
    if (tries >= MAX_STALE_GRANTS || clock.now() - started >= request.timeoutMs)
      return {
        ok: false,
        reason: 'timeout',
        message: `granted epoch ${end.result.grant.token.grant.epoch} after its lease had ended at the replicas (a long wait in a line)`,
        faults: end.result.faults,
      };
  }
}

/**
 * Grants whose lease was over when they came (freshView) before an acquire call gives up, if its deadline has not
 * ended it first: the later tries poll rather than wait in the line, so another one is rare.
 */
const MAX_STALE_GRANTS = 8;

/**
 * A grant whose request waited its turn in a line carries the time that request left, long before the replicas
 * granted it: safe (their leases start later), but its lease view may then be mostly spent, or over, before the
 * holder gets it; and the replicas that granted the request at once (no lease in its way there) may have let its
 * lease end while the leader kept it waiting. Such a grant (past the point where its first renewal would start) is
 * renewed once before it is handed over, so the holder starts with a whole ttl from the renewal. Undefined when
 * that renewal fails: the lease is not held (its replicas moved on, or too few answer), and the grant is no use.
 */
async function freshView(
  ctx: QuorumContext,
  grant: AcquiredGrant,
  signal?: AbortSignal,
): Promise<AcquiredGrant | undefined> {
  if (ctx.options.clock.now() < renewalTime(grant.sentAt, grant.ttlMs, ctx.options)) return grant;
  const ref = { resource: grant.token.grant.resource, epoch: grant.token.grant.epoch, holders: new Set(grant.signers) };
  const renewed = await renewGrant(ctx, { ...ref, evidence: grant.evidence }, grant.ttlMs, signal);
  return renewed.ok ? { ...grant, sentAt: renewed.sentAt } : undefined;
}
