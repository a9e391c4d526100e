/**
 * What the client's cores take in and give out (docs/protocol.md, Client rules; the pattern is etcd raft's
 * `Step(message)`): a core never reads a clock, opens a socket, sets a timer or awaits anything. Time arrives
 * with every event (`at`, on the client's monotonic clock), replies and pushes arrive as events, and whatever the
 * core wants done leaves as an action: a request to send (its answer comes back as an `answer` event with the
 * same `request` number), a release to send and forget, a timer, the combining of partials (its outcome comes
 * back as `combined`). src/client/drive.ts runs a core over real connections and timers; src/simulation runs the
 * same cores over a simulated network and clock.
 */
import type { ConnectionState } from '../connection-state.js';
import type { CombineOutcome, PartialSet } from '../partial-collector.js';
import type { ReplicaAnswer, RequestBody, RequestKind } from '../replica-channel.js';

/** One replica connection as a core sees it. */
export interface ConnectionView {
  readonly index: number;
  readonly state: ConnectionState;
  /** How quickly the replica answers this client, when measured (replica-latency.ts): slow ones are asked last. */
  readonly latencyMs?: number | undefined;
  /** How quickly it answers as a line's keeper, when measured (its pongs): a slow one is no resource's leader. */
  readonly lineLatencyMs?: number | undefined;
  /** Should it count as slow: an acquire asks it beside the first signers, to see whether it still is. */
  readonly probeDue?: boolean | undefined;
  /** As a line's leader it missed this client's last turn: a turn it tells is asked of every other replica. */
  readonly missedTurn?: boolean | undefined;
}

export type AnyRequestBody = { [K in RequestKind]: RequestBody<K> }[RequestKind];

export type CoreEvent =
  /** The answer to the `send` action numbered `request`. */
  | {
      readonly type: 'answer';
      readonly at: number;
      readonly request: number;
      readonly answer: ReplicaAnswer<RequestKind>;
    }
  | { readonly type: 'timer'; readonly at: number; readonly timer: number }
  /** A connection changed state; `connections` is every connection now. */
  | { readonly type: 'connections'; readonly at: number; readonly connections: readonly ConnectionView[] }
  /** A replica pushed `turn { epoch }` for the call's resource. */
  | { readonly type: 'turn'; readonly at: number; readonly replica: number; readonly epoch: bigint }
  /** A replica pushed `released` for the call's resource. */
  | { readonly type: 'released'; readonly at: number }
  /** The outcome of the last `combine` action. */
  | { readonly type: 'combined'; readonly at: number; readonly outcome: CombineOutcome }
  /** The caller aborted the call. */
  | { readonly type: 'abort'; readonly at: number };

export type CoreAction =
  /** Send `body` to `replica`; answer with an `answer` event numbered `request`. `group` is the round it belongs to. */
  | {
      readonly type: 'send';
      readonly request: number;
      readonly group: number;
      readonly replica: number;
      readonly body: AnyRequestBody;
      readonly timeoutMs: number;
    }
  /** Send `body` to `replica` and forget it (releases of partial grants, the leader's resend). */
  | { readonly type: 'notify'; readonly replica: number; readonly body: AnyRequestBody; readonly timeoutMs: number }
  /** The round `group` is over: its open requests are abandoned and their late answers ignored. */
  | { readonly type: 'abandon'; readonly group: number }
  | { readonly type: 'set_timer'; readonly timer: number; readonly ms: number }
  | { readonly type: 'clear_timer'; readonly timer: number }
  /**
   * Try to combine these partials (a copy of those the core holds: combinePartials in partial-collector.ts); answer
   * with a `combined` event.
   */
  | { readonly type: 'combine'; readonly partials: PartialSet };

/**
 * Where a core's actions collect during one step, and where it numbers its timers, requests and rounds: plain data
 * (part of a call's state), changed only through `outbox` below. One per call: the numbers only have to be unique
 * within it.
 */
export interface Outbox {
  actions: CoreAction[];
  nextId: number;
}

export function newOutbox(): Outbox {
  return { actions: [], nextId: 1 };
}

/** The operations on an outbox (each appends one action, or numbers one thing). */
export const outbox = {
  /** The actions of this step, in order; the outbox is empty afterwards. */
  take(out: Outbox): CoreAction[] {
    const actions = out.actions;
    out.actions = [];
    return actions;
  },

  id(out: Outbox): number {
    return out.nextId++;
  },

  send(out: Outbox, group: number, replica: number, body: AnyRequestBody, timeoutMs: number): number {
    const request = outbox.id(out);
    out.actions.push({ type: 'send', request, group, replica, body, timeoutMs: Math.max(0, timeoutMs) });
    return request;
  },

  notify(out: Outbox, replica: number, body: AnyRequestBody, timeoutMs: number): void {
    out.actions.push({ type: 'notify', replica, body, timeoutMs });
  },

  abandon(out: Outbox, group: number): void {
    out.actions.push({ type: 'abandon', group });
  },

  setTimer(out: Outbox, ms: number): number {
    const timer = outbox.id(out);
    out.actions.push({ type: 'set_timer', timer, ms: Math.max(0, ms) });
    return timer;
  },

  clearTimer(out: Outbox, timer: number | undefined): void {
    if (timer !== undefined) out.actions.push({ type: 'clear_timer', timer });
  },

  combine(out: Outbox, partials: PartialSet): void {
    const copy = {
      grant: partials.grant,
      held: partials.held.map((held) => ({ ...held })),
      rejected: [...partials.rejected],
    };
    out.actions.push({ type: 'combine', partials: copy });
  },
};

/** A call's core: started once, then stepped with each event until `result` is set. */
export interface CallCore<R> {
  start(at: number): CoreAction[];
  step(event: CoreEvent): CoreAction[];
  /** Set once the call has ended; no event changes it afterwards. */
  readonly result: R | undefined;
}
