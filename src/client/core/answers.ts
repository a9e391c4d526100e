/**
 * How one acquire attempt judges each answer (src/client/core/attempt.ts hands them over one at a time): a usable
 * partial is held and, at t, combined; refusals are counted for the (f+1)-th rules; a replica too far behind is
 * caught up with the partials held as evidence (catch-up.ts); replicas ahead are noted as blockers. Also the
 * releases of what a failed attempt won. Pure functions of the attempt's state (JudgeState, acquire-state.ts):
 * requests leave through the call's outbox.
 */
import type { AcquireOutcome } from '../../protocol/messages.js';
import { addPartial, newPartialSet } from '../partial-collector.js';
import { QuorumTally } from '../quorum-tally.js';
import type { ReplicaAnswer, RequestKind } from '../replica-channel.js';
import { firstSigners } from '../signer-choice.js';
import { noteReleased, reportEpoch, type AttemptStep, type JudgeState } from './acquire-state.js';
import { acquireBodies, acquireBody, releaseBody } from './bodies.js';
import { CLIENT_RULES } from './env.js';
import { addFault, faultFromAnswer } from './faults.js';
import { outbox } from './io.js';
import { askAgain, roundPossible, widenRound, widenRoundTo } from './round.js';

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

export function newJudge(): JudgeState {
  return {
    voted: new Set(),
    granted: new Set(),
    busy: [],
    busyEpochs: [],
    refusals: [],
    outdated: 0,
    blockers: [],
    frozen: [],
    otherGeneration: [],
    held: [],
    lagging: new Map(),
    steppedTo: new Map(),
  };
}

/** Judges one answer; `combining` when the partials held reached t (combine them, then `afterJudging`). */
export function judgeAnswer(s: AttemptStep, replica: number, answer: ReplicaAnswer<RequestKind>, at: number): Judged {
  const { attempt, acquire } = s;
  const judge = attempt.judge;
  faultFromAnswer(acquire.faults, replica, answer);
  if (answer.kind !== 'reply') {
    // A frozen replica (a reshare is under way) cannot vote, like one that is down: ask the others.
    if (answer.kind === 'error' && answer.code === 'REPLICA_FROZEN') judge.frozen.push(replica);
    widenRound(attempt.round, acquire.call.out, at);
    return { next: 'continue' };
  }
  judge.voted.add(replica);
  const outcome = answer.outcome as AcquireOutcome;
  if (catchUpAnswered(s, replica, outcome, at)) return { next: 'continue' };
  switch (outcome.status) {
    case 'granted':
      return granted(s, replica, outcome, at);
    case 'stale':
      reportEpoch(acquire, replica, outcome.epoch);
      judge.outdated++;
      if (outcome.epoch >= attempt.epoch) judge.blockers.push({ replica, epoch: outcome.epoch });
      break;
    case 'too_far':
      reportEpoch(acquire, replica, outcome.epoch);
      judge.outdated++;
      // Behind this attempt's epoch by more than its free step: bring it up with the partials others send.
      if (outcome.epoch < attempt.epoch) {
        judge.lagging.set(replica, { current: outcome.epoch, asking: undefined, steps: 0 });
        catchUp(s, replica, at);
      }
      break;
    case 'busy':
      reportEpoch(acquire, replica, outcome.epoch);
      judge.busy.push(outcome.remainingMs);
      judge.busyEpochs.push(outcome.epoch);
      break;
    case 'forbidden':
      judge.refusals.push({ kind: 'forbidden', message: '' });
      break;
    case 'invalid':
      judge.refusals.push({ kind: 'invalid', message: outcome.message });
      break;
  }
  return { next: 'judged', usable: false, outcome };
}

/**
 * The answer to a catch-up request: a step below the attempt's epoch moves the replica on (true: nothing else to
 * judge); anything else ends its catch-up, and an answer at the attempt's epoch counts like any other.
 */
function catchUpAnswered(s: AttemptStep, replica: number, outcome: AcquireOutcome, at: number): boolean {
  const { judge } = s.attempt;
  const lag = judge.lagging.get(replica);
  if (lag?.asking === undefined) return false;
  const stepped = lag.asking;
  lag.asking = undefined;
  if (outcome.status === 'granted' && stepped !== s.attempt.epoch) {
    lag.current = stepped;
    judge.steppedTo.set(replica, stepped);
    catchUp(s, replica, at);
    return true;
  }
  judge.lagging.delete(replica);
  return outcome.status === 'too_far'; // Refused its evidence (or over its budget): not asked again.
}

function granted(
  s: AttemptStep,
  replica: number,
  outcome: Extract<AcquireOutcome, { status: 'granted' }>,
  at: number,
): Judged {
  const judged = { next: 'judged', usable: false, outcome } as const;
  if (!grantAtThisEpoch(s, replica, outcome, at)) return judged;
  const { attempt, acquire, env } = s;
  const { judge } = attempt;
  judge.granted.add(replica);
  reportEpoch(acquire, replica, attempt.epoch);
  const added = addPartial(attempt.collector, env.partials, replica, outcome.partial, outcome.generation);
  if (!added.ok) {
    if (added.reason === 'other_generation') {
      // Not a vote on this membership: like a replica that is down, not like a split vote.
      judge.otherGeneration.push(replica);
      judge.voted.delete(replica);
    } else if (added.reason !== 'duplicate')
      addFault(
        acquire.faults,
        replica,
        added.reason === 'undecodable' ? 'undecodable_partial' : 'invalid_partial',
        added.message,
      );
    return judged;
  }
  judge.held.push({ replica, epoch: attempt.epoch, partial: outcome.partial });
  for (const behind of judge.lagging.keys()) catchUp(s, behind, at);
  if (attempt.collector.held.length >= env.cluster.t) return { next: 'combining', outcome };
  return { ...judged, usable: true };
}

/**
 * Whether a `granted` answer is a partial at this attempt's epoch. The leader's grant of our turn, unannounced,
 * starts the lease view now and moves the attempt to the epoch it granted; one at another epoch than announced
 * loses the attempt; any other replica naming another epoch than asked is faulty.
 */
function grantAtThisEpoch(
  s: AttemptStep,
  replica: number,
  outcome: Extract<AcquireOutcome, { status: 'granted' }>,
  at: number,
): boolean {
  const { attempt, acquire, env } = s;
  const fromLeader = attempt.waitTurnMs > 0 && replica === attempt.leader;
  const otherEpoch = outcome.epoch !== undefined && outcome.epoch !== attempt.epoch;
  if (fromLeader) attempt.turnCame = true;
  if (fromLeader && attempt.leaderOnly) {
    // Our turn at the leader, unannounced: the lease view starts now, the others are asked at the epoch it
    // granted, and the leader again, so that its lease too starts after our view does (same partial).
    attempt.sentAt = at;
    if (otherEpoch) moveTo(s, outcome.epoch!);
    outbox.notify(
      acquire.call.out,
      replica,
      acquireBody(acquire.request, attempt.epoch, 0, false),
      env.options.requestTimeoutMs,
    );
    return true;
  }
  if (fromLeader && otherEpoch) {
    noteReleased(acquire, env.cluster.f, outcome.epoch!, 1);
    release(s, outcome.epoch!, (r) => r === replica);
    attempt.turnMoved = true;
    return false;
  }
  if (otherEpoch) {
    addFault(acquire.faults, replica, 'invalid_partial', `granted epoch ${outcome.epoch}, asked for ${attempt.epoch}`);
    return false;
  }
  return true;
}

/** The epoch may move once: when the leader grants (or announces) our turn at the resource's next epoch. */
export function moveTo(s: AttemptStep, next: bigint): void {
  const { attempt, acquire } = s;
  attempt.epoch = next;
  attempt.grant = { ...attempt.grant, epoch: next };
  attempt.collector = newPartialSet(attempt.grant);
  attempt.round.bodies = acquireBodies(acquire.request, next, attempt.waitTurnMs, attempt.leader);
}

/** Leader-first: the leader granted or announced our turn; ask the first t signers from it (else everyone). */
export function askSigners(s: AttemptStep, at: number): void {
  const { attempt, acquire, env } = s;
  attempt.leaderOnly = false;
  const { leader } = attempt;
  const signers = firstSigners({ channels: acquire.call.connections }, acquire.request.resource, env.cluster.t);
  // A leader that missed our last turn (answered it only after the others had granted it and we had released it:
  // slow flushes behind its line, whose pongs and pushes are on time) is not waited for: any t of the others.
  const missed = acquire.call.connections.some((c) => c.index === leader && c.missedTurn === true);
  if (signers && leader !== undefined && signers.has(leader) && !missed)
    widenRoundTo(attempt.round, acquire.call.out, signers, at);
  else widenRound(attempt.round, acquire.call.out, at);
}

function catchUp(s: AttemptStep, replica: number, at: number): void {
  const { attempt, acquire, env } = s;
  const entry = attempt.judge.lagging.get(replica);
  if (!entry || entry.asking !== undefined) return;
  const { f } = env.cluster;
  const { catchUpStep } = env.rules ?? CLIENT_RULES;
  const step = catchUpStep(replica, entry.current, attempt.epoch, attempt.judge.held, f, env.options.maxEpochStep);
  if (!step) return;
  const body = acquireBody(acquire.request, step.epoch, 0, false, step.evidence);
  if (entry.steps >= MAX_CATCH_UP_STEPS || !askAgain(attempt.round, acquire.call.out, replica, body, at)) {
    attempt.judge.lagging.delete(replica);
    return;
  }
  entry.asking = step.epoch;
  entry.steps++;
}

/** Lagging replicas not asked yet count as answers still possible while a partial can still come to make evidence. */
export function waitingForEvidence(s: AttemptStep): number {
  const { attempt } = s;
  if (attempt.collector.held.length + roundPossible(attempt.round) === 0) return 0;
  let waiting = 0;
  for (const entry of attempt.judge.lagging.values()) if (entry.asking === undefined) waiting++;
  return waiting;
}

/** The refusals heard, counted by the (f+1)-th rule (quorum-tally.ts). */
export function refusalTally(judge: JudgeState, f: number, t: number): QuorumTally<'forbidden' | 'invalid'> {
  const tally = new QuorumTally<'forbidden' | 'invalid'>(f, t);
  for (const refusal of judge.refusals) tally.refuse(refusal.kind, refusal.message);
  return tally;
}

export function refusalConfirmed(judge: JudgeState, f: number, t: number): boolean {
  return refusalTally(judge, f, t).confirmed('forbidden', 'invalid') !== undefined;
}

/**
 * No token: hand back what we half-won so that another contender is not kept out by it until the ttl runs out.
 * Release at every replica asked that has not answered too: the round stops once f+1 say busy or stale, or at
 * its deadline, and a late answer may be a grant, or the request may wait in that replica's line; either would
 * become a lease nobody holds, keeping everyone out of that replica for a whole ttl.
 */
export function releaseWhatWasWon(s: AttemptStep, asked: readonly number[]): void {
  const { attempt, acquire, env } = s;
  const { judge } = attempt;
  const epoch = attempt.epoch;
  const unanswered = asked.filter((replica) => !judge.voted.has(replica));
  const catchingUp = [...judge.lagging].filter(([, entry]) => entry.asking !== undefined).map(([replica]) => replica);
  if (judge.granted.size > 0 || unanswered.length > 0 || catchingUp.length > 0) {
    // Only the replicas that granted say they hold it: one asked that has not answered yet may still refuse (a
    // lagging one caught up with a liar's partial as evidence does, every time), and counting it would let one
    // liar's grant raise the floor out of the honest replicas' reach again (floorAfterRelease).
    noteReleased(acquire, env.cluster.f, epoch, judge.granted.size);
    release(
      s,
      epoch,
      (replica) => judge.granted.has(replica) || unanswered.includes(replica) || catchingUp.includes(replica),
    );
  }
  // Catch-up steps this attempt got below its epoch are leases of ours too.
  for (const [replica, stepped] of judge.steppedTo)
    if (!judge.granted.has(replica)) release(s, stepped, (r) => r === replica);
  for (const replica of catchingUp) {
    const stepped = judge.lagging.get(replica)?.asking;
    if (stepped !== undefined && stepped !== epoch) release(s, stepped, (r) => r === replica);
  }
}

/** Fire and forget: a release that is lost only delays the other contender until our partial lease ends. */
function release(s: AttemptStep, epoch: bigint, include: (replica: number) => boolean): void {
  const { acquire, env } = s;
  const body = releaseBody(acquire.request.resource, epoch);
  for (const connection of acquire.call.connections) {
    if (!include(connection.index) || connection.state.phase !== 'ready') continue;
    outbox.notify(acquire.call.out, connection.index, body, env.options.requestTimeoutMs);
  }
}
