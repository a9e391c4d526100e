/**
 * Renewing and releasing a grant: one round each, judged by quorum like
 * acquire. A renewal counts once t replicas extended the lease (then at least
 * f+1 honest ones refuse every other holder, and no one else can gather t
 * partials); the lease is lost once f+1 replicas say we are not its holder.
 */
import type { ReleaseOutcome, RenewOutcome } from '../protocol/messages.js';
import { releaseBody, renewBody } from './core/bodies.js';
import { RoundCall } from './core/round-call.js';
import type { RoundEnd } from './core/round.js';
import { isReady } from './connection-state.js';
import { connectionViews, drive } from './drive.js';
import type { ReplicaFault } from './evidence.js';
import { CallFaults, type QuorumContext } from './quorum-context.js';
import { QuorumTally } from './quorum-tally.js';

export type RenewResult =
  | {
      readonly ok: true;
      /** Client clock reading taken before the renew requests left: the new lease view starts here. */
      readonly sentAt: number;
      readonly faults: readonly ReplicaFault[];
    }
  | {
      readonly ok: false;
      /**
       * `lost`: f+1 replicas say another holder (or a release) ended this epoch's lease; retrying will not help.
       * The others may pass on a later try while the lease lasts.
       */
      readonly reason: 'lost' | 'unavailable' | 'timeout' | 'aborted' | 'forbidden' | 'invalid';
      readonly message: string;
      readonly faults: readonly ReplicaFault[];
    };

export interface GrantRef {
  readonly resource: string;
  readonly epoch: bigint;
  /** The replicas the grant was asked of: no other can hold its lease, so renewals and releases go only there. */
  readonly asked?: readonly number[] | undefined;
}

/** One renewal round for `grant`, extending the lease by `ttlMs` from now. */
export function renewGrant(
  ctx: QuorumContext,
  grant: GrantRef,
  ttlMs: number,
  signal?: AbortSignal,
): Promise<RenewResult> {
  const { f, t } = ctx.cluster;
  const { requestTimeoutMs } = ctx.options;
  const faults = new CallFaults();
  const tally = new QuorumTally<'not_holder' | 'forbidden' | 'invalid'>(f, t);
  const core = new RoundCall<RenewResult>(
    {
      body: () => renewBody(grant.resource, grant.epoch, ttlMs),
      timeoutMs: requestTimeoutMs,
      only: grant.asked && new Set(grant.asked),
      keepGoing: (possible) => tally.open(possible),
      onAnswer: (replica, answer) => {
        faults.fromAnswer(replica, answer);
        if (answer.kind !== 'reply') return;
        const outcome = answer.outcome as RenewOutcome;
        if (outcome.status === 'renewed') tally.accept();
        else tally.refuse(outcome.status, outcome.status === 'invalid' ? outcome.message : '');
      },
      finish: (ended, sentAt) => renewResult(tally, ended, sentAt, faults.list(), grant, requestTimeoutMs),
    },
    connectionViews(ctx),
    signal?.aborted,
  );
  return drive(ctx, core, { signal });
}

/** How a renewal round ended, by its tally (pure). */
export function renewResult(
  tally: QuorumTally<'not_holder' | 'forbidden' | 'invalid'>,
  ended: RoundEnd | undefined,
  sentAt: number,
  list: readonly ReplicaFault[],
  grant: GrantRef,
  requestTimeoutMs: number,
): RenewResult {
  const t = tally.need;
  const renewed = tally.accepted;
  if (renewed >= t) return { ok: true, sentAt, faults: list };
  if (ended === 'aborted')
    return { ok: false, reason: 'aborted', message: 'the caller aborted the renewal', faults: list };
  const refused = tally.confirmed('not_holder', 'forbidden', 'invalid');
  if (refused?.kind === 'not_holder') {
    return {
      ok: false,
      reason: 'lost',
      message: `${refused.count} replicas no longer hold epoch ${grant.epoch} for this holder`,
      faults: list,
    };
  }
  if (refused?.kind === 'forbidden')
    return { ok: false, reason: 'forbidden', message: `${refused.count} replicas refuse this identity`, faults: list };
  if (refused?.kind === 'invalid')
    return { ok: false, reason: 'invalid', message: `replicas refused the renewal: ${refused.first}`, faults: list };
  if (ended === 'deadline')
    return {
      ok: false,
      reason: 'timeout',
      message: `only ${renewed} of ${t} renewals within ${requestTimeoutMs} ms`,
      faults: list,
    };
  return { ok: false, reason: 'unavailable', message: `only ${renewed} of ${t} replicas renewed`, faults: list };
}

export type ReleaseResult =
  | { readonly ok: true; readonly released: number; readonly faults: readonly ReplicaFault[] }
  | {
      readonly ok: false;
      /** `not_holder`: f+1 replicas say this epoch was not (or no longer) ours; the others: fewer than t confirmed in time. */
      readonly reason: 'not_holder' | 'unavailable' | 'timeout' | 'aborted';
      readonly message: string;
      readonly released: number;
      readonly faults: readonly ReplicaFault[];
    };

/** A release on its way (`releaseGrant`): how many replicas it was sent to at once, and its round's result. */
export interface ReleaseInFlight {
  /** Replicas the release was handed to at once (the connected ones among those that may hold the lease). */
  readonly sent: number;
  /** Resolves once t replicas confirmed, f+1 denied, or the round ended (requestTimeoutMs at most). */
  readonly done: Promise<ReleaseResult>;
}

/**
 * Releases `grant` at every reachable replica. The requests leave before this returns (`sent`); `done` succeeds
 * once t confirm (then no f+1 honest replicas still hold the lease, so another holder can get in). The round is
 * kept in the context's `releases` until it ends, so closing the client waits for it rather than cutting it off.
 */
export function releaseGrant(ctx: QuorumContext, grant: GrantRef, signal?: AbortSignal): ReleaseInFlight {
  const { f, t } = ctx.cluster;
  const { requestTimeoutMs } = ctx.options;
  const faults = new CallFaults();
  const only = grant.asked && new Set(grant.asked);
  const views = connectionViews(ctx);
  // The round's start sends to every ready connection it may ask, before drive() returns.
  const sent = signal?.aborted
    ? 0
    : views.filter((view) => isReady(view.state) && (only === undefined || only.has(view.index))).length;
  // forbidden and invalid answers count for neither side: a release is judged only by who confirms or denies holding.
  const tally = new QuorumTally<'not_holder'>(f, t);
  const core = new RoundCall<ReleaseResult>(
    {
      body: () => releaseBody(grant.resource, grant.epoch),
      timeoutMs: requestTimeoutMs,
      only,
      keepGoing: (possible) => tally.open(possible),
      onAnswer: (replica, answer) => {
        faults.fromAnswer(replica, answer);
        if (answer.kind !== 'reply') return;
        const { status } = answer.outcome as ReleaseOutcome;
        if (status === 'released') tally.accept();
        else if (status === 'not_holder') tally.refuse('not_holder');
      },
      finish: (ended) => releaseResult(tally, ended, faults.list(), grant, requestTimeoutMs),
    },
    views,
    signal?.aborted,
  );
  const done = drive(ctx, core, { signal });
  const releases = ctx.releases;
  if (releases) {
    releases.add(done);
    const forget = () => releases.delete(done);
    done.then(forget, forget);
  }
  return { sent, done };
}

/**
 * Sends `grant`'s release to every connected replica that may hold its lease and waits for nothing: the requests
 * are `quiet`, so the replicas send no reply (docs/protocol.md, "Release and renewal off the holder's path").
 * What `lease.release()` does unless asked to wait. @returns how many replicas it was sent to.
 */
export function releaseQuietly(ctx: QuorumContext, grant: GrantRef): number {
  const only = grant.asked && new Set(grant.asked);
  let sent = 0;
  for (const channel of ctx.channels.channels) {
    if (only !== undefined && !only.has(channel.index)) continue;
    if (channel.notify({ ...releaseBody(grant.resource, grant.epoch), quiet: true })) sent++;
  }
  return sent;
}

/** How a release round ended, by its tally (pure). */
export function releaseResult(
  tally: QuorumTally<'not_holder'>,
  ended: RoundEnd | undefined,
  list: readonly ReplicaFault[],
  grant: GrantRef,
  requestTimeoutMs: number,
): ReleaseResult {
  const t = tally.need;
  const released = tally.accepted;
  if (released >= t) return { ok: true, released, faults: list };
  if (ended === 'aborted')
    return { ok: false, reason: 'aborted', message: 'the caller aborted the release', released, faults: list };
  const denied = tally.confirmed('not_holder');
  if (denied) {
    return {
      ok: false,
      reason: 'not_holder',
      message: `${denied.count} replicas say epoch ${grant.epoch} is not held by this identity`,
      released,
      faults: list,
    };
  }
  if (ended === 'deadline')
    return {
      ok: false,
      reason: 'timeout',
      message: `only ${released} of ${t} releases confirmed within ${requestTimeoutMs} ms`,
      released,
      faults: list,
    };
  return {
    ok: false,
    reason: 'unavailable',
    message: `only ${released} of ${t} replicas confirmed the release`,
    released,
    faults: list,
  };
}
