/**
 * One round, sans I/O: the same request for every replica that is connected, and for any that connects while
 * the round is open, with answers handed to the caller one at a time (`next`). The caller decides after each
 * answer whether it has heard enough; `possible` tells it how many more could still come, so it can stop as soon
 * as its goal is out of reach instead of waiting for a deadline. A round never waits for a replica whose
 * connection is down. Every call's core (acquire, renew, release, status, leases) runs its requests through one.
 */
import { isPending, isReady } from '../connection-state.js';
import type { ReplicaAnswer, RequestKind } from '../replica-channel.js';
import type { AnyRequestBody, ConnectionView, Outbox } from './io.js';

export type RoundEnd = 'exhausted' | 'deadline' | 'aborted';

export type RoundEvent =
  | { readonly type: 'answer'; readonly replica: number; readonly answer: ReplicaAnswer<RequestKind> }
  /** A connection went down or came up: `possible` may have changed. */
  | { readonly type: 'changed' }
  | { readonly type: 'end'; readonly why: RoundEnd };

export interface RoundSetup {
  readonly at: number;
  /** The round ends here (client clock). */
  readonly deadline: number;
  /** The caller had aborted before the round began. */
  readonly aborted?: boolean;
  /** Ask only these replicas until `widen()` (the others are held back, and still count as possible). */
  readonly first?: ReadonlySet<number> | undefined;
  /** Never ask any other replica (they count as down): those that may hold what the request is about. */
  readonly only?: ReadonlySet<number> | undefined;
}

/** held: not asked yet by choice (see `first`); waiting: connecting, asked once ready; skipped: down. */
type Slot = 'held' | 'waiting' | 'sent' | 'answered' | 'skipped';

export class RoundCore {
  readonly #out: Outbox;
  readonly #body: (replica: number) => AnyRequestBody;
  readonly #group: number;
  readonly #slots = new Map<number, Slot>();
  /** Open requests of this round: request number → replica. */
  readonly #requests = new Map<number, number>();
  readonly #queue: RoundEvent[] = [];
  #connections: readonly ConnectionView[];
  #deadline: number;
  #timer: number | undefined;
  #ended: RoundEvent | undefined;
  #first: ReadonlySet<number> | undefined;
  readonly #only: ReadonlySet<number> | undefined;

  /** @param body the request for one replica (usually the same for all). */
  constructor(
    out: Outbox,
    connections: readonly ConnectionView[],
    body: (replica: number) => AnyRequestBody,
    setup: RoundSetup,
  ) {
    this.#out = out;
    this.#body = body;
    this.#group = out.id();
    this.#connections = connections;
    this.#deadline = setup.deadline;
    this.#first = setup.first;
    this.#only = setup.only;
    for (const connection of connections) this.#slots.set(connection.index, 'skipped');
    if (setup.aborted) {
      this.end('aborted');
      return;
    }
    this.#armTimer(setup.at);
    this.#refresh(setup.at, false);
  }

  /** Replicas that may still answer: asked and not yet answered, or connecting now. */
  get possible(): number {
    let count = 0;
    for (const slot of this.#slots.values()) if (slot === 'sent' || slot === 'waiting' || slot === 'held') count++;
    return count;
  }

  /** True while only the `first` replicas have been asked. */
  get narrow(): boolean {
    return this.#first !== undefined;
  }

  get ended(): boolean {
    return this.#ended !== undefined;
  }

  /** The replicas this round has sent its request to so far. */
  get asked(): number[] {
    const asked: number[] = [];
    for (const [index, slot] of this.#slots) if (slot === 'sent' || slot === 'answered') asked.push(index);
    return asked.sort((a, b) => a - b);
  }

  /** Asks every replica (after a `first`-only start). */
  widen(at: number): void {
    if (this.#first === undefined) return;
    this.#first = undefined;
    this.#refresh(at, false);
  }

  /** Asks these replicas too, still holding back the rest (after a `first`-only start; no-op once widened). */
  widenTo(replicas: ReadonlySet<number>, at: number): void {
    if (this.#first === undefined) return;
    this.#first = new Set([...this.#first, ...replicas]);
    this.#refresh(at, false);
  }

  /**
   * Asks one replica again, with another request (a catch-up with evidence, docs/protocol.md "Epoch steps"), once
   * it has answered and while its connection is ready; its answer comes as any other. False when it cannot be asked.
   */
  ask(replica: number, body: AnyRequestBody, at: number): boolean {
    const connection = this.#connections.find((c) => c.index === replica);
    if (this.#ended || !connection || this.#slots.get(replica) !== 'answered' || !isReady(connection.state))
      return false;
    this.#send(replica, at, body);
    return true;
  }

  /** Moves the deadline earlier (never later): used to stop waiting for stragglers. */
  shortenDeadline(deadline: number, at: number): void {
    if (deadline >= this.#deadline || this.#ended) return;
    this.#deadline = deadline;
    this.#armTimer(at);
  }

  /** A connection changed: sends to those that became ready, forgets those that went down before being asked. */
  connectionsChanged(connections: readonly ConnectionView[], at: number): void {
    this.#connections = connections;
    this.#refresh(at, true);
  }

  /** Takes an answer; false when it is not one of this round's open requests (or the round is over). */
  answer(request: number, answer: ReplicaAnswer<RequestKind>): boolean {
    const replica = this.#requests.get(request);
    if (replica === undefined || this.#ended) return false;
    this.#requests.delete(request);
    this.#queue.push({ type: 'answer', replica, answer });
    return true;
  }

  /** True when `timer` was this round's deadline (the round has ended). */
  timer(timer: number): boolean {
    if (timer !== this.#timer) return false;
    this.#timer = undefined;
    this.end('deadline');
    return true;
  }

  /**
   * The next answer or change; after the end, the end event again; undefined while nothing has come and more
   * may (wait for the next event).
   */
  next(): RoundEvent | undefined {
    const event = this.#queue.shift();
    if (event) {
      // Counted as possible until the caller has seen it, so `possible` never undercounts queued answers.
      if (event.type === 'answer') this.#slots.set(event.replica, 'answered');
      return event;
    }
    if (this.#ended) return this.#ended;
    if (this.possible > 0) return undefined;
    this.end('exhausted');
    return this.#ended;
  }

  /** Ends the round (answers already queued are still handed out first). */
  end(why: RoundEnd): void {
    if (this.#ended) return;
    this.#ended = { type: 'end', why };
    this.#stop();
  }

  /** Stops the round: no more requests go out, and requests still open are abandoned (late replies are ignored). */
  close(): void {
    if (!this.#ended) this.#ended = { type: 'end', why: 'exhausted' };
    this.#stop();
  }

  #stop(): void {
    this.#out.clearTimer(this.#timer);
    this.#timer = undefined;
    this.#requests.clear();
    this.#out.abandon(this.#group);
  }

  #armTimer(at: number): void {
    this.#out.clearTimer(this.#timer);
    this.#timer = this.#out.setTimer(this.#deadline - at);
  }

  /** Sends to connections that became ready; forgets ones that went down before we could ask them. */
  #refresh(at: number, notify: boolean): void {
    if (this.#ended) return;
    let changed = false;
    for (const connection of this.#connections) {
      const slot = this.#slots.get(connection.index);
      if (slot === 'sent' || slot === 'answered') continue;
      const next = this.#slotFor(connection);
      if (next === 'sent') {
        this.#send(connection.index, at);
        changed = true;
      } else if (next !== slot) {
        this.#slots.set(connection.index, next);
        changed = true;
      }
    }
    if (notify && changed) this.#queue.push({ type: 'changed' });
  }

  /** Where a replica not yet asked stands now: asked at once ('sent'), held back, waiting for its connection, or skipped. */
  #slotFor(connection: ConnectionView): Slot {
    if (this.#only !== undefined && !this.#only.has(connection.index)) return 'skipped';
    const up = isReady(connection.state);
    if (this.#first !== undefined && !this.#first.has(connection.index))
      return up || isPending(connection.state) ? 'held' : 'skipped';
    if (up) return 'sent';
    return isPending(connection.state) ? 'waiting' : 'skipped';
  }

  #send(replica: number, at: number, body: AnyRequestBody = this.#body(replica)): void {
    this.#slots.set(replica, 'sent');
    this.#requests.set(this.#out.send(this.#group, replica, body, this.#deadline - at), replica);
  }
}
