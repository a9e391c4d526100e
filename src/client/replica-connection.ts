/**
 * One authenticated WebSocket connection to one replica, reconnecting with
 * jittered backoff, carrying requests and matching replies by id.
 *
 * Nothing the replica sends is trusted. A frame that fails decoding, a
 * challenge for another cluster or index, or a reply that does not fit its
 * request marks the replica faulty (reported through `onFault`), closes the
 * socket and reconnects; requests in flight on it resolve as `faulty`. Every
 * request resolves: with an answer, or on timeout, abort, or loss of the
 * connection. Nothing here throws at the caller for what a replica did.
 *
 * Here is the socket's life: open, the handshake's deadline, pings, failing,
 * dropping, backoff. The requests on it (ids, slots, queue, settling) are in
 * in-flight-requests.ts; reading the replica's messages, replica-messages.ts.
 */
import { WebSocket, type RawData } from 'ws';
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
}

export class ReplicaConnection implements ReplicaChannel {
  readonly index: number;
  readonly endpoint: string;
  readonly #context: ConnectionContext;
  #state: ConnectionState = INITIAL_CONNECTION_STATE;
  #socket: WebSocket | undefined;
  #handshakeTimer: TimerHandle;
  #retryTimer: TimerHandle;
  readonly #latency: ReplicaLatency;
  readonly #requests: InFlightRequests;
  /** What the replica's messages may read and do here (replica-messages.ts). */
  readonly #host: MessageHost;
  /** Pings sent on this connection (WebSocket ping frames, answered by the replica's WebSocket layer). */
  #pings = 0;
  #pingTimer: TimerHandle;

  constructor(replica: ReplicaInfo, context: ConnectionContext) {
    this.index = replica.index;
    this.endpoint = replica.endpoint;
    this.#context = context;
    this.#latency = new ReplicaLatency(context.turnTiming);
    this.#requests = new InFlightRequests(context.options, this.#latency, () => this.#socket);
    this.#host = {
      index: this.index,
      context,
      requests: this.#requests,
      latency: this.#latency,
      phase: () => this.#state.phase,
      send: (frame) => this.#socket!.send(frame),
      apply: (event) => this.#apply(event),
      welcomed: (event) => this.#welcomed(event),
      noteFloor: (outcome) => this.#noteFloor(outcome),
      fault: (kind, message) => this.#fault(kind, message),
      fail: (kind, message) => this.#fail(kind, message),
      dropSocket: (code, reason) => this.#dropSocket(code, reason),
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

  /** Opens the first connection. */
  start(): void {
    if (this.#state.phase === 'connecting' && !this.#socket) this.#open();
  }

  /** Closes for good; requests in flight resolve as `unreachable`. */
  close(): void {
    if (this.#state.phase === 'closed') return;
    this.#apply({ type: 'close' });
    this.#context.options.clock.clearTimeout(this.#handshakeTimer);
    this.#context.options.clock.clearTimeout(this.#retryTimer);
    this.#dropSocket(CloseCode.NORMAL, 'client closing');
    this.#requests.settleAll({ kind: 'unreachable', message: 'client closed' });
  }

  request<K extends RequestKind>(
    body: RequestBody<K>,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<ReplicaAnswer<K>> {
    if (signal?.aborted) return Promise.resolve({ kind: 'aborted' });
    const socket = this.#socket;
    if (this.#state.phase !== 'ready' || !socket || socket.readyState !== WebSocket.OPEN) {
      return Promise.resolve({ kind: 'unreachable', message: this.#describeDown() });
    }
    return this.#requests.open(body, timeoutMs, signal);
  }

  notify(body: RequestBody<'release'> & { readonly quiet: true }): boolean {
    const socket = this.#socket;
    if (this.#state.phase !== 'ready' || !socket || socket.readyState !== WebSocket.OPEN) return false;
    // An id of its own, so that an error frame about it (the replica still sends those) settles nothing here.
    socket.send(encodeMessage({ ...body, id: this.#requests.allocateId() }));
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
    let socket: WebSocket;
    try {
      socket = new WebSocket(this.endpoint, {
        perMessageDeflate: false,
        maxPayload: options.maxFrameBytes,
        handshakeTimeout: options.handshakeTimeoutMs,
      });
    } catch (error) {
      this.#fail('unreachable', (error as Error).message);
      return;
    }
    this.#socket = socket;
    // The whole handshake (TCP, HTTP upgrade, challenge, welcome) shares one deadline: a silent replica costs at most this.
    this.#handshakeTimer = options.clock.setTimeout(
      () => {
        if (this.#socket === socket && this.#state.phase !== 'ready')
          this.#fail('handshake_timeout', `no welcome within ${options.handshakeTimeoutMs} ms`);
      },
      options.handshakeTimeoutMs,
      { unref: true },
    );
    socket.on('open', () => {
      if (this.#socket === socket) this.#apply({ type: 'socket_open' });
    });
    socket.on('message', (data: RawData, isBinary: boolean) => {
      if (this.#socket === socket) readFrame(this.#host, data, isBinary);
    });
    socket.on('pong', (data: Buffer) => {
      if (this.#socket === socket)
        this.#latency.answered(`p${data.toString('latin1').slice(0, 12)}`, options.clock.now());
    });
    socket.on('error', (error: Error) => {
      if (this.#socket !== socket) return;
      this.#fail(this.#state.phase === 'connecting' ? 'unreachable' : 'closed', error.message);
    });
    socket.on('close', (code: number, reason: Buffer) => {
      if (this.#socket !== socket) return;
      this.#fail(
        'closed',
        `closed by the replica (${code}${reason.length ? ` ${reason.toString('utf8').slice(0, 100)}` : ''})`,
      );
    });
  }

  /** The handshake is over (a welcome that fits): no more deadline, ready, and pinging from now on. */
  #welcomed(event: ConnectionEvent): void {
    this.#context.options.clock.clearTimeout(this.#handshakeTimer);
    this.#apply(event);
    this.#pingLater(this.#socket!);
  }

  /**
   * Pings the replica every pingIntervalMs while the connection is ready: a replica that hangs (SIGSTOP, a long pause)
   * answers nothing, and its unanswered ping ages (replica-latency.ts), so acquires leave it out within a ping or two
   * even when this client has nothing else in flight to it. The replica's WebSocket layer answers (a pong), so a
   * ping says the process runs and how far away it is, and nothing about how it treats requests.
   */
  #pingLater(socket: WebSocket): void {
    const { clock, pingIntervalMs } = this.#context.options;
    if (pingIntervalMs <= 0) return;
    clock.clearTimeout(this.#pingTimer);
    this.#pingTimer = clock.setTimeout(
      () => {
        if (this.#socket !== socket || this.#state.phase !== 'ready' || socket.readyState !== WebSocket.OPEN) return;
        const ping = ++this.#pings;
        this.#latency.sent(`p${ping}`, { kind: 'ping' }, clock.now());
        socket.ping(Buffer.from(String(ping)));
        this.#pingLater(socket);
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
    this.#dropSocket(CloseCode.PROTOCOL_ERROR, kind);
    this.#fail(kind === 'invalid_reply' ? 'protocol' : kind, message);
  }

  #fail(kind: ConnectionFailure, message: string): void {
    if (this.#state.phase === 'closed' || this.#state.phase === 'backoff') return;
    this.#context.options.clock.clearTimeout(this.#handshakeTimer);
    this.#dropSocket(isFaultFailure(kind) ? CloseCode.PROTOCOL_ERROR : CloseCode.NORMAL, kind);
    this.#requests.settleAll({
      kind: 'unreachable',
      message: `connection to replica ${this.index} lost (${kind}: ${message})`,
    });
    this.#apply({ type: 'failed', kind, message });
  }

  #dropSocket(code: number, reason: string): void {
    const socket = this.#socket;
    if (!socket) return;
    this.#socket = undefined;
    this.#context.options.clock.clearTimeout(this.#pingTimer);
    socket.removeAllListeners();
    // Late errors from a socket we already gave up on must not become uncaught exceptions.
    socket.on('error', () => {});
    try {
      if (socket.readyState === WebSocket.OPEN) {
        socket.close(code, reason);
        // A replica that never answers the close handshake must not keep the socket open.
        setTimeout(() => socket.terminate(), 1000).unref();
      } else {
        socket.terminate();
      }
    } catch {
      // Closing a socket that is already going away: nothing left to do.
    }
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
