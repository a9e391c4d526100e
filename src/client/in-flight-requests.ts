/**
 * The requests open on one replica connection (replica-connection.ts): their ids, the slots they take, the queue of
 * those waiting for a slot, their timeouts and aborts, and settling each exactly once. The replica bounds requests in
 * flight per connection, so the client sends at most maxInFlightPerReplica and queues the rest, oldest first.
 *
 * Apart from the link's life because this is bookkeeping over whichever link is current: it sends on the one the
 * connection hands it (none while the connection is down) and never opens, closes or reads one. The connection
 * settles everything when its link goes away; the messages from the replica (replica-messages.ts) settle one
 * request each by its id.
 */
import type { TimerHandle } from '../common/clock.js';
import { encodeMessage } from '../protocol/codec.js';
import type { ClientMessage } from '../protocol/messages.js';
import type { ReplicaAnswer, RequestBody, RequestKind } from './replica-channel.js';
import { measureOf, type Measure, type ReplicaLatency } from './replica-latency.js';
import type { ClientOptions } from './options.js';
import type { ReplicaLink } from './replica-transport.js';

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

/** The id of the handshake's hello; requests are numbered after it. */
export const HELLO_ID = 0;
const MAX_REQUEST_ID = 0xffff_ffff;

export class InFlightRequests {
  readonly #options: ClientOptions;
  readonly #latency: ReplicaLatency;
  /** The connection's link now; undefined while it has none. */
  readonly #link: () => ReplicaLink | undefined;
  #nextId = HELLO_ID + 1;
  /** Every open request, sent or waiting for a slot, by id. */
  readonly #inFlight = new Map<number, InFlight>();
  /** Ids waiting for a slot, oldest first (the replica bounds requests in flight per connection). */
  readonly #waiting: number[] = [];
  #sent = 0;

  constructor(options: ClientOptions, latency: ReplicaLatency, link: () => ReplicaLink | undefined) {
    this.#options = options;
    this.#latency = latency;
    this.#link = link;
  }

  /** Requests open now, sent or waiting for a slot. */
  get size(): number {
    return this.#inFlight.size;
  }

  /**
   * Opens a request on a ready connection: sent at once while a slot is free, else queued. Resolves once, with its
   * answer or on timeout, abort or settleAll; RATE_LIMITED at once when the queue is full.
   */
  open<K extends RequestKind>(
    body: RequestBody<K>,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<ReplicaAnswer<K>> {
    const { maxInFlightPerReplica, maxQueuedPerReplica } = this.#options;
    if (this.#waiting.length >= maxQueuedPerReplica) {
      return Promise.resolve({
        kind: 'error',
        code: 'RATE_LIMITED',
        message: 'too many requests queued on this connection (client limit)',
      });
    }
    const id = this.allocateId();
    return new Promise<ReplicaAnswer<K>>((resolve) => {
      const onAbort = () => this.settle(id, { kind: 'aborted' });
      signal?.addEventListener('abort', onAbort, { once: true });
      // The timeout counts from the call, queueing included: the caller's deadline is what matters.
      const timer = this.#options.clock.setTimeout(() => this.settle(id, { kind: 'timeout' }), Math.max(0, timeoutMs));
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

  /** The kind of the open request `id`; undefined when none is open (it timed out or was aborted: a late reply). */
  kindOf(id: number): RequestKind | undefined {
    return this.#inFlight.get(id)?.kind;
  }

  #transmit(id: number): void {
    const entry = this.#inFlight.get(id);
    const link = this.#link();
    if (!entry || !entry.frame || !link?.isOpen) return;
    link.send(entry.frame);
    entry.frame = undefined;
    this.#sent++;
    this.#latency.sent(`r${id}`, entry.measure, this.#options.clock.now());
  }

  /** Sends queued requests while slots are free. */
  #pump(): void {
    const max = this.#options.maxInFlightPerReplica;
    while (this.#sent < max && this.#waiting.length > 0) {
      const id = this.#waiting.shift()!;
      if (this.#inFlight.has(id)) this.#transmit(id);
    }
  }

  allocateId(): number {
    // Ids wrap at 2^32; skipping ids still in flight keeps replies unambiguous.
    for (;;) {
      const id = this.#nextId;
      this.#nextId = id >= MAX_REQUEST_ID ? HELLO_ID + 1 : id + 1;
      if (!this.#inFlight.has(id)) return id;
    }
  }

  settle(id: number, answer: ReplicaAnswer<RequestKind>): void {
    const entry = this.#inFlight.get(id);
    if (!entry) return;
    this.#inFlight.delete(id);
    this.#options.clock.clearTimeout(entry.timer);
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

  settleAll(answer: ReplicaAnswer<RequestKind>): void {
    this.#latency.lost();
    // Queued ones first, so that freeing slots does not send them on a connection that is going away.
    for (const id of this.#waiting.splice(0)) this.settle(id, answer);
    for (const id of [...this.#inFlight.keys()]) this.settle(id, answer);
    this.#sent = 0;
  }
}
