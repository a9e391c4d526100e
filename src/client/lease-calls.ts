/**
 * Joining, renewing and releasing a grant's lease: one round each, judged by quorum like acquire. Every replica is
 * asked, not only the grant's signers: a replica that did not sign the grant joins its lease on a renewal when it
 * could have granted it (docs/protocol.md, "Leases that outlive f signers"), so any t replicas can renew it. A
 * renewal counts once t replicas extended the lease (then at least f+1 honest ones refuse every other holder, and
 * no one else can gather t partials); the lease is lost once f+1 replicas that held it say we are not its holder.
 */
import type { GrantEvidence, ReleaseOutcome, RenewOutcome } from '../protocol/messages.js';
import { releaseBody, renewBodies } from './core/bodies.js';
import { newRoundCall, roundCallCore, type HeardAnswer, type RoundCallRules } from './core/round-call.js';
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

/** What the renew and release rounds' rules read: the grant, the cluster's numbers, the round's timeout. */
export interface LeaseRoundParams {
  readonly grant: GrantRef;
  readonly f: number;
  readonly t: number;
  readonly requestTimeoutMs: number;
}

/** The renewals counted by quorum, and who renewed, from the answers heard (pure). */
function renewTally(params: LeaseRoundParams, heard: readonly HeardAnswer[]) {
  const tally = new QuorumTally<'not_holder' | 'forbidden' | 'invalid'>(params.f, params.t);
  const renewedBy: number[] = [];
  for (const { replica, answer } of heard) {
    if (answer.kind !== 'reply') continue;
    const outcome = answer.outcome as RenewOutcome;
    if (outcome.status === 'renewed') {
      tally.accept();
      renewedBy.push(replica);
    } else if (outcome.status !== 'not_holder' || deniesHolding(params.grant, replica))
      tally.refuse(outcome.status, outcome.status === 'invalid' ? outcome.message : '');
  }
  return { tally, renewedBy };
}

/** The faults the answers heard show, one per (replica, kind). */
function faultsOf(heard: readonly HeardAnswer[]): readonly ReplicaFault[] {
  const faults = new CallFaults();
  for (const { replica, answer } of heard) faults.fromAnswer(replica, answer);
  return faults.list();
}

/** A renewal round's rules: t renewals, or f+1 holders that deny it, or the round's end. */
export const RENEW_RULES: RoundCallRules<LeaseRoundParams, RenewResult> = {
  keepGoing: (params, heard, possible) => renewTally(params, heard).tally.open(possible),
  result: (params, heard, ended, sentAt) => {
    const { tally, renewedBy } = renewTally(params, heard);
    return {
      ...renewResult(tally, ended, sentAt, params.grant, params.requestTimeoutMs),
      renewedBy,
      faults: faultsOf(heard),
    };
  },
};

/** A join round's rules: every replica asked answers (or the round ends); the result is who joined. */
export const JOIN_RULES: RoundCallRules<undefined, number[]> = {
  result: (_params, heard) =>
    heard
      .filter(({ answer }) => answer.kind === 'reply' && (answer.outcome as RenewOutcome).status === 'renewed')
      .map(({ replica }) => replica),
};

/** A release round's rules: t confirmations, or f+1 holders that deny holding it, or the round's end. */
export const RELEASE_RULES: RoundCallRules<LeaseRoundParams, ReleaseResult> = {
  keepGoing: (params, heard, possible) => releaseTally(params, heard).open(possible),
  result: (params, heard, ended) =>
    releaseResult(releaseTally(params, heard), ended, faultsOf(heard), params.grant, params.requestTimeoutMs),
};

/** The releases counted by quorum, from the answers heard (pure). */
function releaseTally(params: LeaseRoundParams, heard: readonly HeardAnswer[]): QuorumTally<'not_holder'> {
  // forbidden and invalid answers count for neither side: a release is judged only by who confirms or denies holding.
  const tally = new QuorumTally<'not_holder'>(params.f, params.t);
  for (const { replica, answer } of heard) {
    if (answer.kind !== 'reply') continue;
    const { status } = answer.outcome as ReleaseOutcome;
    if (status === 'released') tally.accept();
    else if (status === 'not_holder' && deniesHolding(params.grant, replica)) tally.refuse('not_holder');
  }
  return tally;
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
  const state = newRoundCall(
    { params: { grant, f, t, requestTimeoutMs }, bodies: renewBodies(grant, ttlMs), timeoutMs: requestTimeoutMs },
    connectionViews(ctx),
    signal?.aborted,
  );
  return drive(ctx, roundCallCore(state, RENEW_RULES), { signal });
}

/**
 * Asks every connected replica not known to hold `grant`'s lease to join it (a renew with the grant's evidence), at
 * the lease's join time (lease-timing.ts): so that the lease is held at more than the t signers before its first
 * renewal needs t of them. Resolves with the replicas that joined; nobody waits on it.
 */
export function joinLease(ctx: QuorumContext, grant: GrantRef, ttlMs: number): Promise<number[]> {
  const others = new Set(ctx.channels.channels.map((c) => c.index).filter((i) => grant.holders?.has(i) !== true));
  if (others.size === 0) return Promise.resolve([]);
  const state = newRoundCall(
    { params: undefined, bodies: renewBodies(grant, ttlMs), timeoutMs: ctx.options.requestTimeoutMs, only: others },
    connectionViews(ctx),
  );
  return drive(ctx, roundCallCore(state, JOIN_RULES), {});
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
  const views = connectionViews(ctx);
  // The round's start sends to every ready connection, before drive() returns.
  const sent = signal?.aborted ? 0 : views.filter((view) => isReady(view.state)).length;
  const state = newRoundCall(
    {
      params: { grant, f, t, requestTimeoutMs },
      bodies: { body: releaseBody(grant.resource, grant.epoch) },
      timeoutMs: requestTimeoutMs,
    },
    views,
    signal?.aborted,
  );
  const done = drive(ctx, roundCallCore(state, RELEASE_RULES), { signal });
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
