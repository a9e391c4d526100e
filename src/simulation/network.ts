/**
 * The simulated network between a run's nodes: every message is an event of the scheduler, delivered after a
 * delay drawn per message but, by default (`fifo`), never before the message sent ahead of it on the same link (a
 * link keeps its order, as the TCP connection under each WebSocket does; messages on different links overtake each
 * other when the jitter allows), delivered at most once (TCP delivers nothing twice), lost with the conditions in
 * force, and dropped on a link that is cut (a partition) or to a node that is down. `heal` restores every link and
 * calm conditions. A client's requests out of order or twice are the malicious client's to send (malicious.ts).
 *
 * With the link order `any` (`simulate --link-order any`) the messages of one link overtake each other too, whenever
 * their delays allow, still at most once: what TCP never does within a connection, but what one connection's late
 * data may do to the next connection's between the same two nodes (docs/testing.md, "Link order").
 */
import type { SeededRandom } from '../testing/seeded-random.js';
import type { Scheduler } from './scheduler.js';

export interface NetworkConditions {
  /** Every message takes at least this long (virtual ms). */
  readonly baseDelayMs: number;
  /** Plus up to this much, uniformly: messages sent close together on different links arrive in either order. */
  readonly jitterMs: number;
  /** Chance that a message is lost. */
  readonly loss: number;
  /**
   * Nodes whose every link is slower (a replica far away, or slow on purpose: docs/protocol.md, "Slow replicas"):
   * node address (its part before any '.') → extra one-way ms on each message to or from it. Timing scenarios only.
   */
  readonly slowNodes?: Readonly<Record<string, number>>;
}

export const CALM: NetworkConditions = { baseDelayMs: 0.2, jitterMs: 0.6, loss: 0 };

/** Whether a link keeps its order (`fifo`, as TCP) or its messages may overtake each other (`any`). */
export type LinkOrder = 'fifo' | 'any';

export type Handler = (from: string, message: unknown) => void;

export class SimNetwork {
  readonly #scheduler: Scheduler;
  readonly #random: SeededRandom;
  readonly #handlers = new Map<string, Handler>();
  /** Cut links, as "a|b" with a < b. */
  readonly #cut = new Set<string>();
  /** Hung nodes (their address's part before any '.'): what they are sent, and would send, vanishes; links stay up. */
  readonly #hung = new Set<string>();
  #conditions: NetworkConditions;
  readonly #order: LinkOrder;
  /** Per link ("from>to"), when its last message is delivered: the next one on it is delivered no earlier (fifo). */
  readonly #lastDelivery = new Map<string, number>();
  /** Per link, how many messages were sent on it and the highest of their numbers delivered so far. */
  readonly #linkSent = new Map<string, number>();
  readonly #linkDelivered = new Map<string, number>();
  #inFlight = 0;
  #sent = 0;
  #overtaken = 0;

  constructor(scheduler: Scheduler, random: SeededRandom, conditions: NetworkConditions, order: LinkOrder = 'fifo') {
    this.#scheduler = scheduler;
    this.#random = random;
    this.#conditions = conditions;
    this.#order = order;
  }

  /** Messages sent and not yet delivered or dropped. */
  get inFlight(): number {
    return this.#inFlight;
  }

  get sent(): number {
    return this.#sent;
  }

  /** Messages delivered after a message sent later on the same link (always 0 when links keep their order). */
  get overtaken(): number {
    return this.#overtaken;
  }

  /** `address` receives messages through `handler` until detached (a crash). */
  attach(address: string, handler: Handler): void {
    this.#handlers.set(address, handler);
  }

  detach(address: string): void {
    this.#handlers.delete(address);
  }

  isUp(address: string): boolean {
    return this.#handlers.has(address);
  }

  connected(a: string, b: string): boolean {
    return !this.#cut.has(linkOf(a, b));
  }

  send(from: string, to: string, message: unknown, label: string): void {
    this.#sent++;
    if (this.#hung.has(nodeOf(from)) || this.#hung.has(nodeOf(to))) return;
    if (!this.connected(from, to) || this.#random.chance(this.#conditions.loss)) return;
    this.#deliverLater(from, to, message, label);
  }

  /** Cuts every link between the two groups. */
  partition(left: readonly string[], right: readonly string[]): void {
    for (const a of left) for (const b of right) if (a !== b) this.#cut.add(linkOf(a, b));
  }

  /** Restores the links a partition cut. */
  restore(left: readonly string[], right: readonly string[]): void {
    for (const a of left) for (const b of right) this.#cut.delete(linkOf(a, b));
  }

  heal(): void {
    this.#cut.clear();
    this.#hung.clear();
    this.#conditions = CALM;
  }

  /**
   * `address`'s node hangs, as a process under SIGSTOP: its connections stay open, but nothing it is sent arrives
   * and it sends nothing, from now until the heal.
   */
  hang(address: string): void {
    this.#hung.add(nodeOf(address));
  }

  setConditions(conditions: NetworkConditions): void {
    this.#conditions = conditions;
  }

  #deliverLater(from: string, to: string, message: unknown, label: string): void {
    const { baseDelayMs, jitterMs, slowNodes } = this.#conditions;
    let delay = baseDelayMs + this.#random.next() * jitterMs;
    if (slowNodes) delay += (slowNodes[nodeOf(from)] ?? 0) + (slowNodes[nodeOf(to)] ?? 0);
    const link = `${from}>${to}`;
    if (this.#order === 'fifo') {
      const at = Math.max(this.#scheduler.now + delay, this.#lastDelivery.get(link) ?? 0);
      this.#lastDelivery.set(link, at);
      delay = at - this.#scheduler.now;
    }
    const number = (this.#linkSent.get(link) ?? 0) + 1;
    this.#linkSent.set(link, number);
    this.#inFlight++;
    this.#scheduler.schedule(delay, `${from}>${to} ${label}`, () => {
      this.#inFlight--;
      // A link cut while the message travelled loses it too, and so does a node that hung meanwhile.
      if (!this.connected(from, to) || this.#hung.has(nodeOf(to))) return;
      const highest = this.#linkDelivered.get(link) ?? 0;
      if (number < highest) this.#overtaken++;
      else this.#linkDelivered.set(link, number);
      this.#handlers.get(to)?.(from, message);
    });
  }
}

/** A node's address without what follows a '.' (a replica's share generation: r3.g1 is r3). */
function nodeOf(address: string): string {
  const dot = address.indexOf('.');
  return dot < 0 ? address : address.slice(0, dot);
}

function linkOf(a: string, b: string): string {
  return a < b ? `${a}|${b}` : `${b}|${a}`;
}
