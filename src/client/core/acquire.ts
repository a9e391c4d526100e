/**
 * The acquire call, sans I/O (docs/protocol.md, Client rules; src/client/acquire.ts describes the protocol and
 * runs this core): each attempt picks an epoch, asks t replicas to sign (attempt.ts), and a failed attempt is
 * classified and acted on: busy (a place in the leader's line, or the polling wait), outdated (retry at once at
 * what the answers reported), contended (back off, release what was won, go above a blocker), a refusal f+1
 * replicas agree on, or unavailable (stop). Under contention attempts go leader-first, and at least once every
 * LEADER_FIRST_WINDOW_MS one asks every replica, whose (f+1)-th rules decide again.
 *
 * Nothing a replica sends can make it throw, and every wait ends by the caller's deadline or abort.
 *
 * The call's state is plain data (AcquireState, acquire-state.ts), made by `newAcquire` and changed only by
 * `startAcquire` and `stepAcquire`, which return the actions to take and, in the step that ends the call, its end
 * (which is not kept in the state: a grant's token holds the backend's signature object).
 */
import { MAX_EPOCH } from '../../common/limits.js';
import type { AcquireRefusal, AcquireRefusalReason, EpochHint } from './results.js';
import { backoffDelay } from '../backoff.js';
import { escalationEpoch } from '../catch-up.js';
import { firstEpoch } from '../epoch-choice.js';
import { addFault, faultList } from './faults.js';
import { leaderFor } from '../signer-choice.js';
import { busyPauseMs, turnWaitMs } from './waits.js';
import { startAttempt, stepAttempt } from './attempt.js';
import type { Attempt } from './attempt-result.js';
import type { AcquireCall, AcquireEnd, AcquirePhase, AcquireState, AttemptStep } from './acquire-state.js';
import { CLIENT_RULES, newCallState, type CoreEnv } from './env.js';
import { outbox, type CallCore, type ConnectionView, type CoreAction, type CoreEvent } from './io.js';

export type { AcquireCall, AcquireEnd, AcquireState } from './acquire-state.js';
export { floorAfterRelease } from './acquire-state.js';

/**
 * Leader-first attempts are made for at most this long after the last attempt that asked every replica: so a
 * leader that refuses everyone, or reports a made-up epoch, costs a client at most this much before the
 * (f+1)-th rules of a full attempt decide again. Short enough to be a small delay, long enough that a waiter's
 * polls mostly go to the leader alone.
 */
export const LEADER_FIRST_WINDOW_MS = 250;

/** What one start or step did: the actions to take, and the call's end when this step ended it. */
export interface SteppedAcquire {
  readonly state: AcquireState;
  readonly actions: CoreAction[];
  readonly end: AcquireEnd | undefined;
}

/** One step's working set: the environment, the state, and the end once the step made it. */
interface AcquireStep {
  readonly env: CoreEnv;
  readonly state: AcquireState;
  end: AcquireEnd | undefined;
}

/**
 * A new call, not started.
 * @param hint what the last call remembered about the resource (its epoch, whether it was contended).
 * @param aborted the caller's signal had fired before the call began.
 */
export function newAcquire(
  request: AcquireCall,
  connections: readonly ConnectionView[],
  hint: EpochHint | undefined,
  aborted = false,
): AcquireState {
  return {
    request,
    call: newCallState(connections, aborted),
    faults: [],
    known: new Map(),
    deadline: 0,
    waitUntil: 0,
    floor: 1n,
    hint: hint?.epoch,
    retries: 0,
    lastEpoch: 0n,
    retryAtOnce: false,
    contended: hint?.contended ?? false,
    retried: false,
    lastFullAttemptAt: 0,
    turnMissed: request.pollOnly === true,
    turnsLost: 0,
    escalationTried: new Set(),
    escalateTo: undefined,
    phase: { kind: 'done' },
    done: false,
  };
}

/** Starts the call: its first attempt's requests. The state passed in is the state returned, changed. */
export function startAcquire(state: AcquireState, env: CoreEnv, at: number): SteppedAcquire {
  const s: AcquireStep = { env, state, end: undefined };
  state.deadline = at + state.request.timeoutMs;
  state.waitUntil = at + state.request.waitMs;
  state.lastFullAttemptAt = at;
  // Replicas whose last connection ended because they broke the protocol are named even though no request reached them.
  for (const { index, state: connection } of state.call.connections) {
    const failure = connection.lastFailure;
    if (connection.phase !== 'ready' && (failure?.kind === 'protocol' || failure?.kind === 'bad_challenge'))
      addFault(state.faults, index, failure.kind, failure.message);
  }
  next(s, at);
  return settle(s);
}

/** One event (docs: core/io.ts). The state passed in is the state returned, changed. */
export function stepAcquire(state: AcquireState, event: CoreEvent, env: CoreEnv): SteppedAcquire {
  const s: AcquireStep = { env, state, end: undefined };
  if (state.done) return { state, actions: [], end: undefined };
  const phase = state.phase;
  if (event.type === 'connections') state.call.connections = event.connections;
  if (event.type === 'abort') state.call.aborted = true;
  if (phase.kind === 'attempt') {
    const attempt: AttemptStep = { env, acquire: state, attempt: phase.attempt, won: undefined, result: undefined };
    stepAttempt(attempt, event);
    if (attempt.result) afterAttempt(s, phase, attempt.result, event.at);
  } else if (phase.kind === 'pause') stepPause(s, phase, event);
  else if (phase.kind === 'busy_wait') stepBusyWait(s, phase, event);
  return settle(s);
}

/** The acquire call as the driver runs it (drive.ts): its state, stepped by `stepAcquire`. */
export function acquireCore(env: CoreEnv, state: AcquireState): CallCore<AcquireEnd> {
  let end: AcquireEnd | undefined;
  const keep = (stepped: SteppedAcquire): CoreAction[] => {
    end ??= stepped.end;
    return stepped.actions;
  };
  return {
    start: (at) => keep(startAcquire(state, env, at)),
    step: (event) => keep(stepAcquire(state, event, env)),
    get result() {
      return end;
    },
  };
}

function settle(s: AcquireStep): SteppedAcquire {
  return { state: s.state, actions: outbox.take(s.state.call.out), end: s.end };
}

/**
 * The resource's leader now: its hash leader, or the next connected one in ring order when that one is down or
 * answers far slower than the rest (leaderFor); undefined with no replica connected.
 */
function leaderOf(s: AcquireStep): number | undefined {
  return leaderFor(s.state.call.connections, s.state.request.resource, s.env.cluster.t);
}

function stepPause(s: AcquireStep, phase: Extract<AcquirePhase, { kind: 'pause' }>, event: CoreEvent): void {
  if (event.type === 'abort') {
    outbox.clearTimer(s.state.call.out, phase.timer);
    refuse(s, 'aborted', 'the caller aborted the acquire');
  } else if (event.type === 'timer' && event.timer === phase.timer) next(s, event.at);
}

function stepBusyWait(s: AcquireStep, phase: Extract<AcquirePhase, { kind: 'busy_wait' }>, event: CoreEvent): void {
  if (event.type === 'abort') {
    outbox.clearTimer(s.state.call.out, phase.timer);
    refuse(s, 'aborted', 'the caller aborted the acquire');
    return;
  }
  // A replica's release notice ends the wait early; the poll still bounds it, since a notice may never come.
  const woken = event.type === 'released' || (event.type === 'timer' && event.timer === phase.timer);
  if (!woken) return;
  outbox.clearTimer(s.state.call.out, phase.timer);
  s.state.retries = 0;
  next(s, event.at);
}

/** The loop's head: stop, pause, or start the next attempt at the epoch the rules choose. */
function next(s: AcquireStep, at: number): void {
  const { state, env } = s;
  if (state.call.aborted) return refuse(s, 'aborted', 'the caller aborted the acquire');
  if (at >= state.deadline) return refuse(s, 'timeout', `no grant within ${state.request.timeoutMs} ms`);
  const leaderFirst =
    state.contended && at - state.lastFullAttemptAt < LEADER_FIRST_WINDOW_MS && leaderOf(s) !== undefined;
  const guessed = state.known.size < 2 * env.cluster.f + 1;
  const unknown = guessed && state.hint === undefined;
  const epoch = chooseEpoch(s, leaderFirst);
  if (state.retryAtOnce && epoch <= state.lastEpoch) {
    // The answers did not move the epoch (liars, or a lagging quorum): back off as for a split vote.
    return pause(s, at);
  }
  state.retryAtOnce = false;
  state.lastEpoch = epoch;
  if (!leaderFirst) state.lastFullAttemptAt = at;
  const waitTurnMs =
    leaderFirst && !state.turnMissed
      ? turnWaitMs(at, state.waitUntil, state.deadline, env.options.requestTimeoutMs)
      : 0;
  const attempt = startAttempt(
    env,
    state,
    { epoch, leader: leaderFirst ? leaderOf(s) : undefined, waitTurnMs, learnEpochs: guessed },
    at,
  );
  const phase = { kind: 'attempt', attempt: attempt.attempt, waitTurnMs, unknown } as const;
  state.phase = phase;
  if (attempt.result) afterAttempt(s, phase, attempt.result, at);
}

/** The epoch of the next attempt (docs/protocol.md: Epoch choice, Leader-first, Catch-up and escalation). */
function chooseEpoch(s: AcquireStep, leaderFirst: boolean): bigint {
  const { state, env } = s;
  const { f } = env.cluster;
  let epoch: bigint;
  const rules = env.rules ?? CLIENT_RULES;
  if (state.known.size >= 2 * f + 1) epoch = maxEpoch(rules.chooseEpoch([...state.known.values()], f), state.floor);
  else if (state.hint !== undefined) {
    epoch = maxEpoch(state.hint + 1n, state.floor);
    state.hint = undefined;
  } else {
    // Nothing known: propose above the first signers' floors. Stale answers carry each replica's epoch, and the
    // retry uses them.
    epoch = maxEpoch(firstEpochOf(s), state.floor);
  }
  // Leader-first, the leader's own record decides, so follow it even when the (f+1)-th rule lags behind it:
  // a leader ahead of the quorum (partial grants it gave) would otherwise refuse every attempt as stale.
  const leader = leaderOf(s);
  const leaderEpoch = leader === undefined ? undefined : state.known.get(leader);
  if (leaderFirst && leaderEpoch !== undefined && leaderEpoch + 1n > epoch && leaderEpoch < MAX_EPOCH)
    epoch = leaderEpoch + 1n;
  const escalateTo = state.escalateTo;
  state.escalateTo = undefined;
  return escalateTo !== undefined && escalateTo > epoch && escalateTo <= MAX_EPOCH ? escalateTo : epoch;
}

/**
 * The first attempt's epoch for a resource nothing is known of (firstEpoch in epoch-choice.ts): above the floor of
 * every connected replica, not only of the first signers, so that the replicas that do not sign can join the lease
 * (docs/protocol.md, "Leases that outlive f signers"); one with a higher floor could not.
 */
function firstEpochOf(s: AcquireStep): bigint {
  const { f } = s.env.cluster;
  const ready = s.state.call.connections.filter(({ state }) => state.phase === 'ready');
  const floors = ready.map(({ state }: ConnectionView) => state.floor ?? 0n);
  return firstEpoch(floors, floors, f, s.env.options.maxEpochStep);
}

function afterAttempt(
  s: AcquireStep,
  phase: Extract<AcquirePhase, { kind: 'attempt' }>,
  attempt: Attempt,
  at: number,
): void {
  const { state } = s;
  state.phase = { kind: 'done' };
  noteContention(state, phase, attempt);
  switch (attempt.kind) {
    case 'granted':
      // A grant that waited its turn in the leader's line is contention too, and so is one some replica refused
      // (`busy`, or `stale` at or above its epoch: a lease, a line or another contender was there, and the grant
      // came from the others): the next call goes to the line first rather than racing the line's next turn at
      // the other replicas with a full attempt.
      state.done = true;
      s.end = {
        result: { ok: true, grant: attempt.grant, faults: faultList(state.faults) },
        hint: {
          epoch: attempt.grant.token.grant.epoch,
          contended: state.retried || attempt.waited || attempt.crowded,
        },
      };
      return;
    case 'stop':
      return refuse(s, attempt.reason, attempt.message);
    case 'busy':
      return busy(s, attempt, at);
    case 'outdated':
      state.retryAtOnce = true;
      return next(s, at);
    case 'contended':
      state.escalateTo = escalationEpoch(attempt.blockers, state.escalationTried);
      return pause(s, at);
    case 'leader_gone':
      return next(s, at);
  }
}

function noteContention(
  state: AcquireState,
  phase: Extract<AcquirePhase, { kind: 'attempt' }>,
  attempt: Attempt,
): void {
  // Kept in the leader's line without our turn coming (busy when the wait ended, or no answer at all).
  if (phase.waitTurnMs > 0 && attempt.kind === 'busy') state.turnMissed = true;
  if (phase.waitTurnMs > 0 && attempt.kind === 'contended' && (!attempt.turnCame || ++state.turnsLost > 1))
    state.turnMissed = true;
  // A guess that came back stale is how an unknown resource is learnt, not a sign of contention. An epoch of our
  // own that came back stale is: someone else took the resource since our last grant, and the holder that asks
  // again at once after its release (a hot resource) must go to the line, not race the waiter whose turn it is.
  if (attempt.kind !== 'granted' && !(attempt.kind === 'outdated' && phase.unknown))
    state.contended = state.retried = true;
}

/** f+1 replicas say it is held: take a place in the leader's line now rather than poll for the release. */
function busy(s: AcquireStep, held: Extract<Attempt, { kind: 'busy' }>, at: number): void {
  const { state, env } = s;
  if (!held.leaderOnly && !state.turnMissed && leaderOf(s) !== undefined && at < state.waitUntil) return next(s, at);
  const limit = Math.min(state.waitUntil, state.deadline);
  if (at >= limit) return finish(s, busyRefusal(held, state));
  if (state.call.aborted) return refuse(s, 'aborted', 'the caller aborted the acquire');
  const { busyPollMs } = env.options;
  const timer = outbox.setTimer(state.call.out, busyPauseMs(at, limit, held.remainingMs, busyPollMs, env.random()));
  state.phase = { kind: 'busy_wait', timer, busy: held };
}

/** Jittered exponential backoff before the next attempt. */
function pause(s: AcquireStep, at: number): void {
  const { state, env } = s;
  state.retryAtOnce = false;
  const { retryBaseMs, retryMaxMs } = env.options;
  const delay = backoffDelay(state.retries++, { baseMs: retryBaseMs, maxMs: retryMaxMs }, env.random());
  if (state.call.aborted) return refuse(s, 'aborted', 'the caller aborted the acquire');
  const timer = outbox.setTimer(state.call.out, Math.min(delay, Math.max(0, state.deadline - at)));
  state.phase = { kind: 'pause', timer };
}

function refuse(s: AcquireStep, reason: Exclude<AcquireRefusalReason, 'busy'>, message: string): void {
  finish(s, { ok: false, reason, message, faults: faultList(s.state.faults) });
}

function finish(s: AcquireStep, result: AcquireRefusal): void {
  s.state.phase = { kind: 'done' };
  s.state.done = true;
  s.end = { result };
}

function maxEpoch(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}

function busyRefusal(busy: { epoch: bigint; remainingMs: number }, state: AcquireState): AcquireRefusal {
  return {
    ok: false,
    reason: 'busy',
    message: `held by another holder at epoch ${busy.epoch} for about ${busy.remainingMs} ms more`,
    epoch: busy.epoch,
    remainingMs: busy.remainingMs,
    faults: faultList(state.faults),
  };
}
