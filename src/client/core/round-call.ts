/**
 * A call that is one round (renew, release, status, leases), sans I/O: the same request to every replica it may
 * ask, each answer handed to the call as it comes, until the call has heard enough or the round ends (every
 * replica answered or is down, the deadline, the caller's abort). The call's own rules (quorum-tally.ts, the
 * views of status.ts) decide what it has heard enough of and what the result is.
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
  roundAnswer,
  roundConnectionsChanged,
  roundPossible,
  roundTimer,
  type RoundEnd,
  type RoundState,
} from './round.js';

export interface RoundCallSpec<R> {
  /** The request for each replica (usually the same for all). */
  readonly bodies: RoundBodies;
  /** The round's deadline, from the call's start. */
  readonly timeoutMs: number;
  /** Never ask any other replica (they count as down). */
  readonly only?: ReadonlySet<number> | undefined;
  /** Keep waiting for answers while this holds (asked before each); without it, until the round ends. */
  readonly keepGoing?: (possible: number) => boolean;
  /** Every answer, replies and failures alike, in the order they came. */
  readonly onAnswer: (replica: number, answer: ReplicaAnswer<RequestKind>) => void;
  /**
   * The result: `ended` says why the round ended on its own, undefined when `keepGoing` stopped it; `startedAt`
   * is the call's start (before any request left).
   */
  readonly finish: (ended: RoundEnd | undefined, startedAt: number, connections: readonly ConnectionView[]) => R;
}

export class RoundCall<R> implements CallCore<R> {
  readonly #spec: RoundCallSpec<R>;
  readonly #call: CallState;
  #round: RoundState | undefined;
  #startedAt = 0;
  #result: R | undefined;

  constructor(spec: RoundCallSpec<R>, connections: readonly ConnectionView[], aborted = false) {
    this.#spec = spec;
    this.#call = newCallState(connections, aborted);
  }

  get result(): R | undefined {
    return this.#result;
  }

  start(at: number): CoreAction[] {
    this.#startedAt = at;
    this.#round = newRound(this.#call.out, this.#call.connections, this.#spec.bodies, {
      at,
      deadline: at + this.#spec.timeoutMs,
      aborted: this.#call.aborted,
      only: this.#spec.only,
    });
    this.#pump();
    return outbox.take(this.#call.out);
  }

  step(event: CoreEvent): CoreAction[] {
    const round = this.#round;
    const out = this.#call.out;
    if (!round || this.#result !== undefined) return [];
    if (event.type === 'connections') {
      this.#call.connections = event.connections;
      roundConnectionsChanged(round, out, event.connections, event.at);
    } else if (event.type === 'answer') roundAnswer(round, event.request, event.answer);
    else if (event.type === 'timer') roundTimer(round, out, event.timer);
    else if (event.type === 'abort') endRound(round, out, 'aborted');
    this.#pump();
    return outbox.take(this.#call.out);
  }

  #pump(): void {
    const round = this.#round!;
    while (this.#result === undefined) {
      if (this.#spec.keepGoing && !this.#spec.keepGoing(roundPossible(round))) return this.#finish(undefined);
      const event = nextRoundEvent(round, this.#call.out);
      if (!event) return;
      if (event.type === 'end') return this.#finish(event.why);
      if (event.type === 'answer') this.#spec.onAnswer(event.replica, event.answer);
    }
  }

  #finish(ended: RoundEnd | undefined): void {
    closeRound(this.#round!, this.#call.out);
    this.#result = this.#spec.finish(ended, this.#startedAt, this.#call.connections);
  }
}
