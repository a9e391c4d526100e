/**
 * The simulated network between a run's nodes: every message is an event of the scheduler, delivered after a
 * delay drawn per message (so messages on one link overtake each other when the jitter allows), lost or
 * duplicated with the conditions in force, and dropped on a link that is cut (a partition) or to a node that is
 * down. `heal` restores every link and calm conditions.
 */
import type { SeededRandom } from '../testing/seeded-random.js';
import type { Scheduler } from './scheduler.js';

export interface NetworkConditions {
  /** Every message takes at least this long (virtual ms). */
  readonly baseDelayMs: number;
  /** Plus up to this much, uniformly: messages sent close together arrive in either order. */
  readonly jitterMs: number;
  /** Chance that a message is lost. */
  readonly loss: number;
  /** Chance that a message is delivered twice. */
  readonly duplicate: number;
  /**
   * Keep each link's order, as TCP does (a message leaves the link no earlier than the one sent before it on the
   * same link). Off in the seeded sweep, whose messages overtake each other; on in the timing scenarios (timing.ts).
   */
  readonly fifo?: boolean;
}

export const CALM: NetworkConditions = { baseDelayMs: 0.2, jitterMs: 0.6, loss: 0, duplicate: 0 };

export type Handler = (from: string, message: unknown) => void;

export class SimNetwork {
  readonly #scheduler: Scheduler;
  readonly #random: SeededRandom;
  readonly #handlers = new Map<string, Handler>();
  /** Cut links, as "a|b" with a < b. */
  readonly #cut = new Set<string>();
  #conditions: NetworkConditions;
  /** Per link ("from>to"), when its last message is delivered (fifo conditions only). */
  readonly #lastDelivery = new Map<string, number>();
  #inFlight = 0;
  #sent = 0;

  constructor(scheduler: Scheduler, random: SeededRandom, conditions: NetworkConditions) {
    this.#scheduler = scheduler;
    this.#random = random;
    this.#conditions = conditions;
  }

  /** Messages sent and not yet delivered or dropped. */
  get inFlight(): number {
    return this.#inFlight;
  }

  get sent(): number {
    return this.#sent;
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
    if (!this.connected(from, to) || this.#random.chance(this.#conditions.loss)) return;
    this.#deliverLater(from, to, message, label);
    if (this.#random.chance(this.#conditions.duplicate)) this.#deliverLater(from, to, message, `${label} (copy)`);
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
    this.#conditions = CALM;
  }

  setConditions(conditions: NetworkConditions): void {
    this.#conditions = conditions;
  }

  #deliverLater(from: string, to: string, message: unknown, label: string): void {
    const { baseDelayMs, jitterMs, fifo } = this.#conditions;
    let delay = baseDelayMs + this.#random.next() * jitterMs;
    if (fifo) {
      const link = `${from}>${to}`;
      const at = Math.max(this.#scheduler.now + delay, this.#lastDelivery.get(link) ?? 0);
      this.#lastDelivery.set(link, at);
      delay = at - this.#scheduler.now;
    }
    this.#inFlight++;
    this.#scheduler.schedule(delay, `${from}>${to} ${label}`, () => {
      this.#inFlight--;
      // A link cut while the message travelled loses it too.
      if (!this.connected(from, to)) return;
      this.#handlers.get(to)?.(from, message);
    });
  }
}

function linkOf(a: string, b: string): string {
  return a < b ? `${a}|${b}` : `${b}|${a}`;
}
