/**
 * One authenticated connection to one replica, reconnecting with jittered
 * backoff, carrying requests and matching replies by id. The link under it is
 * a transport's (replica-transport.ts): the SDK's WebSocket by default, the
 * simulator's simulated network in seeded runs; all timers run on the
 * options' clock.
 *
 * Nothing the replica sends is trusted. A frame that fails decoding, a
 * challenge for another cluster or index, or a reply that does not fit its
 * request marks the replica faulty (reported through `onFault`), closes the
 * link and reconnects; requests in flight on it resolve as `faulty`. Every
 * request resolves: with an answer, or on timeout, abort, or loss of the
 * connection. Nothing here throws at the caller for what a replica did.
 *
 * Here is the link's life: open, the handshake's deadline, pings, failing,
 * dropping, backoff. The requests on it (ids, slots, queue, settling) are in
 * in-flight-requests.ts; reading the replica's messages, replica-messages.ts.
 */
import type { TimerHandle } from '../common/clock.js';
import type { ReplicaInfo } from '../cluster/description.js';
import { encodeMessage } from '../protocol/codec.js';
import { CloseCode, type OutcomeByRequest } from '../protocol/messages.js';
import { backoffDelay } from './backoff.js';
import {
  INITIAL_CONNECTION_STATE,
  isFaultFailure,
  transition,
  type ConnectionEvent,
  type ConnectionFailure,
  type ConnectionState,
} from './connection-state.js';
import type { ReplicaFault } from './evidence.js';
import { InFlightRequests } from './in-flight-requests.js';
import type { ReplicaAnswer, ReplicaChannel, RequestBody, RequestKind } from './replica-channel.js';
import { ReplicaLatency } from './replica-latency.js';
import { readFrame, type MessageHost } from './replica-messages.js';
import type { TurnTiming } from './turn-timing.js';
import type { Identity } from './identity.js';
import type { ClientOptions } from './options.js';
import type { ReplicaLink, ReplicaTransport } from './replica-transport.js';
import { webSocketTransport } from './ws-transport.js';

export interface ConnectionContext {
  readonly clusterId: Uint8Array;
  readonly identity: Identity;
  /** The client session the hello names (docs/protocol.md, "Sessions"). */
  readonly session: Uint8Array;
  readonly options: ClientOptions;
  /** Called after every state change (ready, down, pending). */
  readonly onChange: (connection: ReplicaConnection) => void;
  /** Called when the replica misbehaves. */
  readonly onFault: (fault: ReplicaFault) => void;
  /** Called when the replica says the holder of `resource` released it (a hint to retry; proves nothing). */
  readonly onReleased?: (replica: number, resource: string) => void;
  /** Called when the replica says our waiting acquire of `resource` is next in its line, at `epoch` (a hint). */
  readonly onTurn?: (replica: number, resource: string, epoch: bigint) => void;
  /** The client's record of who granted each line's turn when, shared by its connections (turn-timing.ts). */
  readonly turnTiming?: TurnTiming;
  /** The links' transport; default the SDK's WebSocket (ws-transport.ts). The simulator passes its own. */
  readonly transport?: ReplicaTransport;
}

export class ReplicaConnection implements ReplicaChannel {
  readonly index: number;
  readonly endpoint: string;
  readonly #context: ConnectionContext;
  #state: ConnectionState = INITIAL_CONNECTION_STATE;
  #link: ReplicaLink | undefined;
  #handshakeTimer: TimerHandle;
  #retryTimer: TimerHandle;
  readonly #latency: ReplicaLatency;
  readonly #requests: InFlightRequests;
  /** What the replica's messages may read and do here (replica-messages.ts). */
  readonly #host: MessageHost;
  /** Pings sent on this connection (transport pings, answered by the replica's WebSocket layer). */
  #pings = 0;
  #pingTimer: TimerHandle;

  constructor(replica: Pick<ReplicaInfo, 'index' | 'endpoint'>, context: ConnectionContext) {
    this.index = replica.index;
    this.endpoint = replica.endpoint;
    this.#context = context;
    this.#latency = new ReplicaLatency(context.turnTiming);
    this.#requests = new InFlightRequests(context.options, this.#latency, () => this.#link);
    this.#host = {
      index: this.index,
      context,
      requests: this.#requests,
      latency: this.#latency,
      phase: () => this.#state.phase,
      send: (frame) => this.#link?.send(frame),
      apply: (event) => this.#apply(event),
      welcomed: (event) => this.#welcomed(event),
      noteFloor: (outcome) => this.#noteFloor(outcome),
      fault: (kind, message) => this.#fault(kind, message),
      fail: (kind, message) => this.#fail(kind, message),
      dropLink: (code, reason) => this.#dropLink(code, reason),
    };
  }

  get state(): ConnectionState {
    return this.#state;
  }

  get latencyMs(): number | undefined {
    return this.#latency.estimateMs(this.#context.options.clock.now());
  }

  get lineLatencyMs(): number | undefined {
    return this.#latency.lineEstimateMs(this.#context.options.clock.now());
  }

  get probeDue(): boolean {
    return this.#latency.probeDue(this.#context.options.clock.now());
  }

  get missedTurn(): boolean {
    return this.#latency.missedTurn;
  }

  /** Requests open on it now, sent or queued for a slot. */
  get openRequests(): number {
    return this.#requests.size;
  }

  /** Opens the first connection. */
  start(): void {
    if (this.#state.phase === 'connecting' && !this.#link) this.#open();
  }

  /** Closes for good; requests in flight resolve as `unreachable`. */
  close(): void {
    if (this.#state.phase === 'closed') return;
    this.#apply({ type: 'close' });
    this.#context.options.clock.clearTimeout(this.#handshakeTimer);
    this.#context.options.clock.clearTimeout(this.#retryTimer);
    this.#dropLink(CloseCode.NORMAL, 'client closing');
    this.#requests.settleAll({ kind: 'unreachable', message: 'client closed' });
  }

  request<K extends RequestKind>(
    body: RequestBody<K>,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<ReplicaAnswer<K>> {
    if (signal?.aborted) return Promise.resolve({ kind: 'aborted' });
    const link = this.#link;
    if (this.#state.phase !== 'ready' || !link?.isOpen) {
      return Promise.resolve({ kind: 'unreachable', message: this.#describeDown() });
    }
    return this.#requests.open(body, timeoutMs, signal);
  }

  notify(body: RequestBody<'release'> & { readonly quiet: true }): boolean {
    const link = this.#link;
    if (this.#state.phase !== 'ready' || !link?.isOpen) return false;
    // An id of its own, so that an error frame about it (the replica still sends those) settles nothing here.
    link.send(encodeMessage({ ...body, id: this.#requests.allocateId() }));
    return true;
  }

  #describeDown(): string {
    const failure = this.#state.lastFailure;
    if (this.#state.phase === 'closed') return 'connection closed';
    if (failure) return `replica ${this.index} not connected (${failure.kind}: ${failure.message})`;
    return `replica ${this.index} not connected yet (${this.#state.phase})`;
  }

  #apply(event: ConnectionEvent): void {
    const before = this.#state;
    this.#state = transition(before, event);
    if (this.#state === before) return;
    if (this.#state.phase === 'backoff') this.#scheduleRetry();
    this.#context.onChange(this);
  }

  #open(): void {
    const options = this.#context.options;
    const transport = this.#context.transport ?? webSocketTransport;
    const limits = { maxFrameBytes: options.maxFrameBytes, handshakeTimeoutMs: options.handshakeTimeoutMs };
    let link: ReplicaLink | undefined = undefined;
    try {
      link = transport.connect(this.endpoint, limits, {
        open: () => {
          if (this.#link === link) this.#apply({ type: 'socket_open' });
        },
        frame: (data) => {
          if (this.#link === link) readFrame(this.#host, data);
        },
        pong: (data) => {
          if (this.#link === link)
            this.#latency.answered(`p${Buffer.from(data).toString('latin1').slice(0, 12)}`, options.clock.now());
        },
        error: (message) => {
          if (this.#link !== link) return;
          this.#fail(this.#state.phase === 'connecting' ? 'unreachable' : 'closed', message);
        },
        close: (code, reason) => {
          if (this.#link !== link) return;
          this.#fail('closed', `closed by the replica (${code}${reason.length ? ` ${reason.slice(0, 100)}` : ''})`);
        },
      });
    } catch (error) {
      this.#fail('unreachable', (error as Error).message);
      return;
    }
    this.#link = link;
    // The whole handshake (TCP, HTTP upgrade, challenge, welcome) shares one deadline: a silent replica costs at most this.
    this.#handshakeTimer = options.clock.setTimeout(
      () => {
        if (this.#link === link && this.#state.phase !== 'ready')
          this.#fail('handshake_timeout', `no welcome within ${options.handshakeTimeoutMs} ms`);
      },
      options.handshakeTimeoutMs,
      { unref: true },
    );
  }

  /** The handshake is over (a welcome that fits): no more deadline, ready, and pinging from now on. */
  #welcomed(event: ConnectionEvent): void {
    this.#context.options.clock.clearTimeout(this.#handshakeTimer);
    this.#apply(event);
    this.#pingLater(this.#link!);
  }

  /**
   * Pings the replica every pingIntervalMs while the connection is ready: a replica that hangs (SIGSTOP, a long pause)
   * answers nothing, and its unanswered ping ages (replica-latency.ts), so acquires leave it out within a ping or two
   * even when this client has nothing else in flight to it. The replica's WebSocket layer answers (a pong), so a
   * ping says the process runs and how far away it is, and nothing about how it treats requests.
   */
  #pingLater(link: ReplicaLink): void {
    const { clock, pingIntervalMs } = this.#context.options;
    if (pingIntervalMs <= 0) return;
    clock.clearTimeout(this.#pingTimer);
    this.#pingTimer = clock.setTimeout(
      () => {
        if (this.#link !== link || this.#state.phase !== 'ready' || !link.isOpen) return;
        const ping = ++this.#pings;
        this.#latency.sent(`p${ping}`, { kind: 'ping' }, clock.now());
        link.ping(Buffer.from(String(ping)));
        this.#pingLater(link);
      },
      pingIntervalMs,
      { unref: true },
    );
  }

  /**
   * An acquire's answer names the replica's floor (when above 0): kept for the next first acquire's epoch. Not a
   * state change anyone waits on, so nobody is told (onChange).
   */
  #noteFloor(outcome: OutcomeByRequest[RequestKind]): void {
    if ('floor' in outcome && outcome.floor !== undefined)
      this.#state = transition(this.#state, { type: 'floor', floor: outcome.floor });
  }

  /** The replica broke the protocol: report it, drop the connection, fail what is in flight, reconnect later. */
  #fault(kind: 'protocol' | 'bad_challenge' | 'invalid_reply', message: string): void {
    this.#context.onFault({ replica: this.index, kind, message });
    this.#requests.settleAll({ kind: 'faulty', message });
    this.#dropLink(CloseCode.PROTOCOL_ERROR, kind);
    this.#fail(kind === 'invalid_reply' ? 'protocol' : kind, message);
  }

  #fail(kind: ConnectionFailure, message: string): void {
    if (this.#state.phase === 'closed' || this.#state.phase === 'backoff') return;
    this.#context.options.clock.clearTimeout(this.#handshakeTimer);
    this.#dropLink(isFaultFailure(kind) ? CloseCode.PROTOCOL_ERROR : CloseCode.NORMAL, kind);
    this.#requests.settleAll({
      kind: 'unreachable',
      message: `connection to replica ${this.index} lost (${kind}: ${message})`,
    });
    this.#apply({ type: 'failed', kind, message });
  }

  #dropLink(code: number, reason: string): void {
    const link = this.#link;
    if (!link) return;
    this.#link = undefined;
    this.#context.options.clock.clearTimeout(this.#pingTimer);
    link.close(code, reason);
  }

  #scheduleRetry(): void {
    const { reconnectBaseMs, reconnectMaxMs, random } = this.#context.options;
    const delay = backoffDelay(this.#state.failures - 1, { baseMs: reconnectBaseMs, maxMs: reconnectMaxMs }, random());
    this.#context.options.clock.clearTimeout(this.#retryTimer);
    // Reconnecting alone is no reason to keep a process alive (unref).
    this.#retryTimer = this.#context.options.clock.setTimeout(
      () => {
        this.#apply({ type: 'retry' });
        if (this.#state.phase === 'connecting') this.#open();
      },
      delay,
      { unref: true },
    );
  }
}
