/**
 * One acquire attempt at a chosen epoch, sans I/O (src/client/core/acquire.ts runs the loop around it): ask t
 * replicas to sign (or, under contention, the resource's leader alone, then the same t once it granted or
 * announced our turn), everyone else as soon as one of those answers anything but a usable partial or is late;
 * combine the first t partials that verify, and otherwise classify what the answers say (attempt-result.ts).
 * Partial grants of a failed attempt are released so another contender is not kept out by them.
 *
 * The answers are judged one at a time in the order they arrived (answers.ts); while the partials are being
 * combined, later answers wait their turn, as they would behind an await. The attempt's state is plain data
 * (AttemptState, acquire-state.ts) changed by the functions here; the loop (acquire.ts) starts and steps it.
 */
import { encodeToken } from '../../token/admission-token.js';
import type { Grant } from '../../token/grant.js';
import type { AcquireOutcome } from '../../protocol/messages.js';
import { combinedInto, newPartialSet, type CombineOutcome } from '../partial-collector.js';
import { firstSigners, leaderFor } from '../signer-choice.js';
import type { AcquireState, AttemptState, AttemptStep } from './acquire-state.js';
import {
  askSigners,
  judgeAnswer,
  moveTo,
  newJudge,
  refusalConfirmed,
  refusalTally,
  releaseWhatWasWon,
  waitingForEvidence,
} from './answers.js';
import { classifyAttempt, unavailableMessage, type Attempt } from './attempt-result.js';
import { acquireBodies } from './bodies.js';
import type { CoreEnv } from './env.js';
import { addFault } from './faults.js';
import { outbox, type CoreEvent } from './io.js';
import {
  closeRound,
  endRound,
  newRound,
  nextRoundEvent,
  roundAnswer,
  roundAsked,
  roundConnectionsChanged,
  roundEndedBy,
  roundNarrow,
  roundPossible,
  roundTimer,
  shortenRoundDeadline,
  widenRound,
  type RoundEvent,
} from './round.js';

/** What one attempt is asked for besides the call's state. */
export interface EpochAttempt {
  readonly epoch: bigint;
  /** Leader-first: ask this replica first and the others once it granted; undefined asks t replicas first. */
  readonly leader: number | undefined;
  /** Leader-first only: how long the leader may keep the request in its line (AttemptState.waitTurnMs). */
  readonly waitTurnMs: number;
  /** The caller knows fewer than 2f+1 replicas' epochs (AttemptState.learnEpochs). */
  readonly learnEpochs: boolean;
}

/** Once 2f+1 replicas answered without a token, the rest get this many times the time those took (and at least stragglerMinMs). */
const STRAGGLER_FACTOR = 3;
/** How often an attempt waiting in a leader's line looks whether that leader is still the resource's leader. */
const LEADER_CHECK_MS = 100;

/** Starts an attempt: its first requests and timers. The step's `result` is set when it ended at once. */
export function startAttempt(env: CoreEnv, acquire: AcquireState, spec: EpochAttempt, at: number): AttemptStep {
  const { request, call } = acquire;
  const { leader } = spec;
  const { t } = env.cluster;
  const waitTurnMs = leader === undefined ? 0 : spec.waitTurnMs;
  const grant: Grant = { clusterId: env.cluster.id, resource: request.resource, epoch: spec.epoch, holder: env.holder };
  const roundDeadline = Math.min(acquire.deadline, at + env.options.requestTimeoutMs + waitTurnMs);
  const first =
    leader === undefined ? firstSigners({ channels: call.connections }, request.resource, t) : new Set([leader]);
  const round = newRound(call.out, call.connections, acquireBodies(request, spec.epoch, waitTurnMs, leader), {
    at,
    deadline: roundDeadline,
    aborted: call.aborted,
    first,
  });
  const attempt: AttemptState = {
    leader,
    waitTurnMs,
    learnEpochs: spec.learnEpochs,
    roundDeadline,
    round,
    epoch: spec.epoch,
    grant,
    collector: newPartialSet(grant),
    sentAt: at,
    leaderOnly: leader !== undefined,
    waited: false,
    turnCame: false,
    turnMoved: false,
    leaderRefusal: undefined,
    widenTimer: undefined,
    lateTimer: undefined,
    leaderCheckTimer: undefined,
    leaderGone: false,
    straggling: false,
    combining: undefined,
    ended: undefined,
    finished: false,
    judge: newJudge(),
  };
  const s: AttemptStep = { env, acquire, attempt, won: undefined, result: undefined };
  // First replicas that are slow to answer do not hold the attempt up for long: then everyone is asked. A leader
  // keeping us in its line is not slow: it answers when our turn comes.
  if (first !== undefined && waitTurnMs <= 0) attempt.widenTimer = outbox.setTimer(call.out, widenAfterMs(s, at));
  // A line's wait may be long on purpose, so no answer from the leader says nothing; its connection does.
  if (leader !== undefined && waitTurnMs > 0) attempt.leaderCheckTimer = outbox.setTimer(call.out, LEADER_CHECK_MS);
  pump(s, at);
  return s;
}

/** One event for the attempt under way; the step's `result` is set when it ended. */
export function stepAttempt(s: AttemptStep, event: CoreEvent): void {
  const { attempt, acquire } = s;
  const out = acquire.call.out;
  switch (event.type) {
    case 'answer':
      if (roundAnswer(attempt.round, event.request, event.answer)) pump(s, event.at);
      return;
    case 'timer':
      return attemptTimer(s, event.timer, event.at);
    case 'connections':
      roundConnectionsChanged(attempt.round, out, acquire.call.connections, event.at);
      return pump(s, event.at);
    case 'turn':
      return turn(s, event.replica, event.epoch, event.at);
    case 'combined':
      return combined(s, event.outcome, event.at);
    case 'abort':
      endRound(attempt.round, out, 'aborted');
      return pump(s, event.at);
    case 'released':
      return;
  }
}

function attemptTimer(s: AttemptStep, timer: number, at: number): void {
  const { attempt } = s;
  const out = s.acquire.call.out;
  if (timer === attempt.widenTimer) {
    attempt.widenTimer = undefined;
    widenRound(attempt.round, out, at);
  } else if (timer === attempt.lateTimer) {
    attempt.lateTimer = undefined;
    widenRound(attempt.round, out, at);
  } else if (timer === attempt.leaderCheckTimer) {
    attempt.leaderCheckTimer = undefined;
    if (checkLeader(s)) return finish(s, at);
  } else if (!roundTimer(attempt.round, out, timer)) return;
  pump(s, at);
}

/**
 * The leader says we are first in its line and names the epoch our turn will grant: ask the other first signers
 * for it now, so that when the lease in the way ends they grant it at once (they keep the request until then).
 */
function turn(s: AttemptStep, replica: number, announced: bigint, at: number): void {
  const { attempt } = s;
  if (attempt.finished || attempt.waitTurnMs <= 0) return;
  if (replica !== attempt.leader || !attempt.leaderOnly || announced < attempt.epoch) return;
  attempt.waited = true;
  // The leader told our turn: should the others' answers lose it, that is a lost turn (retried once in the line),
  // not a missed one. Its own grant may come late or never (a slow or Byzantine leader whose pushes are on time):
  // counted as missed, every such turn sent the rest of the call to polling, which at a hot resource raced the
  // line's next turn and came back stale until the caller's deadline.
  attempt.turnCame = true;
  attempt.sentAt = at;
  if (announced !== attempt.epoch) moveTo(s, announced);
  askSigners(s, at);
}

function combined(s: AttemptStep, outcome: CombineOutcome, at: number): void {
  const { attempt, acquire, env } = s;
  const pending = attempt.combining;
  if (!pending || attempt.finished) return;
  attempt.combining = undefined;
  combinedInto(attempt.collector, env.cluster.t, outcome);
  let usable = true;
  if (outcome.ok) s.won = outcome;
  else {
    usable = false;
    for (const bad of outcome.bad)
      addFault(
        acquire.faults,
        bad,
        'invalid_partial',
        `partial from replica ${bad} does not verify under its key share`,
      );
  }
  if (afterJudging(s, pending.replica, usable, pending.outcome, at) === 'exit') finish(s, at);
  else pump(s, at);
}

/** Hands the round's answers to the judge while the attempt may still win or learn. */
function pump(s: AttemptStep, at: number): void {
  const { attempt } = s;
  while (!attempt.finished && !attempt.combining) {
    if (!(mayStillWin(s) || stillLearning(s))) return finish(s, at);
    const event = nextRoundEvent(attempt.round, s.acquire.call.out);
    if (!event) return;
    if (take(s, event, at) === 'exit') return finish(s, at);
  }
}

function mayStillWin(s: AttemptStep): boolean {
  const { attempt } = s;
  return attempt.collector.held.length + roundPossible(attempt.round) + waitingForEvidence(s) >= s.env.cluster.t;
}

/**
 * Past winning, answers still worth waiting for: the epochs of 2f+1 replicas when the epoch was a guess, and the
 * confirmation of a `busy` one replica gave. Unconfirmed, that `busy` reads as a split vote, which the next attempt
 * settles leader-first; but with the resource's leader down there is no leader-first attempt, and a call that
 * stopped at the first `busy` each time backed off and retried until its deadline instead of answering `busy`.
 */
function stillLearning(s: AttemptStep): boolean {
  const { attempt } = s;
  const learning = attempt.learnEpochs || attempt.judge.busy.length > 0;
  return learning && attempt.judge.voted.size < 2 * s.env.cluster.f + 1 && roundPossible(attempt.round) > 0;
}

function take(s: AttemptStep, event: RoundEvent, at: number): 'continue' | 'exit' | 'combining' {
  const { attempt } = s;
  if (event.type === 'end') {
    attempt.ended = event.why;
    return 'exit';
  }
  if (event.type !== 'answer') return 'continue';
  const judged = judgeAnswer(s, event.replica, event.answer, at);
  if (judged.next === 'combining') {
    attempt.combining = { replica: event.replica, outcome: judged.outcome };
    outbox.combine(s.acquire.call.out, attempt.collector);
    return 'combining';
  }
  if (judged.next === 'continue') return 'continue';
  return afterJudging(s, event.replica, judged.usable, judged.outcome, at);
}

/** After an answer was judged: whether to ask more replicas, stop, or shorten the wait for stragglers. */
function afterJudging(
  s: AttemptStep,
  replica: number,
  usable: boolean,
  outcome: AcquireOutcome,
  at: number,
): 'continue' | 'exit' {
  const { attempt } = s;
  const { f, t } = s.env.cluster;
  if (s.won || attempt.turnMoved) return 'exit';
  if (!attempt.leaderOnly) askMoreAfter(s, replica, usable, at);
  if (attempt.leaderOnly && replica === attempt.leader && leaderAnswered(s, outcome, usable, at) === 'exit')
    return 'exit';
  if (refusalConfirmed(attempt.judge, f, t) || attempt.judge.busy.length > f) return 'exit';
  if (!mayStillWin(s)) widenRound(attempt.round, s.acquire.call.out, at); // Only learning now: every replica's epoch helps.
  noteStragglers(s, at);
  return 'continue';
}

/**
 * Past the leader-only phase: anything but a usable partial from a first replica means asking the others; a
 * usable one from the leader starts the clock on the others' answers.
 */
function askMoreAfter(s: AttemptStep, replica: number, usable: boolean, at: number): void {
  const { attempt } = s;
  if (roundNarrow(attempt.round) && !usable) widenRound(attempt.round, s.acquire.call.out, at);
  // Leader-first, any signer's grant (the leader's, or another's after the turn was told) starts the clock on the
  // others: a leader that hung after telling the turn must not keep the attempt waiting for its partial.
  if (usable && attempt.leader !== undefined) widenWhenLate(s, at);
}

/** Leader-first: a grant opens the attempt to the first t signers; a refusal that only says "not now" ends it. */
function leaderAnswered(s: AttemptStep, outcome: AcquireOutcome, usable: boolean, at: number): 'continue' | 'exit' {
  const { attempt } = s;
  if (outcome.status === 'busy') {
    attempt.leaderRefusal = { kind: 'busy', epoch: outcome.epoch, remainingMs: outcome.remainingMs, leaderOnly: true };
    return 'exit';
  }
  if (outcome.status === 'stale') {
    attempt.leaderRefusal = { kind: 'outdated', leaderOnly: true };
    return 'exit';
  }
  // A leader behind the epoch (too_far) is caught up once the others' partials come: ask them now.
  askSigners(s, at);
  if (usable) widenWhenLate(s, at);
  return 'continue';
}

/**
 * Enough answers to choose the next epoch. A slow or silent replica may still hold the deciding vote, but
 * waiting out the full request timeout for it would let one silent replica stall every contended acquire.
 */
function noteStragglers(s: AttemptStep, at: number): void {
  const { attempt, env } = s;
  if (attempt.straggling || attempt.judge.voted.size < 2 * env.cluster.f + 1) return;
  attempt.straggling = true;
  const elapsed = at - attempt.sentAt;
  shortenRoundDeadline(
    attempt.round,
    s.acquire.call.out,
    at + Math.max(env.options.stragglerMinMs, elapsed * STRAGGLER_FACTOR),
    at,
  );
}

/**
 * Waiting in the leader's line: true once the leader is no longer the resource's leader for this client (it turned
 * slow or hung, or went down: leaderFor), so the attempt gives its place up and waits in the line of the one that
 * is; a hung leader would otherwise keep it for the whole turn wait. Checked again later while it still is.
 */
function checkLeader(s: AttemptStep): boolean {
  const { attempt, acquire } = s;
  if (!attempt.leaderOnly || attempt.finished) return false;
  if (leaderFor(acquire.call.connections, acquire.request.resource, s.env.cluster.t) !== attempt.leader) {
    attempt.leaderGone = true;
    return true;
  }
  attempt.leaderCheckTimer = outbox.setTimer(acquire.call.out, LEADER_CHECK_MS);
  return false;
}

/** Once the leader granted, the other signers' leases end with the same release: late answers mean asking the rest. */
function widenWhenLate(s: AttemptStep, at: number): void {
  const { attempt } = s;
  if (attempt.lateTimer !== undefined || !roundNarrow(attempt.round)) return;
  attempt.lateTimer = outbox.setTimer(s.acquire.call.out, widenAfterMs(s, at));
}

/**
 * How long the replicas asked first get before the others are asked: adapted to the grants seen (GrantLatency),
 * but at most half the round's time left, so that no attempt ends without having asked everyone. Without that
 * cap, a latency learnt from slow grants (a loaded box, a line) could exceed the round, and f silent or slow
 * replicas among the first signers then failed every attempt alike, with no grant ever completing to lower it
 * (a simulator sweep found an acquire timing out so, run 3008025206).
 */
function widenAfterMs(s: AttemptStep, at: number): number {
  const { grantLatency, options } = s.env;
  const adaptive = grantLatency?.widenAfterMs(options.stragglerMinMs) ?? options.stragglerMinMs;
  return Math.min(adaptive, Math.max(0, (s.attempt.roundDeadline - at) / 2));
}

function finish(s: AttemptStep, at: number): void {
  const { attempt } = s;
  const out = s.acquire.call.out;
  outbox.clearTimer(out, attempt.widenTimer);
  outbox.clearTimer(out, attempt.lateTimer);
  outbox.clearTimer(out, attempt.leaderCheckTimer);
  attempt.widenTimer = attempt.lateTimer = attempt.leaderCheckTimer = undefined;
  attempt.ended = roundEndedBy(attempt.round, attempt.ended);
  const reachable = attempt.judge.voted.size + roundPossible(attempt.round);
  const asked = roundAsked(attempt.round);
  closeRound(attempt.round, out);
  attempt.finished = true;
  s.result = outcome(s, at, reachable, asked);
}

function outcome(s: AttemptStep, at: number, reachable: number, asked: readonly number[]): Attempt {
  const { attempt, acquire, env } = s;
  if (attempt.leaderRefusal) return attempt.leaderRefusal;
  if (attempt.leaderGone) {
    releaseWhatWasWon(s, asked); // the request waiting in its line, should it wake up and grant it
    return { kind: 'leader_gone' };
  }
  const { request } = acquire;
  const { judge } = attempt;
  if (s.won) {
    if (attempt.leader === undefined) env.grantLatency?.observe(at - attempt.sentAt);
    return {
      kind: 'granted',
      waited: attempt.waited,
      crowded: judge.busy.length > 0 || judge.blockers.length > 0,
      grant: {
        token: encodeToken(attempt.grant, s.won.signature),
        sentAt: attempt.sentAt,
        ttlMs: request.ttlMs,
        signers: s.won.signers,
        evidence: s.won.partials.slice(0, env.cluster.f + 1),
      },
    };
  }
  releaseWhatWasWon(s, asked);
  const { f, t } = env.cluster;
  return classifyAttempt({
    resource: request.resource,
    epoch: attempt.epoch,
    f,
    t,
    ended: attempt.ended,
    refusals: refusalTally(judge, f, t),
    busy: judge.busy,
    busyEpochs: judge.busyEpochs,
    granted: judge.granted.size,
    outdated: judge.outdated,
    reachable,
    straggling: attempt.straggling,
    turnCame: attempt.turnCame,
    blockers: judge.blockers,
    roundDeadlineIsCallers: attempt.roundDeadline >= acquire.deadline,
    requestTimeoutMs: env.options.requestTimeoutMs,
    timeoutMs: request.timeoutMs,
    unavailable: () =>
      unavailableMessage(
        acquire.call.connections,
        env.cluster.membershipVersion,
        reachable,
        t,
        judge.frozen,
        judge.otherGeneration,
      ),
  });
}
