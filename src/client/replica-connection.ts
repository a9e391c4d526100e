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
 */
import { WebSocket, type RawData } from 'ws';
import { bytesEqual } from '../common/bytes.js';
import { QuorumFenceError } from '../common/errors.js';
import type { TimerHandle } from '../common/clock.js';
import type { ReplicaInfo } from '../cluster/description.js';
import { decodeServerMessage, encodeMessage, parseOutcome } from '../protocol/codec.js';
import {
  CloseCode,
  authTranscript,
  type ClientMessage,
  type OutcomeByRequest,
  type ServerMessage,
} from '../protocol/messages.js';
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
import type { ReplicaAnswer, ReplicaChannel, RequestBody, RequestKind } from './replica-channel.js';
import { measureOf, ReplicaLatency, type Measure } from './replica-latency.js';
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

interface InFlight {
  readonly kind: RequestKind;
  readonly resolve: (answer: ReplicaAnswer<RequestKind>) => void;
  readonly timer: TimerHandle;
  readonly detach: () => void;
  /** The encoded request while it waits for a free slot; undefined once sent. */
  frame: Uint8Array | undefined;
  /** What its answer time says of the replica (replica-latency.ts); undefined: nothing (it may wait on purpose). */
  readonly measure: Measure;
}

const HELLO_ID = 0;
const MAX_REQUEST_ID = 0xffff_ffff;

export class ReplicaConnection implements ReplicaChannel {
  readonly index: number;
  readonly endpoint: string;
  readonly #context: ConnectionContext;
  #state: ConnectionState = INITIAL_CONNECTION_STATE;
  #socket: WebSocket | undefined;
  #handshakeTimer: TimerHandle;
  #retryTimer: TimerHandle;
  #nextId = HELLO_ID + 1;
  /** Every open request, sent or waiting for a slot, by id. */
  readonly #inFlight = new Map<number, InFlight>();
  /** Ids waiting for a slot, oldest first (the replica bounds requests in flight per connection). */
  readonly #waiting: number[] = [];
  #sent = 0;
  readonly #latency: ReplicaLatency;
  /** Pings sent on this connection (WebSocket ping frames, answered by the replica's WebSocket layer). */
  #pings = 0;
  #pingTimer: TimerHandle;

  constructor(replica: ReplicaInfo, context: ConnectionContext) {
    this.index = replica.index;
    this.endpoint = replica.endpoint;
    this.#context = context;
    this.#latency = new ReplicaLatency(context.turnTiming);
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
    this.#settleAll({ kind: 'unreachable', message: 'client closed' });
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
    const { maxInFlightPerReplica, maxQueuedPerReplica } = this.#context.options;
    if (this.#waiting.length >= maxQueuedPerReplica) {
      return Promise.resolve({
        kind: 'error',
        code: 'RATE_LIMITED',
        message: 'too many requests queued on this connection (client limit)',
      });
    }
    const id = this.#allocateId();
    return new Promise<ReplicaAnswer<K>>((resolve) => {
      const onAbort = () => this.#settle(id, { kind: 'aborted' });
      signal?.addEventListener('abort', onAbort, { once: true });
      // The timeout counts from the call, queueing included: the caller's deadline is what matters.
      const timer = this.#context.options.clock.setTimeout(
        () => this.#settle(id, { kind: 'timeout' }),
        Math.max(0, timeoutMs),
      );
      const frame = encodeMessage({ ...body, id } as unknown as ClientMessage);
      this.#inFlight.set(id, {
        kind: body.type,
        resolve: resolve as (answer: ReplicaAnswer<RequestKind>) => void,
        timer,
        detach: () => signal?.removeEventListener('abort', onAbort),
        frame,
        measure: measureOf(body),
      });
      if (this.#sent < maxInFlightPerReplica) this.#transmit(id);
      else this.#waiting.push(id);
    });
  }

  notify(body: RequestBody<'release'> & { readonly quiet: true }): boolean {
    const socket = this.#socket;
    if (this.#state.phase !== 'ready' || !socket || socket.readyState !== WebSocket.OPEN) return false;
    // An id of its own, so that an error frame about it (the replica still sends those) settles nothing here.
    socket.send(encodeMessage({ ...body, id: this.#allocateId() }));
    return true;
  }

  #transmit(id: number): void {
    const entry = this.#inFlight.get(id);
    const socket = this.#socket;
    if (!entry || !entry.frame || !socket || socket.readyState !== WebSocket.OPEN) return;
    socket.send(entry.frame);
    entry.frame = undefined;
    this.#sent++;
    this.#latency.sent(`r${id}`, entry.measure, this.#context.options.clock.now());
  }

  /** Sends queued requests while slots are free. */
  #pump(): void {
    const max = this.#context.options.maxInFlightPerReplica;
    while (this.#sent < max && this.#waiting.length > 0) {
      const id = this.#waiting.shift()!;
      if (this.#inFlight.has(id)) this.#transmit(id);
    }
  }

  #describeDown(): string {
    const failure = this.#state.lastFailure;
    if (this.#state.phase === 'closed') return 'connection closed';
    if (failure) return `replica ${this.index} not connected (${failure.kind}: ${failure.message})`;
    return `replica ${this.index} not connected yet (${this.#state.phase})`;
  }

  #allocateId(): number {
    // Ids wrap at 2^32; skipping ids still in flight keeps replies unambiguous.
    for (;;) {
      const id = this.#nextId;
      this.#nextId = id >= MAX_REQUEST_ID ? HELLO_ID + 1 : id + 1;
      if (!this.#inFlight.has(id)) return id;
    }
  }

  #settle(id: number, answer: ReplicaAnswer<RequestKind>): void {
    const entry = this.#inFlight.get(id);
    if (!entry) return;
    this.#inFlight.delete(id);
    this.#context.options.clock.clearTimeout(entry.timer);
    entry.detach();
    if (entry.frame === undefined) {
      this.#sent--;
      this.#pump();
    } else {
      const position = this.#waiting.indexOf(id);
      if (position >= 0) this.#waiting.splice(position, 1);
    }
    entry.resolve(answer);
  }

  #settleAll(answer: ReplicaAnswer<RequestKind>): void {
    this.#latency.lost();
    // Queued ones first, so that freeing slots does not send them on a connection that is going away.
    for (const id of this.#waiting.splice(0)) this.#settle(id, answer);
    for (const id of [...this.#inFlight.keys()]) this.#settle(id, answer);
    this.#sent = 0;
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
      if (this.#socket === socket) this.#onFrame(data, isBinary);
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

  #onFrame(data: RawData, isBinary: boolean): void {
    if (!isBinary) {
      this.#fault('protocol', 'a text frame (only binary frames are spoken)');
      return;
    }
    const frame = Array.isArray(data) ? Buffer.concat(data) : data instanceof ArrayBuffer ? new Uint8Array(data) : data;
    let message: ServerMessage;
    try {
      message = decodeServerMessage(frame, this.#context.options.maxFrameBytes);
    } catch (error) {
      this.#fault('protocol', error instanceof QuorumFenceError ? error.message : String(error));
      return;
    }
    switch (this.#state.phase) {
      case 'awaiting_challenge':
        this.#onChallenge(message);
        return;
      case 'awaiting_welcome':
        this.#onWelcome(message);
        return;
      case 'ready':
        this.#onReady(message);
        return;
      default:
        this.#fault('protocol', `a ${message.type} frame before the connection opened`);
    }
  }

  #onChallenge(message: ServerMessage): void {
    if (message.type !== 'challenge') {
      this.#fault('protocol', `expected a challenge, got ${message.type}`);
      return;
    }
    const { clusterId, identity, session } = this.#context;
    if (!bytesEqual(message.clusterId, clusterId)) {
      this.#fault('bad_challenge', 'the challenge names another cluster id');
      return;
    }
    if (message.replica !== this.index) {
      this.#fault('bad_challenge', `the challenge names replica ${message.replica}, expected ${this.index}`);
      return;
    }
    const signature = identity.sign(authTranscript(message.nonce, clusterId, this.index, session));
    this.#socket!.send(encodeMessage({ type: 'hello', id: HELLO_ID, holder: identity.publicKey, signature, session }));
    this.#apply({ type: 'challenge_accepted' });
  }

  #onWelcome(message: ServerMessage): void {
    if (message.type === 'error') {
      this.#fail('unauthenticated', `${message.code}: ${message.message}`);
      this.#dropSocket(CloseCode.NORMAL, 'authentication refused');
      return;
    }
    if (message.type !== 'welcome' || message.id !== HELLO_ID || message.replica !== this.index) {
      this.#fault(
        'protocol',
        message.type === 'welcome'
          ? 'a welcome with the wrong id or replica index'
          : `expected a welcome, got ${message.type}`,
      );
      return;
    }
    this.#context.options.clock.clearTimeout(this.#handshakeTimer);
    this.#apply(message.floor === undefined ? { type: 'welcome' } : { type: 'welcome', floor: message.floor });
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

  #onReady(message: ServerMessage): void {
    if (message.type === 'reply' || (message.type === 'error' && message.id !== undefined))
      this.#latency.answered(
        `r${message.id!}`,
        this.#context.options.clock.now(),
        message.type === 'reply' ? message.outcome : undefined,
      );
    if (message.type === 'reply') {
      const entry = this.#inFlight.get(message.id);
      // A reply to a request that timed out or was aborted: late, not wrong.
      if (!entry) return;
      let outcome: OutcomeByRequest[RequestKind];
      try {
        outcome = parseOutcome(entry.kind, message.outcome);
      } catch (error) {
        const text = error instanceof QuorumFenceError ? error.message : String(error);
        this.#settle(message.id, { kind: 'faulty', message: text });
        this.#fault('invalid_reply', text);
        return;
      }
      this.#noteFloor(outcome);
      this.#settle(message.id, { kind: 'reply', outcome });
      return;
    }
    if (message.type === 'error') {
      if (message.id !== undefined)
        this.#settle(message.id, { kind: 'error', code: message.code, message: message.message });
      return;
    }
    if (message.type === 'released') {
      this.#context.onReleased?.(this.index, message.resource);
      return;
    }
    if (message.type === 'turn') {
      this.#context.onTurn?.(this.index, message.resource, message.epoch);
      return;
    }
    this.#fault('protocol', `an unexpected ${message.type} after the handshake`);
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
    this.#settleAll({ kind: 'faulty', message });
    this.#dropSocket(CloseCode.PROTOCOL_ERROR, kind);
    this.#fail(kind === 'invalid_reply' ? 'protocol' : kind, message);
  }

  #fail(kind: ConnectionFailure, message: string): void {
    if (this.#state.phase === 'closed' || this.#state.phase === 'backoff') return;
    this.#context.options.clock.clearTimeout(this.#handshakeTimer);
    this.#dropSocket(isFaultFailure(kind) ? CloseCode.PROTOCOL_ERROR : CloseCode.NORMAL, kind);
    this.#settleAll({ kind: 'unreachable', message: `connection to replica ${this.index} lost (${kind}: ${message})` });
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
