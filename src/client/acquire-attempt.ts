/**
 * One acquire attempt at a chosen epoch (src/client/acquire.ts runs the loop around it): ask t replicas to
 * sign (or, under contention, the resource's leader alone, then the same t once it granted or announced our
 * turn), everyone else as soon as one of those answers anything but a usable partial or is late; combine the
 * first t partials that verify, and otherwise classify what the answers say (busy, outdated, contended, a
 * refusal f+1 replicas agree on, unavailable). Partial grants of a failed attempt are released so another
 * contender is not kept out by them.
 */
import type { TimerHandle } from '../common/clock.js';
import { encodeToken } from '../token/admission-token.js';
import { grantMessage, type Grant } from '../token/grant.js';
import type { AcquiredGrant, AcquireRefusalReason, AcquireRequest } from './acquire.js';
import { confirmedRefusal, unavailableMessage } from './acquire-status.js';
import { fPlusOneLargest, quorumRemainingMs } from './epoch-choice.js';
import { catchUpStep, type HeldPartial } from './catch-up.js';
import { PartialCollector } from './partial-collector.js';
import type { CallFaults, QuorumContext } from './quorum-context.js';
import { QuorumTally } from './quorum-tally.js';
import type { RequestBody } from './replica-connection.js';
import { Round } from './round.js';
import { firstSigners } from './signer-choice.js';

export type Attempt =
  /** `waited`: the leader kept the request in its line behind a running lease (it announced our turn). */
  | { readonly kind: 'granted'; readonly grant: AcquiredGrant; readonly waited: boolean }
  /** `leaderOnly`: only the leader answered (leader-first), so f+1 replicas have not confirmed it. */
  | { readonly kind: 'busy'; readonly epoch: bigint; readonly remainingMs: number; readonly leaderOnly: boolean }
  /**
   * `turnCame`: the leader kept the request in its line and granted its turn; the others' answers lost it.
   * `blockers`: replicas that said `stale` at or above the attempt's epoch (their records are ahead of it).
   */
  | {
      readonly kind: 'contended';
      readonly message: string;
      readonly turnCame: boolean;
      readonly blockers: readonly Blocker[];
    }
  | { readonly kind: 'outdated'; readonly leaderOnly: boolean }
  | { readonly kind: 'stop'; readonly reason: Exclude<AcquireRefusalReason, 'busy'>; readonly message: string };

/** A replica whose record is at or above the attempt's epoch, as it said. */
export interface Blocker {
  readonly replica: number;
  readonly epoch: bigint;
}

/** A replica that said `too_far` and is being brought up with evidence (catch-up.ts). */
interface Lagging {
  /** Its record (or floor) as it last said, or the last catch-up step it granted us. */
  current: bigint;
  /** The epoch of the catch-up request in flight, if any. */
  asking: bigint | undefined;
  steps: number;
}

/**
 * Catch-up requests one lagging replica gets in an attempt: 8 steps of maxEpochStep cover a lag of 8·10^6, and a
 * replica further behind is asked again by the next attempt (its record keeps the steps it granted).
 */
const MAX_CATCH_UP_STEPS = 8;

/** What one attempt needs besides the context. */
export interface EpochAttempt {
  readonly request: AcquireRequest;
  readonly epoch: bigint;
  /** The whole acquire ends by then (client clock). */
  readonly deadline: number;
  /** Called with every epoch a replica reports, for the next attempt's (f+1)-th choice. */
  readonly report: (replica: number, epoch: bigint) => void;
  readonly faults: CallFaults;
  /** Leader-first: ask this replica first and the others once it granted; undefined asks t replicas first. */
  readonly leader: number | undefined;
  /**
   * Leader-first only: how long the leader may keep the request in its line while the resource is held
   * (docs/protocol.md, Hot handoffs); it then grants the resource's next epoch when our turn comes. 0: answer now.
   */
  readonly waitTurnMs: number;
  /** Called with the epoch when partial grants of a failed attempt are released (never to be asked again). */
  readonly onReleased: (epoch: bigint) => void;
  /**
   * The caller knows fewer than 2f+1 replicas' epochs (the epoch was a guess): keep listening until 2f+1 have
   * answered even once this epoch can no longer win, so the next attempt can choose by the (f+1)-th rule.
   */
  readonly learnEpochs: boolean;
}

/** Once 2f+1 replicas answered without a token, the rest get this many times the time those took (and at least stragglerMinMs). */
const STRAGGLER_FACTOR = 3;

/** One acquire round at `epoch`. */
export async function attemptEpoch(ctx: QuorumContext, attempt: EpochAttempt): Promise<Attempt> {
  const { request, deadline, report, faults, leader, onReleased, learnEpochs } = attempt;
  const { cluster, options, identity } = ctx;
  const { f, t } = cluster;
  const { clock } = options;
  const waitTurnMs = leader === undefined ? 0 : attempt.waitTurnMs;
  // The epoch may move once: when the leader grants our turn at the resource's next epoch.
  let epoch = attempt.epoch;
  let grant: Grant = { clusterId: cluster.id, resource: request.resource, epoch, holder: identity.publicKey };
  let collector = new PartialCollector(cluster, ctx.backend, grant, grantMessage(grant), ctx.evidence);
  // Taken before the first request leaves, so the holder's lease view starts before any replica's (docs/protocol.md).
  let sentAt = clock.now();
  const roundDeadline = Math.min(deadline, sentAt + options.requestTimeoutMs + waitTurnMs);
  const first = leader === undefined ? firstSigners(ctx.channels, request.resource, t) : new Set([leader]);
  const round = new Round<'acquire'>(
    ctx.channels,
    (replica) => acquireBody(request, epoch, waitTurnMs, replica === leader),
    { clock, deadline: roundDeadline, signal: request.signal, first },
  );
  // First replicas that are slow to answer do not hold the attempt up for long: then everyone is asked. A leader
  // asked to keep us in its line is expected to be slow.
  const widenAfterMs =
    (leader === undefined ? ctx.grantLatency?.widenAfterMs(options.stragglerMinMs) : undefined) ??
    options.stragglerMinMs;
  const widenTimer =
    first === undefined || waitTurnMs > 0 ? undefined : clock.setTimeout(() => round.widen(), widenAfterMs);
  // Leader-first: true until the leader granted or announced our turn; then the first t signers in ring order from
  // the leader are asked (the set a plain attempt asks first), not everyone: one signature and flush fewer per grant.
  let leaderOnly = leader !== undefined;
  let lateTimer: TimerHandle | undefined;
  const askSigners = () => {
    leaderOnly = false;
    const signers = firstSigners(ctx.channels, request.resource, t);
    if (signers && leader !== undefined && signers.has(leader)) round.widenTo(signers);
    else round.widen();
  };
  // Once the leader granted, the other signers' leases end with the same release: late answers mean asking the rest.
  const widenWhenLate = () => {
    if (lateTimer !== undefined || !round.narrow) return;
    const lateAfterMs = ctx.grantLatency?.widenAfterMs(options.stragglerMinMs) ?? options.stragglerMinMs;
    lateTimer = clock.setTimeout(() => round.widen(), lateAfterMs);
  };
  const moveTo = (next: bigint) => {
    epoch = next;
    grant = { ...grant, epoch };
    collector = new PartialCollector(cluster, ctx.backend, grant, grantMessage(grant), ctx.evidence);
  };
  // The leader says we are first in its line and names the epoch our turn will grant: ask the other first signers
  // for it now, so that when the lease in the way ends they grant it at once (they keep the request until then).
  const stopListening =
    waitTurnMs > 0
      ? ctx.onTurn?.(request.resource, (replica, announced) => {
          if (replica !== leader || !leaderOnly || announced < epoch) return;
          waited = true;
          sentAt = clock.now();
          if (announced !== epoch) moveTo(announced);
          askSigners();
        })
      : undefined;
  // The leader's turn came at another epoch than it announced (someone got in first): this attempt is lost.
  let turnMoved = false;
  // Announced by the leader: we were first in its line behind a running lease. Granted by it: our turn came.
  let waited = false;
  let turnCame = false;
  let leaderRefusal: Attempt | undefined;
  const voted = new Set<number>();
  const granted = new Set<number>();
  const busy: number[] = [];
  const busyEpochs: bigint[] = [];
  // Only the refusals that end the call; grants, busy and outdated answers have rules of their own below.
  const refusals = new QuorumTally<'forbidden' | 'invalid'>(f, t);
  let outdated = 0;
  const blockers: Blocker[] = [];
  // Partials usable at this attempt's epoch, kept as evidence for replicas that lag (catch-up.ts).
  const held: HeldPartial[] = [];
  const lagging = new Map<number, Lagging>();
  // Catch-up steps granted below the attempt's epoch (each a lease of ours to release if the attempt fails).
  const steppedTo = new Map<number, bigint>();
  const catchUp = (replica: number) => {
    const entry = lagging.get(replica);
    if (!entry || entry.asking !== undefined) return;
    const step = catchUpStep(replica, entry.current, epoch, held, f, options.maxEpochStep);
    if (!step) return;
    const body = { ...acquireBody(request, epoch, 0, false), epoch: step.epoch, evidence: step.evidence };
    if (entry.steps >= MAX_CATCH_UP_STEPS || !round.ask(replica, body)) {
      lagging.delete(replica);
      return;
    }
    entry.asking = step.epoch;
    entry.steps++;
  };
  // Lagging replicas not asked yet count as answers still possible while a partial can still come to make evidence.
  const waitingForEvidence = () =>
    collector.count + round.possible > 0
      ? [...lagging.values()].filter((entry) => entry.asking === undefined).length
      : 0;
  const frozen: number[] = [];
  /** Replicas that granted with another share generation than the cluster description's (not combined). */
  const otherGeneration: number[] = [];
  let straggling = false;
  let ended: 'exhausted' | 'deadline' | 'aborted' | undefined;
  // Replicas that answered or still could when the round stopped: below t, no epoch could have won.
  let reachable: number;
  let signature: Awaited<ReturnType<PartialCollector['tryCombine']>> | undefined;
  let asked: readonly number[] | undefined;

  try {
    const mayStillWin = () => collector.count + round.possible + waitingForEvidence() >= t;
    const stillLearning = () => learnEpochs && voted.size < 2 * f + 1 && round.possible > 0;
    while (mayStillWin() || stillLearning()) {
      const event = await round.next();
      if (event.type === 'end') {
        ended = event.why;
        break;
      }
      if (event.type !== 'answer') continue;
      const { replica, answer } = event;
      faults.fromAnswer(replica, answer);
      if (answer.kind !== 'reply') {
        // A frozen replica (a reshare is under way) cannot vote, like one that is down: ask the others.
        if (answer.kind === 'error' && answer.code === 'REPLICA_FROZEN') frozen.push(replica);
        round.widen();
        continue;
      }
      voted.add(replica);
      const outcome = answer.outcome;
      const lag = lagging.get(replica);
      if (lag?.asking !== undefined) {
        // The answer to a catch-up request: a step below the attempt's epoch moves the replica on; anything else
        // ends its catch-up, and an answer at the attempt's epoch counts like any other below.
        const stepped = lag.asking;
        lag.asking = undefined;
        if (outcome.status === 'granted' && stepped !== epoch) {
          lag.current = stepped;
          steppedTo.set(replica, stepped);
          catchUp(replica);
          continue;
        }
        lagging.delete(replica);
        if (outcome.status === 'too_far') continue; // Refused its evidence (or over its budget): not asked again.
      }
      // A partial that counts toward the token; anything else from a first replica means asking the others.
      let usable = false;
      switch (outcome.status) {
        case 'granted': {
          if (waitTurnMs > 0 && replica === leader) turnCame = true;
          if (waitTurnMs > 0 && replica === leader && leaderOnly) {
            // Our turn at the leader, unannounced: the lease view starts now, the others are asked at the epoch it
            // granted, and the leader again, so that its lease too starts after our view does (same partial).
            sentAt = clock.now();
            if (outcome.epoch !== undefined && outcome.epoch !== epoch) moveTo(outcome.epoch);
            const channel = ctx.channels.channels.find((c) => c.index === leader);
            void channel?.request<'acquire'>(acquireBody(request, epoch, 0, false), options.requestTimeoutMs);
          } else if (waitTurnMs > 0 && replica === leader && outcome.epoch !== undefined && outcome.epoch !== epoch) {
            onReleased(outcome.epoch);
            releasePartialGrants(ctx, request.resource, outcome.epoch, (r) => r === leader);
            turnMoved = true;
            break;
          } else if (outcome.epoch !== undefined && outcome.epoch !== epoch) {
            faults.add(replica, 'invalid_partial', `granted epoch ${outcome.epoch}, asked for ${epoch}`);
            break;
          }
          granted.add(replica);
          report(replica, epoch);
          const added = collector.add(replica, outcome.partial, outcome.generation);
          if (!added.ok) {
            if (added.reason === 'other_generation') {
              // Not a vote on this membership: like a replica that is down, not like a split vote.
              otherGeneration.push(replica);
              voted.delete(replica);
            } else if (added.reason !== 'duplicate')
              faults.add(
                replica,
                added.reason === 'undecodable' ? 'undecodable_partial' : 'invalid_partial',
                added.message,
              );
            break;
          }
          usable = true;
          held.push({ replica, epoch, partial: outcome.partial });
          for (const behind of lagging.keys()) catchUp(behind);
          if (collector.count >= t) {
            signature = await collector.tryCombine();
            if (!signature.ok) {
              usable = false;
              for (const bad of signature.bad)
                faults.add(bad, 'invalid_partial', `partial from replica ${bad} does not verify under its key share`);
            }
          }
          break;
        }
        case 'stale':
          report(replica, outcome.epoch);
          outdated++;
          if (outcome.epoch >= epoch) blockers.push({ replica, epoch: outcome.epoch });
          break;
        case 'too_far':
          report(replica, outcome.epoch);
          outdated++;
          // Behind this attempt's epoch by more than its free step: bring it up with the partials others send.
          if (outcome.epoch < epoch) {
            lagging.set(replica, { current: outcome.epoch, asking: undefined, steps: 0 });
            catchUp(replica);
          }
          break;
        case 'busy':
          report(replica, outcome.epoch);
          busy.push(outcome.remainingMs);
          busyEpochs.push(outcome.epoch);
          break;
        case 'forbidden':
          refusals.refuse('forbidden');
          break;
        case 'invalid':
          refusals.refuse('invalid', outcome.message);
          break;
      }
      if (signature?.ok || turnMoved) break;
      if (round.narrow && !leaderOnly && !usable) round.widen();
      if (usable && replica === leader && !leaderOnly) widenWhenLate();
      if (leaderOnly && replica === leader) {
        // Leader-first: a grant opens the attempt to the first t signers; a refusal that only says "not now" ends it.
        if (outcome.status === 'busy') {
          leaderRefusal = { kind: 'busy', epoch: outcome.epoch, remainingMs: outcome.remainingMs, leaderOnly: true };
          break;
        }
        if (outcome.status === 'stale') {
          leaderRefusal = { kind: 'outdated', leaderOnly: true };
          break;
        }
        // A leader behind the epoch (too_far) is caught up once the others' partials come: ask them now.
        askSigners();
        if (usable) widenWhenLate();
      }
      if (refusals.confirmed('forbidden', 'invalid') || busy.length > f) break;
      if (!mayStillWin()) round.widen(); // Only learning now: every replica's epoch helps.
      if (!straggling && voted.size >= 2 * f + 1) {
        // Enough answers to choose the next epoch. A slow or silent replica may still hold the deciding vote, but
        // waiting out the full request timeout for it would let one silent replica stall every contended acquire.
        straggling = true;
        const elapsed = clock.now() - sentAt;
        round.shortenDeadline(clock.now() + Math.max(options.stragglerMinMs, elapsed * STRAGGLER_FACTOR));
      }
    }
  } finally {
    clock.clearTimeout(widenTimer);
    clock.clearTimeout(lateTimer);
    stopListening?.();
    reachable = voted.size + round.possible;
    asked = round.asked;
    round.close();
  }
  if (leaderRefusal) return leaderRefusal;

  if (signature?.ok) {
    if (leader === undefined) ctx.grantLatency?.observe(clock.now() - sentAt);
    return {
      kind: 'granted',
      waited,
      grant: {
        token: encodeToken(grant, signature.signature),
        sentAt,
        ttlMs: request.ttlMs,
        signers: signature.signers,
        asked,
      },
    };
  }

  // No token: hand back what we half-won so that another contender is not kept out by it until the ttl runs out.
  // Release at every replica asked that has not answered too: the round stops once f+1 say busy or stale, or at
  // its deadline, and a late answer may be a grant, or the request may wait in that replica's line; either would
  // become a lease nobody holds, keeping everyone out of that replica for a whole ttl.
  const unanswered = (asked ?? []).filter((replica) => !voted.has(replica));
  const catchingUp = [...lagging].filter(([, entry]) => entry.asking !== undefined).map(([replica]) => replica);
  if (granted.size > 0 || unanswered.length > 0 || catchingUp.length > 0) {
    onReleased(epoch);
    releasePartialGrants(
      ctx,
      request.resource,
      epoch,
      (replica) => granted.has(replica) || unanswered.includes(replica) || catchingUp.includes(replica),
    );
  }
  // Catch-up steps this attempt got below its epoch are leases of ours too.
  for (const [replica, stepped] of steppedTo)
    if (!granted.has(replica)) releasePartialGrants(ctx, request.resource, stepped, (r) => r === replica);
  for (const replica of catchingUp) {
    const stepped = lagging.get(replica)?.asking;
    if (stepped !== undefined && stepped !== epoch)
      releasePartialGrants(ctx, request.resource, stepped, (r) => r === replica);
  }

  if (ended === 'aborted') return { kind: 'stop', reason: 'aborted', message: 'the caller aborted the acquire' };
  const refused = confirmedRefusal(refusals, request.resource);
  if (refused) return refused;
  if (busy.length > f)
    return {
      kind: 'busy',
      epoch: fPlusOneLargest(busyEpochs, f)!,
      remainingMs: quorumRemainingMs(busy, f)!,
      leaderOnly: false,
    };
  if (granted.size === 0 && outdated > 0 && busy.length === 0) return { kind: 'outdated', leaderOnly: false };
  if (reachable >= t || straggling)
    return { kind: 'contended', message: `split vote at epoch ${epoch}`, turnCame, blockers };
  if (ended === 'deadline') {
    // Replicas that are connected but slow: worth another try while the caller's deadline allows.
    return roundDeadline >= deadline
      ? { kind: 'stop', reason: 'timeout', message: `no grant within ${request.timeoutMs} ms` }
      : {
          kind: 'contended',
          message: `too few answers at epoch ${epoch} within ${options.requestTimeoutMs} ms`,
          turnCame,
          blockers,
        };
  }
  return {
    kind: 'stop',
    reason: 'unavailable',
    message: unavailableMessage(ctx, reachable, t, frozen, otherGeneration),
  };
}

/** An acquire request; with `waitTurnMs`, one that may wait its turn (and, at the leader, take the next epoch). */
function acquireBody(
  request: AcquireRequest,
  epoch: bigint,
  waitTurnMs: number,
  atLeader: boolean,
): RequestBody<'acquire'> {
  const body = {
    type: 'acquire',
    resource: request.resource,
    epoch,
    ttlMs: request.ttlMs,
    ...(request.resume ? { resume: true } : {}),
  } as const;
  if (waitTurnMs <= 0) return body;
  return atLeader ? { ...body, waitMs: waitTurnMs, nextEpoch: true } : { ...body, waitMs: waitTurnMs };
}

/** Fire and forget: a release that is lost only delays the other contender until our partial lease ends. */
function releasePartialGrants(
  ctx: QuorumContext,
  resource: string,
  epoch: bigint,
  include: (replica: number) => boolean,
): void {
  for (const channel of ctx.channels.channels) {
    if (!include(channel.index) || channel.state.phase !== 'ready') continue;
    void channel.request<'release'>({ type: 'release', resource, epoch }, ctx.options.requestTimeoutMs);
  }
}
