/**
 * One acquire attempt at a chosen epoch, sans I/O (src/client/core/acquire.ts runs the loop around it): ask t
 * replicas to sign (or, under contention, the resource's leader alone, then the same t once it granted or
 * announced our turn), everyone else as soon as one of those answers anything but a usable partial or is late;
 * combine the first t partials that verify, and otherwise classify what the answers say (attempt-result.ts).
 * Partial grants of a failed attempt are released so another contender is not kept out by them.
 *
 * The answers are judged one at a time in the order they arrived (answers.ts); while the partials are being
 * combined, later answers wait their turn, as they would behind an await.
 */
import { encodeToken } from '../../token/admission-token.js';
import type { Grant } from '../../token/grant.js';
import type { AcquireOutcome } from '../../protocol/messages.js';
import { combinedInto, newPartialSet, type CombineOutcome, type PartialSet } from '../partial-collector.js';
import type { CallFaults } from './faults.js';
import { firstSigners, leaderFor } from '../signer-choice.js';
import type { ReplicaAnswer, RequestKind } from '../replica-channel.js';
import type { AcquireCall } from './acquire.js';
import { AnswerJudge } from './answers.js';
import { classifyAttempt, unavailableMessage, type Attempt } from './attempt-result.js';
import { acquireBodies } from './bodies.js';
import type { CallState, CoreEnv } from './env.js';
import { outbox } from './io.js';
import {
  closeRound,
  endRound,
  newRound,
  nextRoundEvent,
  roundAnswer,
  roundAsked,
  roundConnectionsChanged,
  roundNarrow,
  roundPossible,
  roundTimer,
  shortenRoundDeadline,
  widenRound,
  type RoundEvent,
  type RoundState,
} from './round.js';

/** What one attempt needs besides the call's environment. */
export interface EpochAttempt {
  readonly request: AcquireCall;
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
  /**
   * Called when partial grants of a failed attempt are released: their epoch, and how many replicas granted it
   * (floorAfterRelease in acquire.ts).
   */
  readonly onReleased: (epoch: bigint, holders: number) => void;
  /**
   * The caller knows fewer than 2f+1 replicas' epochs (the epoch was a guess): keep listening until 2f+1 have
   * answered even once this epoch can no longer win, so the next attempt can choose by the (f+1)-th rule.
   */
  readonly learnEpochs: boolean;
}

/** Once 2f+1 replicas answered without a token, the rest get this many times the time those took (and at least stragglerMinMs). */
const STRAGGLER_FACTOR = 3;
/** How often an attempt waiting in a leader's line looks whether that leader is still the resource's leader. */
const LEADER_CHECK_MS = 100;

/** The parts of an attempt its answers change: shared with the judge of answers (answers.ts). */
export interface AttemptState {
  epoch: bigint;
  grant: Grant;
  collector: PartialSet;
  /** Taken before the first request leaves, so the holder's lease view starts before any replica's (docs/protocol.md). */
  sentAt: number;
  /** Leader-first: true until the leader granted or announced our turn. */
  leaderOnly: boolean;
  /** Announced by the leader: we were first in its line behind a running lease. */
  waited: boolean;
  /** Granted by the leader: our turn came. */
  turnCame: boolean;
  /** The leader's turn came at another epoch than it announced (someone got in first): this attempt is lost. */
  turnMoved: boolean;
  leaderRefusal: Attempt | undefined;
  signature: CombineOutcome | undefined;
}

export class AttemptCore {
  readonly #env: CoreEnv;
  readonly #call: CallState;
  readonly #spec: EpochAttempt;
  readonly #waitTurnMs: number;
  readonly #round: RoundState;
  readonly #roundDeadline: number;
  readonly #state: AttemptState;
  readonly #judge: AnswerJudge;
  #widenTimer: number | undefined;
  #lateTimer: number | undefined;
  #leaderCheckTimer: number | undefined;
  /** The leader waited at stopped being the resource's leader (slow, hung, down): see checkLeader. */
  #leaderGone = false;
  #straggling = false;
  /** The answer whose partials are being combined, judged further once `combined` comes. */
  #combining: { readonly replica: number; readonly outcome: AcquireOutcome } | undefined;
  #ended: 'exhausted' | 'deadline' | 'aborted' | undefined;
  #result: Attempt | undefined;

  constructor(env: CoreEnv, call: CallState, spec: EpochAttempt, at: number) {
    this.#env = env;
    this.#call = call;
    this.#spec = spec;
    const { request, leader } = spec;
    const { t } = env.cluster;
    this.#waitTurnMs = leader === undefined ? 0 : spec.waitTurnMs;
    const grant: Grant = {
      clusterId: env.cluster.id,
      resource: request.resource,
      epoch: spec.epoch,
      holder: env.holder,
    };
    this.#state = {
      epoch: spec.epoch,
      grant,
      collector: newPartialSet(grant),
      sentAt: at,
      leaderOnly: leader !== undefined,
      waited: false,
      turnCame: false,
      turnMoved: false,
      leaderRefusal: undefined,
      signature: undefined,
    };
    this.#roundDeadline = Math.min(spec.deadline, at + env.options.requestTimeoutMs + this.#waitTurnMs);
    const first =
      leader === undefined ? firstSigners({ channels: call.connections }, request.resource, t) : new Set([leader]);
    this.#round = newRound(call.out, call.connections, acquireBodies(request, spec.epoch, this.#waitTurnMs, leader), {
      at,
      deadline: this.#roundDeadline,
      aborted: call.aborted,
      first,
    });
    this.#judge = new AnswerJudge(env, call, spec, this.#state, this.#round, this.#waitTurnMs);
    // First replicas that are slow to answer do not hold the attempt up for long: then everyone is asked. A leader
    // keeping us in its line is not slow: it answers when our turn comes.
    if (first !== undefined && this.#waitTurnMs <= 0)
      this.#widenTimer = outbox.setTimer(call.out, this.#widenAfterMs(at));
    // A line's wait may be long on purpose, so no answer from the leader says nothing; its connection does.
    if (leader !== undefined && this.#waitTurnMs > 0)
      this.#leaderCheckTimer = outbox.setTimer(call.out, LEADER_CHECK_MS);
    this.#pump(at);
  }

  /** Set once the attempt has ended. */
  get result(): Attempt | undefined {
    return this.#result;
  }

  answer(request: number, answer: ReplicaAnswer<RequestKind>, at: number): void {
    if (roundAnswer(this.#round, request, answer)) this.#pump(at);
  }

  /** False when `timer` is not one of this attempt's. */
  timer(timer: number, at: number): boolean {
    if (timer === this.#widenTimer) {
      this.#widenTimer = undefined;
      widenRound(this.#round, this.#call.out, at);
    } else if (timer === this.#lateTimer) {
      this.#lateTimer = undefined;
      widenRound(this.#round, this.#call.out, at);
    } else if (timer === this.#leaderCheckTimer) {
      this.#leaderCheckTimer = undefined;
      if (this.#checkLeader()) return (this.#finish(at), true);
    } else if (!roundTimer(this.#round, this.#call.out, timer)) return false;
    this.#pump(at);
    return true;
  }

  connectionsChanged(at: number): void {
    roundConnectionsChanged(this.#round, this.#call.out, this.#call.connections, at);
    this.#pump(at);
  }

  abort(at: number): void {
    endRound(this.#round, this.#call.out, 'aborted');
    this.#pump(at);
  }

  /**
   * The leader says we are first in its line and names the epoch our turn will grant: ask the other first signers
   * for it now, so that when the lease in the way ends they grant it at once (they keep the request until then).
   */
  turn(replica: number, announced: bigint, at: number): void {
    const state = this.#state;
    if (this.#result || this.#waitTurnMs <= 0) return;
    if (replica !== this.#spec.leader || !state.leaderOnly || announced < state.epoch) return;
    state.waited = true;
    state.sentAt = at;
    if (announced !== state.epoch) this.#judge.moveTo(announced);
    this.#judge.askSigners(at);
  }

  combined(outcome: CombineOutcome, at: number): void {
    const pending = this.#combining;
    if (!pending || this.#result) return;
    this.#combining = undefined;
    combinedInto(this.#state.collector, this.#env.cluster.t, outcome);
    this.#state.signature = outcome;
    let usable = true;
    if (!outcome.ok) {
      usable = false;
      for (const bad of outcome.bad)
        this.#spec.faults.add(
          bad,
          'invalid_partial',
          `partial from replica ${bad} does not verify under its key share`,
        );
    }
    if (this.#afterJudging(pending.replica, usable, pending.outcome, at) === 'exit') this.#finish(at);
    else this.#pump(at);
  }

  /** Hands the round's answers to the judge while the attempt may still win or learn. */
  #pump(at: number): void {
    while (!this.#result && !this.#combining) {
      if (!(this.#mayStillWin() || this.#stillLearning())) return this.#finish(at);
      const event = nextRoundEvent(this.#round, this.#call.out);
      if (!event) return;
      const next = this.#take(event, at);
      if (next === 'exit') return this.#finish(at);
    }
  }

  #mayStillWin(): boolean {
    return (
      this.#state.collector.held.length + roundPossible(this.#round) + this.#judge.waitingForEvidence() >=
      this.#env.cluster.t
    );
  }

  /**
   * Past winning, answers still worth waiting for: the epochs of 2f+1 replicas when the epoch was a guess, and the
   * confirmation of a `busy` one replica gave. Unconfirmed, that `busy` reads as a split vote, which the next attempt
   * settles leader-first; but with the resource's leader down there is no leader-first attempt, and a call that
   * stopped at the first `busy` each time backed off and retried until its deadline instead of answering `busy`.
   */
  #stillLearning(): boolean {
    const learning = this.#spec.learnEpochs || this.#judge.busy.length > 0;
    return learning && this.#judge.voted.size < 2 * this.#env.cluster.f + 1 && roundPossible(this.#round) > 0;
  }

  #take(event: RoundEvent, at: number): 'continue' | 'exit' | 'combining' {
    if (event.type === 'end') {
      this.#ended = event.why;
      return 'exit';
    }
    if (event.type !== 'answer') return 'continue';
    const judged = this.#judge.judge(event.replica, event.answer, at);
    if (judged.next === 'combining') {
      this.#combining = { replica: event.replica, outcome: judged.outcome };
      outbox.combine(this.#call.out, this.#state.collector);
      return 'combining';
    }
    if (judged.next === 'continue') return 'continue';
    return this.#afterJudging(event.replica, judged.usable, judged.outcome, at);
  }

  /** After an answer was judged: whether to ask more replicas, stop, or shorten the wait for stragglers. */
  #afterJudging(replica: number, usable: boolean, outcome: AcquireOutcome, at: number): 'continue' | 'exit' {
    const state = this.#state;
    const round = this.#round;
    const { leader } = this.#spec;
    if (state.signature?.ok || state.turnMoved) return 'exit';
    if (!state.leaderOnly) this.#askMoreAfter(replica, usable, at);
    if (state.leaderOnly && replica === leader && this.#leaderAnswered(outcome, usable, at) === 'exit') return 'exit';
    if (this.#judge.refusalConfirmed() || this.#judge.busy.length > this.#env.cluster.f) return 'exit';
    if (!this.#mayStillWin()) widenRound(round, this.#call.out, at); // Only learning now: every replica's epoch helps.
    this.#noteStragglers(at);
    return 'continue';
  }

  /**
   * Past the leader-only phase: anything but a usable partial from a first replica means asking the others; a
   * usable one from the leader starts the clock on the others' answers.
   */
  #askMoreAfter(replica: number, usable: boolean, at: number): void {
    if (roundNarrow(this.#round) && !usable) widenRound(this.#round, this.#call.out, at);
    // Leader-first, any signer's grant (the leader's, or another's after the turn was told) starts the clock on the
    // others: a leader that hung after telling the turn must not keep the attempt waiting for its partial.
    if (usable && this.#spec.leader !== undefined) this.#widenWhenLate(at);
  }

  /** Leader-first: a grant opens the attempt to the first t signers; a refusal that only says "not now" ends it. */
  #leaderAnswered(outcome: AcquireOutcome, usable: boolean, at: number): 'continue' | 'exit' {
    if (outcome.status === 'busy') {
      this.#state.leaderRefusal = {
        kind: 'busy',
        epoch: outcome.epoch,
        remainingMs: outcome.remainingMs,
        leaderOnly: true,
      };
      return 'exit';
    }
    if (outcome.status === 'stale') {
      this.#state.leaderRefusal = { kind: 'outdated', leaderOnly: true };
      return 'exit';
    }
    // A leader behind the epoch (too_far) is caught up once the others' partials come: ask them now.
    this.#judge.askSigners(at);
    if (usable) this.#widenWhenLate(at);
    return 'continue';
  }

  /**
   * Enough answers to choose the next epoch. A slow or silent replica may still hold the deciding vote, but
   * waiting out the full request timeout for it would let one silent replica stall every contended acquire.
   */
  #noteStragglers(at: number): void {
    if (this.#straggling || this.#judge.voted.size < 2 * this.#env.cluster.f + 1) return;
    this.#straggling = true;
    const elapsed = at - this.#state.sentAt;
    shortenRoundDeadline(
      this.#round,
      this.#call.out,
      at + Math.max(this.#env.options.stragglerMinMs, elapsed * STRAGGLER_FACTOR),
      at,
    );
  }

  /**
   * Waiting in the leader's line: true once the leader is no longer the resource's leader for this client (it turned
   * slow or hung, or went down: leaderFor), so the attempt gives its place up and waits in the line of the one that
   * is; a hung leader would otherwise keep it for the whole turn wait. Checked again later while it still is.
   */
  #checkLeader(): boolean {
    if (!this.#state.leaderOnly || this.#result) return false;
    const { request, leader } = this.#spec;
    if (leaderFor(this.#call.connections, request.resource, this.#env.cluster.t) !== leader) {
      this.#leaderGone = true;
      return true;
    }
    this.#leaderCheckTimer = outbox.setTimer(this.#call.out, LEADER_CHECK_MS);
    return false;
  }

  /** Once the leader granted, the other signers' leases end with the same release: late answers mean asking the rest. */
  #widenWhenLate(at: number): void {
    if (this.#lateTimer !== undefined || !roundNarrow(this.#round)) return;
    this.#lateTimer = outbox.setTimer(this.#call.out, this.#widenAfterMs(at));
  }

  /**
   * How long the replicas asked first get before the others are asked: adapted to the grants seen (GrantLatency),
   * but at most half the round's time left, so that no attempt ends without having asked everyone. Without that
   * cap, a latency learnt from slow grants (a loaded box, a line) could exceed the round, and f silent or slow
   * replicas among the first signers then failed every attempt alike, with no grant ever completing to lower it
   * (a simulator sweep found an acquire timing out so, run 3008025206).
   */
  #widenAfterMs(at: number): number {
    const { grantLatency, options } = this.#env;
    const adaptive = grantLatency?.widenAfterMs(options.stragglerMinMs) ?? options.stragglerMinMs;
    return Math.min(adaptive, Math.max(0, (this.#roundDeadline - at) / 2));
  }

  #finish(at: number): void {
    const out = this.#call.out;
    outbox.clearTimer(out, this.#widenTimer);
    outbox.clearTimer(out, this.#lateTimer);
    outbox.clearTimer(out, this.#leaderCheckTimer);
    this.#widenTimer = this.#lateTimer = this.#leaderCheckTimer = undefined;
    const reachable = this.#judge.voted.size + roundPossible(this.#round);
    const asked = roundAsked(this.#round);
    closeRound(this.#round, this.#call.out);
    this.#result = this.#outcome(at, reachable, asked);
  }

  #outcome(at: number, reachable: number, asked: readonly number[]): Attempt {
    const state = this.#state;
    if (state.leaderRefusal) return state.leaderRefusal;
    if (this.#leaderGone) {
      this.#judge.releaseWhatWasWon(asked); // the request waiting in its line, should it wake up and grant it
      return { kind: 'leader_gone' };
    }
    const { request, leader } = this.#spec;
    if (state.signature?.ok) {
      if (leader === undefined) this.#env.grantLatency?.observe(at - state.sentAt);
      return {
        kind: 'granted',
        waited: state.waited,
        crowded: this.#judge.busy.length > 0 || this.#judge.blockers.length > 0,
        grant: {
          token: encodeToken(state.grant, state.signature.signature),
          sentAt: state.sentAt,
          ttlMs: request.ttlMs,
          signers: state.signature.signers,
          evidence: state.signature.partials.slice(0, this.#env.cluster.f + 1),
        },
      };
    }
    this.#judge.releaseWhatWasWon(asked);
    const judge = this.#judge;
    const { f, t } = this.#env.cluster;
    return classifyAttempt({
      resource: request.resource,
      epoch: state.epoch,
      f,
      t,
      ended: this.#ended,
      refusals: judge.refusals,
      busy: judge.busy,
      busyEpochs: judge.busyEpochs,
      granted: judge.granted.size,
      outdated: judge.outdated,
      reachable,
      straggling: this.#straggling,
      turnCame: state.turnCame,
      blockers: judge.blockers,
      roundDeadlineIsCallers: this.#roundDeadline >= this.#spec.deadline,
      requestTimeoutMs: this.#env.options.requestTimeoutMs,
      timeoutMs: request.timeoutMs,
      unavailable: () =>
        unavailableMessage(
          this.#call.connections,
          this.#env.cluster.membershipVersion,
          reachable,
          t,
          judge.frozen,
          judge.otherGeneration,
        ),
    });
  }
}
