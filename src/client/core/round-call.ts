/**
 * A call that is one round (renew, release, status, leases), sans I/O: the same request to every replica it may
 * ask, each answer handed to the call as it comes, until the call has heard enough or the round ends (every
 * replica answered or is down, the deadline, the caller's abort). The call's own rules (quorum-tally.ts, the
 * views of status.ts) decide what it has heard enough of and what the result is.
 *
 * Its state is plain data (RoundCallState: the answers heard, in order, and what its rules read), stepped by
 * `stepRoundCall` with one call kind's rules (RoundCallRules: pure functions of that state); `roundCallCore` hands
 * it to the driver (src/client/drive.ts).
 */
import type { ReplicaAnswer, RequestKind } from '../replica-channel.js';
import { newCallState, type CallState } from './env.js';
import { outbox, type CallCore, type ConnectionView, type CoreAction, type CoreEvent } from './io.js';
import type { RoundBodies } from './bodies.js';
import {
  closeRound,
  endRound,
  newRound,
  nextRoundEvent,
  roundEndedBy,
  roundAnswer,
  roundConnectionsChanged,
  roundPossible,
  roundTimer,
  type RoundEnd,
  type RoundState,
} from './round.js';

/** One answer, as the call heard it. */
export interface HeardAnswer {
  readonly replica: number;
  readonly answer: ReplicaAnswer<RequestKind>;
}

/** A round call's whole state: plain data (structuredClone copies it, and the copy steps as the original). */
export interface RoundCallState<P> {
  /** What the call's rules read besides the answers (plain data too). */
  readonly params: P;
  readonly bodies: RoundBodies;
  /** The round's deadline, from the call's start. */
  readonly timeoutMs: number;
  /** Never ask any other replica (they count as down). */
  readonly only: ReadonlySet<number> | undefined;
  readonly call: CallState;
  round: RoundState | undefined;
  /** The call's start (before any request left). */
  startedAt: number;
  /** Every answer, replies and failures alike, in the order they came. */
  readonly heard: HeardAnswer[];
  /** Set once the call has ended: why the round ended on its own, undefined when the rules had heard enough. */
  ended: { readonly why: RoundEnd | undefined } | undefined;
}

/** One call kind's rules (renew, release, status, ...): pure functions of its state. */
export interface RoundCallRules<P, R> {
  /** Keep waiting for answers while this holds (asked before each); without it, until the round ends. */
  readonly keepGoing?: (params: P, heard: readonly HeardAnswer[], possible: number) => boolean;
  /**
   * The result: `ended` says why the round ended on its own, undefined when `keepGoing` stopped it; `startedAt`
   * is the call's start (before any request left).
   */
  readonly result: (
    params: P,
    heard: readonly HeardAnswer[],
    ended: RoundEnd | undefined,
    startedAt: number,
    connections: readonly ConnectionView[],
  ) => R;
}

export interface RoundCallSetup<P> {
  readonly params: P;
  readonly bodies: RoundBodies;
  readonly timeoutMs: number;
  readonly only?: ReadonlySet<number> | undefined;
}

export function newRoundCall<P>(
  setup: RoundCallSetup<P>,
  connections: readonly ConnectionView[],
  aborted = false,
): RoundCallState<P> {
  return {
    params: setup.params,
    bodies: setup.bodies,
    timeoutMs: setup.timeoutMs,
    only: setup.only,
    call: newCallState(connections, aborted),
    round: undefined,
    startedAt: 0,
    heard: [],
    ended: undefined,
  };
}

export interface SteppedRoundCall<P> {
  readonly state: RoundCallState<P>;
  readonly actions: CoreAction[];
}

/** Starts the call: its round's requests. The state passed in is the state returned, changed. */
export function startRoundCall<P, R>(
  state: RoundCallState<P>,
  rules: RoundCallRules<P, R>,
  at: number,
): SteppedRoundCall<P> {
  state.startedAt = at;
  state.round = newRound(state.call.out, state.call.connections, state.bodies, {
    at,
    deadline: at + state.timeoutMs,
    aborted: state.call.aborted,
    only: state.only,
  });
  pump(state, rules, state.round);
  return { state, actions: outbox.take(state.call.out) };
}

/** One event (docs: core/io.ts). The state passed in is the state returned, changed. */
export function stepRoundCall<P, R>(
  state: RoundCallState<P>,
  rules: RoundCallRules<P, R>,
  event: CoreEvent,
): SteppedRoundCall<P> {
  const { round } = state;
  const out = state.call.out;
  if (!round || state.ended) return { state, actions: [] };
  if (event.type === 'connections') {
    state.call.connections = event.connections;
    roundConnectionsChanged(round, out, event.connections, event.at);
  } else if (event.type === 'answer') roundAnswer(round, event.request, event.answer);
  else if (event.type === 'timer') roundTimer(round, out, event.timer);
  else if (event.type === 'abort') endRound(round, out, 'aborted');
  pump(state, rules, round);
  return { state, actions: outbox.take(out) };
}

/** The call's result once it has ended (undefined before). */
export function roundCallResult<P, R>(state: RoundCallState<P>, rules: RoundCallRules<P, R>): R | undefined {
  if (!state.ended) return undefined;
  return rules.result(state.params, state.heard, state.ended.why, state.startedAt, state.call.connections);
}

/** A round call as the driver runs it (drive.ts): its state, stepped by `stepRoundCall` with `rules`. */
export function roundCallCore<P, R>(state: RoundCallState<P>, rules: RoundCallRules<P, R>): CallCore<R> {
  let result: R | undefined;
  const settle = (stepped: SteppedRoundCall<P>): CoreAction[] => {
    if (result === undefined) result = roundCallResult(stepped.state, rules);
    return stepped.actions;
  };
  return {
    start: (at) => settle(startRoundCall(state, rules, at)),
    step: (event) => settle(stepRoundCall(state, rules, event)),
    get result() {
      return result;
    },
  };
}

function pump<P, R>(state: RoundCallState<P>, rules: RoundCallRules<P, R>, round: RoundState): void {
  while (!state.ended) {
    if (rules.keepGoing && !rules.keepGoing(state.params, state.heard, roundPossible(round)))
      return finish(state, round, undefined);
    const event = nextRoundEvent(round, state.call.out);
    if (!event) return;
    if (event.type === 'end') return finish(state, round, event.why);
    if (event.type === 'answer') state.heard.push({ replica: event.replica, answer: event.answer });
  }
}

function finish<P>(state: RoundCallState<P>, round: RoundState, why: RoundEnd | undefined): void {
  closeRound(round, state.call.out);
  state.ended = { why: roundEndedBy(round, why) };
}
