/**
 * A minimal raw client of the replica protocol for tests: one WebSocket to
 * one replica, the challenge/hello handshake, requests matched to replies by
 * id, and access to every frame and the close code. It does no retrying, no
 * quorum logic and no verification: tests use it to speak to a replica
 * exactly (and, when they want, wrongly).
 */
import { ed25519 } from '@noble/curves/ed25519.js';
import { WebSocket } from 'ws';
import { decodeServerMessage, encodeMessage, parseOutcome } from '../../src/protocol/codec.js';
import {
  authTranscript,
  type AcquireOutcome,
  type Challenge,
  type ClientMessage,
  type ErrorMessage,
  type Hello,
  type OutcomeByRequest,
  type ServerMessage,
} from '../../src/protocol/messages.js';

export interface Holder {
  readonly secretKey: Uint8Array;
  /** Ed25519 public key: the holder id on the wire. */
  readonly publicKey: Uint8Array;
}

export function newHolder(): Holder {
  const { secretKey, publicKey } = ed25519.keygen();
  return { secretKey, publicKey };
}

/** A hello for `challenge` (or, to test replays and relays, for any nonce, cluster or index). */
export function helloFor(holder: Holder, challenge: Pick<Challenge, 'nonce' | 'clusterId' | 'replica'>, id = 0): Hello {
  const signature = ed25519.sign(
    authTranscript(challenge.nonce, challenge.clusterId, challenge.replica),
    holder.secretKey,
  );
  return { type: 'hello', id, holder: holder.publicKey, signature };
}

export interface Closed {
  readonly code: number;
  readonly reason: string;
}

/** What a replica answered to one request: its reply outcome, or an error frame. */
export type Answer<K extends keyof OutcomeByRequest> =
  { readonly outcome: OutcomeByRequest[K] } | { readonly error: ErrorMessage };

const DEFAULT_TIMEOUT_MS = 10_000;

export class RawClient {
  readonly socket: WebSocket;
  readonly challenge: Challenge;
  /** Resolves when the socket closes, with the close code the replica sent (1006 if none). */
  readonly closed: Promise<Closed>;
  holder: Holder | undefined;
  #nextId = 1;
  readonly #waiting = new Map<number, (message: ServerMessage) => void>();
  /** Frames nobody waited for by id, in arrival order. */
  readonly #inbox: ServerMessage[] = [];
  #inboxWaiter: (() => void) | undefined;
  #closedValue: Closed | undefined;

  private constructor(socket: WebSocket, challenge: Challenge, closed: Promise<Closed>) {
    this.socket = socket;
    this.challenge = challenge;
    this.closed = closed;
    void closed.then((c) => {
      this.#closedValue = c;
      this.#inboxWaiter?.();
    });
  }

  /** Connects and waits for the replica's challenge. Does not authenticate. */
  static connect(
    url: string,
    options: { timeoutMs?: number; ca?: string | Buffer; localAddress?: string } = {},
  ): Promise<RawClient> {
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(url, {
        perMessageDeflate: false,
        ...(options.ca ? { ca: options.ca } : {}),
        ...(options.localAddress ? { localAddress: options.localAddress } : {}),
      });
      socket.binaryType = 'nodebuffer';
      let client: RawClient | undefined;
      const closed = new Promise<Closed>((resolveClosed) =>
        socket.on('close', (code, reason) => resolveClosed({ code, reason: reason.toString() })),
      );
      const timer = setTimeout(() => {
        socket.terminate();
        reject(new Error(`no challenge from ${url} within ${options.timeoutMs ?? DEFAULT_TIMEOUT_MS} ms`));
      }, options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
      socket.on('error', (error) => {
        clearTimeout(timer);
        if (!client) reject(error);
      });
      void closed.then((c) => {
        clearTimeout(timer);
        if (!client) reject(new Error(`closed before the challenge: ${c.code} ${c.reason}`));
      });
      socket.on('message', (data: Buffer) => {
        const message = decodeServerMessage(new Uint8Array(data));
        if (!client) {
          clearTimeout(timer);
          if (message.type !== 'challenge') {
            socket.terminate();
            reject(new Error(`expected a challenge, got ${message.type}`));
            return;
          }
          client = new RawClient(socket, message, closed);
          resolve(client);
          return;
        }
        client.#deliver(message);
      });
    });
  }

  /** Connects and authenticates as `holder`. */
  static async open(
    url: string,
    holder: Holder = newHolder(),
    options: { timeoutMs?: number; ca?: string | Buffer; localAddress?: string } = {},
  ): Promise<RawClient> {
    const client = await RawClient.connect(url, options);
    const answer = await client.exchange(helloFor(holder, client.challenge, client.nextId()));
    if (answer.type !== 'welcome') {
      client.socket.terminate();
      throw new Error(`authentication refused: ${JSON.stringify(answer)}`);
    }
    client.holder = holder;
    return client;
  }

  #deliver(message: ServerMessage): void {
    const id = 'id' in message ? message.id : undefined;
    const waiter = id === undefined ? undefined : this.#waiting.get(id);
    if (waiter) {
      this.#waiting.delete(id!);
      waiter(message);
      return;
    }
    this.#inbox.push(message);
    this.#inboxWaiter?.();
  }

  nextId(): number {
    return this.#nextId++;
  }

  /** Sends bytes (or a text frame, for tests) as they are. */
  sendRaw(data: Uint8Array | string): void {
    this.socket.send(data, { binary: typeof data !== 'string' });
  }

  send(message: ClientMessage): void {
    this.sendRaw(encodeMessage(message));
  }

  /**
   * Sends a message with an id and resolves with the frame answering that id
   * (a welcome, reply or error); rejects if the socket closes first.
   */
  exchange(message: ClientMessage, timeoutMs = DEFAULT_TIMEOUT_MS): Promise<ServerMessage> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiting.delete(message.id);
        reject(new Error(`no answer to ${message.type} #${message.id} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#waiting.set(message.id, (answer) => {
        clearTimeout(timer);
        resolve(answer);
      });
      void this.closed.then((c) => {
        if (this.#waiting.delete(message.id)) {
          clearTimeout(timer);
          reject(
            Object.assign(new Error(`closed (${c.code} ${c.reason}) before answering ${message.type} #${message.id}`), {
              closed: c,
            }),
          );
        }
      });
      this.send(message);
    });
  }

  /** A request; the outcome is checked with the protocol's own parseOutcome. */
  async request<K extends keyof OutcomeByRequest>(
    request: K extends 'status'
      ? { type: K; resource: string }
      : K extends 'leases'
        ? { type: K; limit: number }
        : K extends 'release'
          ? { type: K; resource: string; epoch: bigint }
          : { type: K; resource: string; epoch: bigint; ttlMs: number },
  ): Promise<Answer<K>> {
    const answer = await this.exchange({ ...request, id: this.nextId() } as ClientMessage);
    if (answer.type === 'error') return { error: answer };
    if (answer.type !== 'reply') throw new Error(`unexpected ${answer.type} answering ${request.type}`);
    return { outcome: parseOutcome(request.type, answer.outcome) } as Answer<K>;
  }

  /** The replica's running leases (the console's read-only request). */
  leases(limit = 32): Promise<Answer<'leases'>> {
    return this.request({ type: 'leases', limit });
  }

  acquire(resource: string, epoch: bigint, ttlMs = 5_000): Promise<Answer<'acquire'>> {
    return this.request({ type: 'acquire', resource, epoch, ttlMs });
  }

  /** An acquire that may wait its turn at the replica (hot handoffs), optionally for the resource's next epoch. */
  async acquireInLine(
    resource: string,
    epoch: bigint,
    options: { ttlMs?: number; waitMs: number; nextEpoch?: boolean },
  ): Promise<Answer<'acquire'>> {
    const message = {
      type: 'acquire',
      id: this.nextId(),
      resource,
      epoch,
      ttlMs: options.ttlMs ?? 5_000,
      waitMs: options.waitMs,
      ...(options.nextEpoch === undefined ? {} : { nextEpoch: options.nextEpoch }),
    } as ClientMessage;
    const answer = await this.exchange(message, options.waitMs + DEFAULT_TIMEOUT_MS);
    if (answer.type === 'error') return { error: answer };
    if (answer.type !== 'reply') throw new Error(`unexpected ${answer.type} answering acquire`);
    return { outcome: parseOutcome('acquire', answer.outcome) };
  }

  renew(resource: string, epoch: bigint, ttlMs = 5_000): Promise<Answer<'renew'>> {
    return this.request({ type: 'renew', resource, epoch, ttlMs });
  }

  release(resource: string, epoch: bigint): Promise<Answer<'release'>> {
    return this.request({ type: 'release', resource, epoch });
  }

  status(resource: string): Promise<Answer<'status'>> {
    return this.request({ type: 'status', resource });
  }

  /** The next frame nobody waited for by id, or the close, whichever comes first. */
  async next(timeoutMs = DEFAULT_TIMEOUT_MS): Promise<{ message: ServerMessage } | { closed: Closed }> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const message = this.#inbox.shift();
      if (message) return { message };
      if (this.#closedValue) return { closed: this.#closedValue };
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`nothing arrived within ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.#inboxWaiter = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.#inboxWaiter = undefined;
    }
  }

  close(): Promise<Closed> {
    if (this.socket.readyState === WebSocket.OPEN || this.socket.readyState === WebSocket.CONNECTING)
      this.socket.close(1000);
    const timer = setTimeout(() => this.socket.terminate(), 2_000);
    return this.closed.finally(() => clearTimeout(timer));
  }
}

/** Narrowing helper for tests: the acquire outcome, or a thrown error naming what came instead. */
export function outcomeOf<K extends keyof OutcomeByRequest>(answer: Answer<K>): OutcomeByRequest[K] {
  if ('error' in answer) throw new Error(`expected a reply, got error ${answer.error.code}: ${answer.error.message}`);
  return answer.outcome;
}

export type { AcquireOutcome };
