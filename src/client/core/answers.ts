/**
 * How one acquire attempt judges each answer (src/client/core/attempt.ts hands them over one at a time): a usable
 * partial is held and, at t, combined; refusals are counted for the (f+1)-th rules; a replica too far behind is
 * caught up with the partials held as evidence (catch-up.ts); replicas ahead are noted as blockers. Also the
 * releases of what a failed attempt won. Pure: requests leave through the call's outbox.
 */
import type { AcquireOutcome } from '../../protocol/messages.js';
import type { HeldPartial } from '../catch-up.js';
import { addPartial, newPartialSet } from '../partial-collector.js';
import { QuorumTally } from '../quorum-tally.js';
import type { ReplicaAnswer, RequestKind } from '../replica-channel.js';
import { firstSigners } from '../signer-choice.js';
import type { AttemptState, EpochAttempt } from './attempt.js';
import type { Blocker } from './attempt-result.js';
import { acquireBodies, acquireBody, releaseBody } from './bodies.js';
import { CLIENT_RULES, type CallState, type CoreEnv } from './env.js';
import { outbox } from './io.js';
import { askAgain, roundPossible, widenRound, widenRoundTo, type RoundState } from './round.js';

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

export type Judged =
  | { readonly next: 'continue' }
  /** The partials held reached t: combine them, then judge on as for a usable partial. */
  | { readonly next: 'combining'; readonly outcome: AcquireOutcome }
  /** `usable`: a partial that counts toward the token. */
  | { readonly next: 'judged'; readonly usable: boolean; readonly outcome: AcquireOutcome };

export class AnswerJudge {
  readonly #env: CoreEnv;
  readonly #call: CallState;
  readonly #spec: EpochAttempt;
  readonly #state: AttemptState;
  readonly #round: RoundState;
  readonly #waitTurnMs: number;
  readonly voted = new Set<number>();
  readonly granted = new Set<number>();
  readonly busy: number[] = [];
  readonly busyEpochs: bigint[] = [];
  /** Only the refusals that end the call; grants, busy and outdated answers have rules of their own. */
  readonly refusals: QuorumTally<'forbidden' | 'invalid'>;
  outdated = 0;
  readonly blockers: Blocker[] = [];
  readonly frozen: number[] = [];
  /** Replicas that granted with another share generation than the cluster description's (not combined). */
  readonly otherGeneration: number[] = [];
  /** Partials usable at this attempt's epoch, kept as evidence for replicas that lag (catch-up.ts). */
  readonly #held: HeldPartial[] = [];
  readonly #lagging = new Map<number, Lagging>();
  /** Catch-up steps granted below the attempt's epoch (each a lease of ours to release if the attempt fails). */
  readonly #steppedTo = new Map<number, bigint>();

  constructor(
    env: CoreEnv,
    call: CallState,
    spec: EpochAttempt,
    state: AttemptState,
    round: RoundState,
    waitTurnMs: number,
  ) {
    this.#env = env;
    this.#call = call;
    this.#spec = spec;
    this.#state = state;
    this.#round = round;
    this.#waitTurnMs = waitTurnMs;
    this.refusals = new QuorumTally(env.cluster.f, env.cluster.t);
  }

  /** Judges one answer; `combining` when the partials held reached t (combine them, then `afterJudging`). */
  judge(replica: number, answer: ReplicaAnswer<RequestKind>, at: number): Judged {
    this.#spec.faults.fromAnswer(replica, answer);
    if (answer.kind !== 'reply') {
      // A frozen replica (a reshare is under way) cannot vote, like one that is down: ask the others.
      if (answer.kind === 'error' && answer.code === 'REPLICA_FROZEN') this.frozen.push(replica);
      widenRound(this.#round, this.#call.out, at);
      return { next: 'continue' };
    }
    this.voted.add(replica);
    const outcome = answer.outcome as AcquireOutcome;
    if (this.#catchUpAnswered(replica, outcome, at)) return { next: 'continue' };
    switch (outcome.status) {
      case 'granted':
        return this.#granted(replica, outcome, at);
      case 'stale':
        this.#spec.report(replica, outcome.epoch);
        this.outdated++;
        if (outcome.epoch >= this.#state.epoch) this.blockers.push({ replica, epoch: outcome.epoch });
        break;
      case 'too_far':
        this.#spec.report(replica, outcome.epoch);
        this.outdated++;
        // Behind this attempt's epoch by more than its free step: bring it up with the partials others send.
        if (outcome.epoch < this.#state.epoch) {
          this.#lagging.set(replica, { current: outcome.epoch, asking: undefined, steps: 0 });
          this.#catchUp(replica, at);
        }
        break;
      case 'busy':
        this.#spec.report(replica, outcome.epoch);
        this.busy.push(outcome.remainingMs);
        this.busyEpochs.push(outcome.epoch);
        break;
      case 'forbidden':
        this.refusals.refuse('forbidden');
        break;
      case 'invalid':
        this.refusals.refuse('invalid', outcome.message);
        break;
    }
    return { next: 'judged', usable: false, outcome };
  }

  /**
   * The answer to a catch-up request: a step below the attempt's epoch moves the replica on (true: nothing else to
   * judge); anything else ends its catch-up, and an answer at the attempt's epoch counts like any other.
   */
  #catchUpAnswered(replica: number, outcome: AcquireOutcome, at: number): boolean {
    const lag = this.#lagging.get(replica);
    if (lag?.asking === undefined) return false;
    const stepped = lag.asking;
    lag.asking = undefined;
    if (outcome.status === 'granted' && stepped !== this.#state.epoch) {
      lag.current = stepped;
      this.#steppedTo.set(replica, stepped);
      this.#catchUp(replica, at);
      return true;
    }
    this.#lagging.delete(replica);
    return outcome.status === 'too_far'; // Refused its evidence (or over its budget): not asked again.
  }

  #granted(replica: number, outcome: Extract<AcquireOutcome, { status: 'granted' }>, at: number): Judged {
    const judged = { next: 'judged', usable: false, outcome } as const;
    if (!this.#grantAtThisEpoch(replica, outcome, at)) return judged;
    const state = this.#state;
    this.granted.add(replica);
    this.#spec.report(replica, state.epoch);
    const added = addPartial(state.collector, this.#env.partials, replica, outcome.partial, outcome.generation);
    if (!added.ok) {
      if (added.reason === 'other_generation') {
        // Not a vote on this membership: like a replica that is down, not like a split vote.
        this.otherGeneration.push(replica);
        this.voted.delete(replica);
      } else if (added.reason !== 'duplicate')
        this.#spec.faults.add(
          replica,
          added.reason === 'undecodable' ? 'undecodable_partial' : 'invalid_partial',
          added.message,
        );
      return judged;
    }
    this.#held.push({ replica, epoch: state.epoch, partial: outcome.partial });
    for (const behind of this.#lagging.keys()) this.#catchUp(behind, at);
    if (state.collector.held.length >= this.#env.cluster.t) return { next: 'combining', outcome };
    return { ...judged, usable: true };
  }

  /**
   * Whether a `granted` answer is a partial at this attempt's epoch. The leader's grant of our turn, unannounced,
   * starts the lease view now and moves the attempt to the epoch it granted; one at another epoch than announced
   * loses the attempt; any other replica naming another epoch than asked is faulty.
   */
  #grantAtThisEpoch(replica: number, outcome: Extract<AcquireOutcome, { status: 'granted' }>, at: number): boolean {
    const state = this.#state;
    const fromLeader = this.#waitTurnMs > 0 && replica === this.#spec.leader;
    const otherEpoch = outcome.epoch !== undefined && outcome.epoch !== state.epoch;
    if (fromLeader) state.turnCame = true;
    if (fromLeader && state.leaderOnly) {
      // Our turn at the leader, unannounced: the lease view starts now, the others are asked at the epoch it
      // granted, and the leader again, so that its lease too starts after our view does (same partial).
      state.sentAt = at;
      if (otherEpoch) this.moveTo(outcome.epoch!);
      outbox.notify(
        this.#call.out,
        replica,
        acquireBody(this.#spec.request, state.epoch, 0, false),
        this.#env.options.requestTimeoutMs,
      );
      return true;
    }
    if (fromLeader && otherEpoch) {
      this.#spec.onReleased(outcome.epoch!, 1);
      this.#release(outcome.epoch!, (r) => r === replica);
      state.turnMoved = true;
      return false;
    }
    if (otherEpoch) {
      this.#spec.faults.add(replica, 'invalid_partial', `granted epoch ${outcome.epoch}, asked for ${state.epoch}`);
      return false;
    }
    return true;
  }

  /** The epoch may move once: when the leader grants (or announces) our turn at the resource's next epoch. */
  moveTo(next: bigint): void {
    const state = this.#state;
    state.epoch = next;
    state.grant = { ...state.grant, epoch: next };
    state.collector = newPartialSet(state.grant);
    this.#round.bodies = acquireBodies(this.#spec.request, next, this.#waitTurnMs, this.#spec.leader);
  }

  /** Leader-first: the leader granted or announced our turn; ask the first t signers from it (else everyone). */
  askSigners(at: number): void {
    this.#state.leaderOnly = false;
    const leader = this.#spec.leader;
    const signers = firstSigners(
      { channels: this.#call.connections },
      this.#spec.request.resource,
      this.#env.cluster.t,
    );
    if (signers && leader !== undefined && signers.has(leader)) widenRoundTo(this.#round, this.#call.out, signers, at);
    else widenRound(this.#round, this.#call.out, at);
  }

  #catchUp(replica: number, at: number): void {
    const entry = this.#lagging.get(replica);
    if (!entry || entry.asking !== undefined) return;
    const { f } = this.#env.cluster;
    const epoch = this.#state.epoch;
    const { catchUpStep } = this.#env.rules ?? CLIENT_RULES;
    const step = catchUpStep(replica, entry.current, epoch, this.#held, f, this.#env.options.maxEpochStep);
    if (!step) return;
    const body = acquireBody(this.#spec.request, step.epoch, 0, false, step.evidence);
    if (entry.steps >= MAX_CATCH_UP_STEPS || !askAgain(this.#round, this.#call.out, replica, body, at)) {
      this.#lagging.delete(replica);
      return;
    }
    entry.asking = step.epoch;
    entry.steps++;
  }

  /** Lagging replicas not asked yet count as answers still possible while a partial can still come to make evidence. */
  waitingForEvidence(): number {
    if (this.#state.collector.held.length + roundPossible(this.#round) === 0) return 0;
    let waiting = 0;
    for (const entry of this.#lagging.values()) if (entry.asking === undefined) waiting++;
    return waiting;
  }

  refusalConfirmed(): boolean {
    return this.refusals.confirmed('forbidden', 'invalid') !== undefined;
  }

  /**
   * No token: hand back what we half-won so that another contender is not kept out by it until the ttl runs out.
   * Release at every replica asked that has not answered too: the round stops once f+1 say busy or stale, or at
   * its deadline, and a late answer may be a grant, or the request may wait in that replica's line; either would
   * become a lease nobody holds, keeping everyone out of that replica for a whole ttl.
   */
  releaseWhatWasWon(asked: readonly number[]): void {
    const epoch = this.#state.epoch;
    const unanswered = asked.filter((replica) => !this.voted.has(replica));
    const catchingUp = [...this.#lagging].filter(([, entry]) => entry.asking !== undefined).map(([replica]) => replica);
    if (this.granted.size > 0 || unanswered.length > 0 || catchingUp.length > 0) {
      // Only the replicas that granted say they hold it: one asked that has not answered yet may still refuse (a
      // lagging one caught up with a liar's partial as evidence does, every time), and counting it would let one
      // liar's grant raise the floor out of the honest replicas' reach again (floorAfterRelease).
      this.#spec.onReleased(epoch, this.granted.size);
      this.#release(
        epoch,
        (replica) => this.granted.has(replica) || unanswered.includes(replica) || catchingUp.includes(replica),
      );
    }
    // Catch-up steps this attempt got below its epoch are leases of ours too.
    for (const [replica, stepped] of this.#steppedTo)
      if (!this.granted.has(replica)) this.#release(stepped, (r) => r === replica);
    for (const replica of catchingUp) {
      const stepped = this.#lagging.get(replica)?.asking;
      if (stepped !== undefined && stepped !== epoch) this.#release(stepped, (r) => r === replica);
    }
  }

  /** Fire and forget: a release that is lost only delays the other contender until our partial lease ends. */
  #release(epoch: bigint, include: (replica: number) => boolean): void {
    const body = releaseBody(this.#spec.request.resource, epoch);
    for (const connection of this.#call.connections) {
      if (!include(connection.index) || connection.state.phase !== 'ready') continue;
      outbox.notify(this.#call.out, connection.index, body, this.#env.options.requestTimeoutMs);
    }
  }
}
