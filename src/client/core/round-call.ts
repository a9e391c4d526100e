/**
 * A call that is one round (renew, release, status, leases), sans I/O: the same request to every replica it may
 * ask, each answer handed to the call as it comes, until the call has heard enough or the round ends (every
 * replica answered or is down, the deadline, the caller's abort). The call's own rules (quorum-tally.ts, the
 * views of status.ts) decide what it has heard enough of and what the result is.
 */
import type { ReplicaAnswer, RequestKind } from '../replica-channel.js';
import { CallState } from './env.js';
import type { AnyRequestBody, CallCore, ConnectionView, CoreAction, CoreEvent } from './io.js';
import { RoundCore, type RoundEnd } from './round.js';

export interface RoundCallSpec<R> {
  readonly body: (replica: number) => AnyRequestBody;
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
  #round: RoundCore | undefined;
  #startedAt = 0;
  #result: R | undefined;

  constructor(spec: RoundCallSpec<R>, connections: readonly ConnectionView[], aborted = false) {
    this.#spec = spec;
    this.#call = new CallState(connections, aborted);
  }

  get result(): R | undefined {
    return this.#result;
  }

  start(at: number): CoreAction[] {
    this.#startedAt = at;
    this.#round = new RoundCore(this.#call.out, this.#call.connections, this.#spec.body, {
      at,
      deadline: at + this.#spec.timeoutMs,
      aborted: this.#call.aborted,
      only: this.#spec.only,
    });
    this.#pump();
    return this.#call.out.take();
  }

  step(event: CoreEvent): CoreAction[] {
    const round = this.#round;
    if (!round || this.#result !== undefined) return [];
    if (event.type === 'connections') {
      this.#call.connections = event.connections;
      round.connectionsChanged(event.connections, event.at);
    } else if (event.type === 'answer') round.answer(event.request, event.answer);
    else if (event.type === 'timer') round.timer(event.timer);
    else if (event.type === 'abort') round.end('aborted');
    this.#pump();
    return this.#call.out.take();
  }

  #pump(): void {
    const round = this.#round!;
    while (this.#result === undefined) {
      if (this.#spec.keepGoing && !this.#spec.keepGoing(round.possible)) return this.#finish(undefined);
      const event = round.next();
      if (!event) return;
      if (event.type === 'end') return this.#finish(event.why);
      if (event.type === 'answer') this.#spec.onAnswer(event.replica, event.answer);
    }
  }

  #finish(ended: RoundEnd | undefined): void {
    this.#round!.close();
    this.#result = this.#spec.finish(ended, this.#startedAt, this.#call.connections);
  }
}
