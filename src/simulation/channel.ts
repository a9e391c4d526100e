/**
 * A simulated client's connections to the replicas are the SDK's own (src/client/replica-connection.ts: the
 * handshake, its deadline, requests and their slots, pings, faults, backoff), over the transport here: each link
 * is a numbered connection over the simulated network (network.ts), carrying the frames the SDK's codec writes
 * (wire.ts). Timers are the client's clock's (the connection takes them from its options). What is left of the
 * simulator's own is the mutations that plant a connection bug (mutations.ts), as a wrapper around the real
 * connection (`mutatedChannel`).
 */
import type { ConnectionState } from '../client/connection-state.js';
import type { ReplicaConnection } from '../client/replica-connection.js';
import type { ReplicaAnswer, ReplicaChannel, RequestBody, RequestKind } from '../client/replica-channel.js';
import type { LinkEvents, LinkOptions, ReplicaLink, ReplicaTransport } from '../client/replica-transport.js';
import { CloseCode } from '../protocol/messages.js';
import type { SimNetwork } from './network.js';
import { describeClientFrame, type ToClient, type ToReplica } from './wire.js';

/** One node's links to the replicas over the simulated network; the node hands it what the replicas send. */
export class SimTransport implements ReplicaTransport {
  readonly #address: string;
  readonly #network: SimNetwork;
  /** Open links by connection number (unique over the node's life, so a late message of an old one finds none). */
  readonly #links = new Map<number, SimLink>();
  #nextConn = 0;

  constructor(address: string, network: SimNetwork) {
    this.#address = address;
    this.#network = network;
  }

  connect(endpoint: string, options: LinkOptions, events: LinkEvents): ReplicaLink {
    const conn = ++this.#nextConn;
    const link = new SimLink(conn, endpoint, options, events, (message, label) =>
      this.#network.send(this.#address, endpoint, message, label),
    );
    this.#links.set(conn, link);
    link.onGone = () => this.#links.delete(conn);
    this.#network.send(this.#address, endpoint, { kind: 'open', conn }, 'open');
    return link;
  }

  /** A message from `from` (a replica's address). */
  receive(from: string, message: ToClient): void {
    const link = this.#links.get(message.conn);
    if (link?.endpoint === from) link.receive(message);
  }
}

class SimLink implements ReplicaLink {
  readonly endpoint: string;
  readonly #conn: number;
  readonly #options: LinkOptions;
  readonly #events: LinkEvents;
  readonly #send: (message: ToReplica, label: string) => void;
  #opened = false;
  #gone = false;
  onGone: () => void = () => undefined;

  constructor(
    conn: number,
    endpoint: string,
    options: LinkOptions,
    events: LinkEvents,
    send: (message: ToReplica, label: string) => void,
  ) {
    this.#conn = conn;
    this.endpoint = endpoint;
    this.#options = options;
    this.#events = events;
    this.#send = send;
  }

  get isOpen(): boolean {
    return this.#opened && !this.#gone;
  }

  send(frame: Uint8Array): void {
    if (this.isOpen) this.#send({ kind: 'frame', conn: this.#conn, frame }, describeClientFrame(frame));
  }

  ping(data: Uint8Array): void {
    if (this.isOpen) this.#send({ kind: 'ping', conn: this.#conn, data }, `ping ${Buffer.from(data).toString()}`);
  }

  close(code: number): void {
    if (this.#gone) return;
    this.#forget();
    this.#send({ kind: 'close', conn: this.#conn, code }, 'close');
  }

  receive(message: ToClient): void {
    if (this.#gone) return;
    switch (message.kind) {
      case 'accepted':
        this.#opened = true;
        return this.#events.open();
      case 'frame':
        // As ws does with maxPayload: a frame too big fails the link (and closes it with 1009), unread.
        if (message.frame.length > this.#options.maxFrameBytes) {
          this.close(CloseCode.MESSAGE_TOO_BIG);
          return this.#events.error('Max payload size exceeded');
        }
        return this.#events.frame(message.frame);
      case 'pong':
        return this.#events.pong(message.data);
      case 'closed':
        this.#forget();
        return this.#events.close(message.code, message.reason);
    }
  }

  #forget(): void {
    this.#gone = true;
    this.onGone();
  }
}

/** The planted connection bugs (mutations.ts); none in an honest run. */
export interface ChannelMutation {
  /** The floors replicas name are not kept. */
  readonly forgetsFloors?: boolean;
  /** The connection reports no latency, so acquires choose signers blind to it. */
  readonly blindToLatency?: boolean;
}

/** `connection` as the client's cores see it, with `mutation`'s bugs planted; the connection itself when none. */
export function mutatedChannel(connection: ReplicaConnection, mutation: ChannelMutation): ReplicaChannel {
  if (!mutation.forgetsFloors && !mutation.blindToLatency) return connection;
  return new MutatedChannel(connection, mutation);
}

class MutatedChannel implements ReplicaChannel {
  readonly #connection: ReplicaConnection;
  readonly #mutation: ChannelMutation;
  /** The last state seen and its floorless copy: the same object while the connection's state is unchanged. */
  #seen: ConnectionState | undefined;
  #floorless: ConnectionState | undefined;

  constructor(connection: ReplicaConnection, mutation: ChannelMutation) {
    this.#connection = connection;
    this.#mutation = mutation;
  }

  get index(): number {
    return this.#connection.index;
  }

  get state(): ConnectionState {
    const state = this.#connection.state;
    if (!this.#mutation.forgetsFloors || state.floor === undefined) return state;
    if (state !== this.#seen) {
      const { floor: _forgotten, ...rest } = state;
      this.#seen = state;
      this.#floorless = rest;
    }
    return this.#floorless!;
  }

  get latencyMs(): number | undefined {
    return this.#mutation.blindToLatency ? undefined : this.#connection.latencyMs;
  }

  get lineLatencyMs(): number | undefined {
    return this.#mutation.blindToLatency ? undefined : this.#connection.lineLatencyMs;
  }

  get probeDue(): boolean {
    return !this.#mutation.blindToLatency && this.#connection.probeDue;
  }

  get missedTurn(): boolean {
    return !this.#mutation.blindToLatency && this.#connection.missedTurn;
  }

  request<K extends RequestKind>(
    body: RequestBody<K>,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<ReplicaAnswer<K>> {
    return this.#connection.request(body, timeoutMs, signal);
  }

  notify(body: RequestBody<'release'> & { readonly quiet: true }): boolean {
    return this.#connection.notify(body);
  }
}

/** The close code a client sees when the replica's end goes without a close frame (a crash, a reset, a drop). */
export const ABNORMAL_CLOSURE = 1006;
