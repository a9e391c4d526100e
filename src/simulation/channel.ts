/**
 * A simulated client's connection to one replica: the same `ReplicaChannel` the SDK's driver uses
 * (src/client/drive.ts), over the simulated network. It follows the SDK's connection rules (the pure state
 * machine of src/client/connection-state.ts): a handshake with a deadline, requests that each end in an answer,
 * a timeout, an abort or the loss of the connection; a frame that breaks the protocol marks the replica faulty,
 * fails what is in flight and drops the connection; a dropped connection reconnects after jittered backoff.
 */
import { QuorumFenceError } from '../common/errors.js';
import { backoffDelay } from '../client/backoff.js';
import {
  INITIAL_CONNECTION_STATE,
  transition,
  type ConnectionEvent,
  type ConnectionFailure,
  type ConnectionState,
} from '../client/connection-state.js';
import type { ClientOptions } from '../client/options.js';
import type { ReplicaAnswer, ReplicaChannel, RequestBody, RequestKind } from '../client/replica-channel.js';
import { measureOf, ReplicaLatency } from '../client/replica-latency.js';
import type { TurnTiming } from '../client/turn-timing.js';
import type { TimerHandle } from '../common/clock.js';
import { decodeServerMessage, parseOutcome } from '../protocol/codec.js';
import type { OutcomeByRequest, ServerMessage, WireRequest } from '../protocol/messages.js';
import type { NodeClock } from './clock.js';
import type { SimNetwork } from './network.js';
import { describeRequest, type ToClient, type ToReplica } from './wire.js';

export interface ChannelHost {
  readonly address: string;
  readonly network: SimNetwork;
  readonly clock: NodeClock;
  readonly options: ClientOptions;
  readonly holder: Uint8Array;
  /** The client session its hello names (docs/protocol.md, "Sessions"). */
  readonly session: Uint8Array;
  /** A mutation (mutations.ts): the floors replicas name are not kept. */
  readonly forgetsFloors?: boolean;
  /** A mutation (mutations.ts): the connection reports no latency, so acquires choose signers blind to it. */
  readonly blindToLatency?: boolean;
  /** A mutation (mutations.ts): a line's keeper is judged by its answer time as a signer, not by its pongs. */
  readonly leaderByAnswers?: boolean;
  /** The client's record of who granted each line's turn when (turn-timing.ts). */
  readonly turnTiming?: TurnTiming;
  /** Any connection changed state. */
  onChange(): void;
  onReleased(resource: string): void;
  onTurn(replica: number, resource: string, epoch: bigint): void;
  /** The replica broke the protocol. */
  onFault(replica: number, message: string): void;
}

interface InFlight {
  readonly kind: RequestKind;
  readonly resolve: (answer: ReplicaAnswer<RequestKind>) => void;
  readonly timer: TimerHandle;
  readonly detach: () => void;
}

export class SimChannel implements ReplicaChannel {
  readonly index: number;
  readonly #replica: string;
  readonly #host: ChannelHost;
  #state: ConnectionState = INITIAL_CONNECTION_STATE;
  /** The current connection's number; messages of earlier ones are ignored. */
  #conn = 0;
  #nextId = 1;
  readonly #inFlight = new Map<number, InFlight>();
  readonly #latency: ReplicaLatency;
  #pings = 0;
  #pingTimer: TimerHandle;
  #quiet = false;
  #handshakeTimer: TimerHandle;
  #retryTimer: TimerHandle;

  constructor(index: number, replicaAddress: string, host: ChannelHost) {
    this.index = index;
    this.#replica = replicaAddress;
    this.#host = host;
    this.#latency = new ReplicaLatency(host.turnTiming);
  }

  get replicaAddress(): string {
    return this.#replica;
  }

  get state(): ConnectionState {
    return this.#state;
  }

  get latencyMs(): number | undefined {
    return this.#host.blindToLatency ? undefined : this.#latency.estimateMs(this.#host.clock.now());
  }

  get lineLatencyMs(): number | undefined {
    if (this.#host.blindToLatency) return undefined;
    const now = this.#host.clock.now();
    return this.#host.leaderByAnswers ? this.#latency.estimateMs(now) : this.#latency.lineEstimateMs(now);
  }

  get probeDue(): boolean {
    return !this.#host.blindToLatency && this.#latency.probeDue(this.#host.clock.now());
  }

  /** Requests open now (for the bounded-state check). */
  get open(): number {
    return this.#inFlight.size;
  }

  start(): void {
    this.#open();
  }

  /** Closes for good (the run is over). */
  close(): void {
    if (this.#state.phase === 'ready') this.#send({ kind: 'close', conn: this.#conn }, 'close');
    this.#apply({ type: 'close' });
    this.#host.clock.clearTimeout(this.#handshakeTimer);
    this.#host.clock.clearTimeout(this.#retryTimer);
    this.#host.clock.clearTimeout(this.#pingTimer);
    this.#settleAll({ kind: 'unreachable', message: 'client closed' });
  }

  request<K extends RequestKind>(
    body: RequestBody<K>,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<ReplicaAnswer<K>> {
    if (signal?.aborted) return Promise.resolve({ kind: 'aborted' });
    if (this.#state.phase !== 'ready')
      return Promise.resolve({
        kind: 'unreachable',
        message: `replica ${this.index} not connected (${this.#state.phase})`,
      });
    const id = this.#nextId++;
    const request = { ...body, id } as unknown as WireRequest;
    return new Promise<ReplicaAnswer<K>>((resolve) => {
      const onAbort = () => this.#settle(id, { kind: 'aborted' });
      signal?.addEventListener('abort', onAbort, { once: true });
      const timer = this.#host.clock.setTimeout(() => this.#settle(id, { kind: 'timeout' }), Math.max(0, timeoutMs));
      this.#inFlight.set(id, {
        kind: body.type,
        resolve: resolve as (answer: ReplicaAnswer<RequestKind>) => void,
        timer,
        detach: () => signal?.removeEventListener('abort', onAbort),
      });
      this.#latency.sent(`r${id}`, measureOf(body), this.#host.clock.now());
      this.#send({ kind: 'request', conn: this.#conn, request }, describeRequest(request));
    });
  }

  notify(body: RequestBody<'release'> & { readonly quiet: true }): boolean {
    if (this.#state.phase !== 'ready') return false;
    const request = { ...body, id: this.#nextId++ } as WireRequest;
    this.#send({ kind: 'request', conn: this.#conn, request }, describeRequest(request));
    return true;
  }

  /** A message from the replica. */
  receive(message: ToClient): void {
    if (message.conn !== this.#conn || this.#state.phase === 'closed') return;
    switch (message.kind) {
      case 'welcome':
        if (this.#state.phase !== 'connecting') return;
        this.#host.clock.clearTimeout(this.#handshakeTimer);
        for (const type of ['socket_open', 'challenge_accepted'] as const) this.#apply({ type });
        this.#apply(
          message.floor > 0n && !this.#host.forgetsFloors
            ? { type: 'welcome', floor: message.floor }
            : { type: 'welcome' },
        );
        this.#pingLater(message.conn);
        return;
      case 'closed':
        return this.#fail('closed', 'closed by the replica');
      case 'pong':
        return this.#latency.answered(`p${message.ping}`, this.#host.clock.now());
      case 'message':
        return this.#onMessage(message.message, false);
      case 'frame':
        return this.#onFrame(message.frame);
    }
  }

  #onFrame(frame: Uint8Array | string): void {
    if (typeof frame === 'string') return this.#fault('a text frame (only binary frames are spoken)');
    let message: ServerMessage;
    try {
      message = decodeServerMessage(frame, this.#host.options.maxFrameBytes);
    } catch (error) {
      return this.#fault(error instanceof QuorumFenceError ? error.message : String(error));
    }
    this.#onMessage(message, true);
  }

  /** `decoded`: the message came as a frame, so its outcome is checked against the request (parseOutcome). */
  #onMessage(message: ServerMessage, decoded: boolean): void {
    if (this.#state.phase !== 'ready') return;
    // As the SDK's connection does: every answer, late ones included, says how fast the replica is.
    if (message.type === 'reply' || (message.type === 'error' && message.id !== undefined))
      this.#latency.answered(
        `r${message.id!}`,
        this.#host.clock.now(),
        message.type === 'reply' ? message.outcome : undefined,
      );
    switch (message.type) {
      case 'reply': {
        const entry = this.#inFlight.get(message.id);
        if (!entry) return; // late, not wrong
        let outcome: OutcomeByRequest[RequestKind];
        try {
          outcome = decoded
            ? parseOutcome(entry.kind, message.outcome)
            : (message.outcome as unknown as OutcomeByRequest[RequestKind]);
        } catch (error) {
          const text = error instanceof QuorumFenceError ? error.message : String(error);
          this.#settle(message.id, { kind: 'faulty', message: text });
          return this.#fault(text);
        }
        // As the SDK's connection does (replica-connection.ts): an acquire answer's floor is kept, nobody told.
        if ('floor' in outcome && outcome.floor !== undefined && !this.#host.forgetsFloors)
          this.#state = transition(this.#state, { type: 'floor', floor: outcome.floor });
        return this.#settle(message.id, { kind: 'reply', outcome } as ReplicaAnswer<RequestKind>);
      }
      case 'error':
        if (message.id !== undefined)
          this.#settle(message.id, { kind: 'error', code: message.code, message: message.message });
        return;
      case 'released':
        return this.#host.onReleased(message.resource);
      case 'turn':
        return this.#host.onTurn(this.index, message.resource, message.epoch);
      default:
        return this.#fault(`an unexpected ${message.type} after the handshake`);
    }
  }

  #open(): void {
    const conn = ++this.#conn;
    this.#send({ kind: 'open', conn, holder: this.#host.holder, session: this.#host.session }, 'open');
    this.#handshakeTimer = this.#host.clock.setTimeout(() => {
      if (this.#conn === conn && this.#state.phase !== 'ready')
        this.#fail('handshake_timeout', `no welcome within ${this.#host.options.handshakeTimeoutMs} ms`);
    }, this.#host.options.handshakeTimeoutMs);
  }

  /**
   * The client is done: no more pings (a real client pings until it closes, but a run's quiet period must end with
   * nothing in flight, for the bounded-state check).
   */
  quiesce(): void {
    this.#quiet = true;
    this.#host.clock.clearTimeout(this.#pingTimer);
  }

  /** As the SDK's connection does (replica-connection.ts): a ping every pingIntervalMs while the connection is ready. */
  #pingLater(conn: number): void {
    const { pingIntervalMs } = this.#host.options;
    if (pingIntervalMs <= 0 || this.#quiet) return;
    this.#host.clock.clearTimeout(this.#pingTimer);
    this.#pingTimer = this.#host.clock.setTimeout(() => {
      if (this.#conn !== conn || this.#state.phase !== 'ready') return;
      const ping = ++this.#pings;
      this.#latency.sent(`p${ping}`, { kind: 'ping' }, this.#host.clock.now());
      this.#send({ kind: 'ping', conn, ping }, `ping#${ping}`);
      this.#pingLater(conn);
    }, pingIntervalMs);
  }

  #send(message: ToReplica, label: string): void {
    this.#host.network.send(this.#host.address, this.#replica, message, label);
  }

  #fault(message: string): void {
    this.#host.onFault(this.index, message);
    this.#settleAll({ kind: 'faulty', message });
    this.#send({ kind: 'close', conn: this.#conn }, 'close');
    this.#fail('protocol', message);
  }

  #fail(kind: ConnectionFailure, message: string): void {
    if (this.#state.phase === 'closed' || this.#state.phase === 'backoff') return;
    this.#host.clock.clearTimeout(this.#handshakeTimer);
    this.#host.clock.clearTimeout(this.#pingTimer);
    this.#settleAll({ kind: 'unreachable', message: `connection to replica ${this.index} lost (${kind}: ${message})` });
    this.#apply({ type: 'failed', kind, message });
  }

  #settle(id: number, answer: ReplicaAnswer<RequestKind>): void {
    const entry = this.#inFlight.get(id);
    if (!entry) return;
    this.#inFlight.delete(id);
    this.#host.clock.clearTimeout(entry.timer);
    entry.detach();
    entry.resolve(answer);
  }

  #settleAll(answer: ReplicaAnswer<RequestKind>): void {
    this.#latency.lost();
    for (const id of [...this.#inFlight.keys()]) this.#settle(id, answer);
  }

  #apply(event: ConnectionEvent): void {
    const before = this.#state;
    this.#state = transition(before, event);
    if (this.#state === before) return;
    if (this.#state.phase === 'backoff') this.#scheduleRetry();
    this.#host.onChange();
  }

  #scheduleRetry(): void {
    const { reconnectBaseMs, reconnectMaxMs, random } = this.#host.options;
    const delay = backoffDelay(this.#state.failures - 1, { baseMs: reconnectBaseMs, maxMs: reconnectMaxMs }, random());
    this.#host.clock.clearTimeout(this.#retryTimer);
    this.#retryTimer = this.#host.clock.setTimeout(() => {
      this.#apply({ type: 'retry' });
      if (this.#state.phase === 'connecting') this.#open();
    }, delay);
  }
}
