/**
 * Joining, renewing and releasing a grant's lease: one round each, judged by quorum like acquire. Every replica is
 * asked, not only the grant's signers: a replica that did not sign the grant joins its lease on a renewal when it
 * could have granted it (docs/protocol.md, "Leases that outlive f signers"), so any t replicas can renew it. A
 * renewal counts once t replicas extended the lease (then at least f+1 honest ones refuse every other holder, and
 * no one else can gather t partials); the lease is lost once f+1 replicas that held it say we are not its holder.
 */
import type { GrantEvidence, ReleaseOutcome, RenewOutcome } from '../protocol/messages.js';
import { releaseBody, renewBodies } from './core/bodies.js';
import { RoundCall } from './core/round-call.js';
import type { RoundEnd } from './core/round.js';
import { isReady } from './connection-state.js';
import { connectionViews, drive } from './drive.js';
import type { ReplicaFault } from './evidence.js';
import { CallFaults, type QuorumContext } from './quorum-context.js';
import { QuorumTally } from './quorum-tally.js';

/** How a renewal round ended, by quorum. */
export type RenewVerdict =
  | {
      readonly ok: true;
      /** Client clock reading taken before the renew requests left: the new lease view starts here. */
      readonly sentAt: number;
    }
  | {
      readonly ok: false;
      /**
       * `lost`: f+1 replicas that held the lease say another holder (or a release) ended this epoch's lease;
       * retrying will not help. The others may pass on a later try while the lease lasts.
       */
      readonly reason: 'lost' | 'unavailable' | 'timeout' | 'aborted' | 'forbidden' | 'invalid';
      readonly message: string;
    };

export type RenewResult = RenewVerdict & {
  /** Replicas that answered `renewed` in this round (they hold the lease now: renewed, or joined). */
  readonly renewedBy: readonly number[];
  readonly faults: readonly ReplicaFault[];
};

export interface GrantRef {
  readonly resource: string;
  readonly epoch: bigint;
  /**
   * Replicas known to hold the grant's lease (its signers, and those that renewed or joined it). Only their
   * `not_holder` counts against the lease: a replica that never held it says so when it cannot join (its record
   * moved past the epoch, another lease runs there), which says nothing of the lease held elsewhere. Undefined:
   * unknown (a release without its Lease object), every replica's answer counts.
   */
  readonly holders?: ReadonlySet<number> | undefined;
  /** Partials of the grant, sent to replicas not known to hold it: what they need to join from far behind. */
  readonly evidence?: readonly GrantEvidence[] | undefined;
}

/** Whether `replica`'s denial counts against the lease (it held it, or nobody knows who did). */
function deniesHolding(grant: GrantRef, replica: number): boolean {
  return grant.holders === undefined || grant.holders.has(replica);
}

/**
 * One renewal round for `grant`, extending the lease by `ttlMs` from now, at every replica: the ones holding it
 * extend it, the others join it if they can (and are sent the grant's evidence for that).
 */
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
  const renewedBy: number[] = [];
  const core = new RoundCall<RenewResult>(
    {
      bodies: renewBodies(grant, ttlMs),
      timeoutMs: requestTimeoutMs,
      keepGoing: (possible) => tally.open(possible),
      onAnswer: (replica, answer) => {
        faults.fromAnswer(replica, answer);
        if (answer.kind !== 'reply') return;
        const outcome = answer.outcome as RenewOutcome;
        if (outcome.status === 'renewed') {
          tally.accept();
          renewedBy.push(replica);
        } else if (outcome.status !== 'not_holder' || deniesHolding(grant, replica))
          tally.refuse(outcome.status, outcome.status === 'invalid' ? outcome.message : '');
      },
      finish: (ended, sentAt) => ({
        ...renewResult(tally, ended, sentAt, grant, requestTimeoutMs),
        renewedBy,
        faults: faults.list(),
      }),
    },
    connectionViews(ctx),
    signal?.aborted,
  );
  return drive(ctx, core, { signal });
}

/**
 * Asks every connected replica not known to hold `grant`'s lease to join it (a renew with the grant's evidence), at
 * the lease's join time (lease-timing.ts): so that the lease is held at more than the t signers before its first
 * renewal needs t of them. Resolves with the replicas that joined; nobody waits on it.
 */
export function joinLease(ctx: QuorumContext, grant: GrantRef, ttlMs: number): Promise<number[]> {
  const others = new Set(ctx.channels.channels.map((c) => c.index).filter((i) => grant.holders?.has(i) !== true));
  if (others.size === 0) return Promise.resolve([]);
  const joined: number[] = [];
  const core = new RoundCall<number[]>(
    {
      bodies: renewBodies(grant, ttlMs),
      timeoutMs: ctx.options.requestTimeoutMs,
      only: others,
      onAnswer: (replica, answer) => {
        if (answer.kind === 'reply' && (answer.outcome as RenewOutcome).status === 'renewed') joined.push(replica);
      },
      finish: () => joined,
    },
    connectionViews(ctx),
  );
  return drive(ctx, core, {});
}

/** How a renewal round ended, by its tally (pure). */
export function renewResult(
  tally: QuorumTally<'not_holder' | 'forbidden' | 'invalid'>,
  ended: RoundEnd | undefined,
  sentAt: number,
  grant: GrantRef,
  requestTimeoutMs: number,
): RenewVerdict {
  const t = tally.need;
  const renewed = tally.accepted;
  if (renewed >= t) return { ok: true, sentAt };
  if (ended === 'aborted') return { ok: false, reason: 'aborted', message: 'the caller aborted the renewal' };
  const refused = tally.confirmed('not_holder', 'forbidden', 'invalid');
  if (refused?.kind === 'not_holder') {
    return {
      ok: false,
      reason: 'lost',
      message: `${refused.count} replicas no longer hold epoch ${grant.epoch} for this holder`,
    };
  }
  if (refused?.kind === 'forbidden')
    return { ok: false, reason: 'forbidden', message: `${refused.count} replicas refuse this identity` };
  if (refused?.kind === 'invalid')
    return { ok: false, reason: 'invalid', message: `replicas refused the renewal: ${refused.first}` };
  if (ended === 'deadline')
    return {
      ok: false,
      reason: 'timeout',
      message: `only ${renewed} of ${t} renewals within ${requestTimeoutMs} ms`,
    };
  return { ok: false, reason: 'unavailable', message: `only ${renewed} of ${t} replicas renewed` };
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
 * Releases `grant` at every reachable replica (any of them may hold its lease, having joined it). The requests leave before this returns (`sent`); `done` succeeds
 * once t confirm (then no f+1 honest replicas still hold the lease, so another holder can get in). The round is
 * kept in the context's `releases` until it ends, so closing the client waits for it rather than cutting it off.
 */
export function releaseGrant(ctx: QuorumContext, grant: GrantRef, signal?: AbortSignal): ReleaseInFlight {
  const { f, t } = ctx.cluster;
  const { requestTimeoutMs } = ctx.options;
  const faults = new CallFaults();
  const views = connectionViews(ctx);
  // The round's start sends to every ready connection, before drive() returns.
  const sent = signal?.aborted ? 0 : views.filter((view) => isReady(view.state)).length;
  // forbidden and invalid answers count for neither side: a release is judged only by who confirms or denies holding.
  const tally = new QuorumTally<'not_holder'>(f, t);
  const core = new RoundCall<ReleaseResult>(
    {
      bodies: { body: releaseBody(grant.resource, grant.epoch) },
      timeoutMs: requestTimeoutMs,
      keepGoing: (possible) => tally.open(possible),
      onAnswer: (replica, answer) => {
        faults.fromAnswer(replica, answer);
        if (answer.kind !== 'reply') return;
        const { status } = answer.outcome as ReleaseOutcome;
        if (status === 'released') tally.accept();
        else if (status === 'not_holder' && deniesHolding(grant, replica)) tally.refuse('not_holder');
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
 * Sends `grant`'s release to every connected replica (any may hold its lease) and waits for nothing: the requests
 * are `quiet`, so the replicas send no reply (docs/protocol.md, "Release and renewal off the holder's path").
 * What `lease.release()` does unless asked to wait. @returns how many replicas it was sent to.
 */
export function releaseQuietly(ctx: QuorumContext, grant: GrantRef): number {
  let sent = 0;
  for (const channel of ctx.channels.channels)
    if (channel.notify({ ...releaseBody(grant.resource, grant.epoch), quiet: true })) sent++;
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
