/**
 * One round: the same request sent to every replica that is connected, and to
 * any that connects while the round is open, with answers delivered one at a
 * time as they arrive. The caller decides after each answer whether it has
 * heard enough; `possible` tells it how many more answers could still come,
 * so it can stop as soon as its goal is out of reach instead of waiting for
 * a deadline. A round never waits for a replica whose connection is down.
 */
import type { Clock, TimerHandle } from '../common/clock.js';
import { isPending, isReady } from './connection-state.js';
import type { ReplicaAnswer, ReplicaChannel, RequestBody, RequestKind } from './replica-connection.js';

/** The connections a round draws on, with a way to hear when any of them changes state. */
export interface ChannelSet {
  readonly channels: readonly ReplicaChannel[];
  /** Calls `listener` after any channel's state changes; returns a function that unsubscribes. */
  subscribe(listener: () => void): () => void;
}

export type RoundEvent<K extends RequestKind> =
  | { readonly type: 'answer'; readonly replica: number; readonly answer: ReplicaAnswer<K> }
  /** A connection went down or came up: `possible` may have changed. */
  | { readonly type: 'changed' }
  | { readonly type: 'end'; readonly why: 'exhausted' | 'deadline' | 'aborted' };

export interface RoundOptions {
  readonly clock: Clock;
  /** On `clock`: the round ends here. */
  readonly deadline: number;
  readonly signal?: AbortSignal | undefined;
  /** Ask only these replicas until `widen()` (the others are held back, and still count as possible). */
  readonly first?: ReadonlySet<number> | undefined;
  /** Never ask any other replica (they count as down): those that may hold what the request is about. */
  readonly only?: ReadonlySet<number> | undefined;
}

/** Why a round's open requests are abandoned (their answers are ignored, so nobody reads it). */
const ROUND_CLOSED = 'round closed';

/** held: not asked yet by choice (see `first`); waiting: connecting, asked once ready; skipped: down. */
type Slot = 'held' | 'waiting' | 'sent' | 'answered' | 'skipped';

export class Round<K extends RequestKind> {
  readonly #set: ChannelSet;
  readonly #body: (replica: number) => RequestBody<K>;
  readonly #clock: Clock;
  readonly #slots = new Map<number, Slot>();
  readonly #queue: RoundEvent<K>[] = [];
  readonly #controller = new AbortController();
  #wake: (() => void) | undefined;
  #deadline: number;
  #timer: TimerHandle;
  #ended: RoundEvent<K> | undefined;
  readonly #unsubscribe: () => void;
  readonly #onAbort: () => void;
  readonly #signal: AbortSignal | undefined;
  #first: ReadonlySet<number> | undefined;
  readonly #only: ReadonlySet<number> | undefined;

  /** @param body the request for one replica (usually the same for all). */
  constructor(set: ChannelSet, body: (replica: number) => RequestBody<K>, options: RoundOptions) {
    this.#set = set;
    this.#body = body;
    this.#clock = options.clock;
    this.#deadline = options.deadline;
    this.#signal = options.signal;
    this.#first = options.first;
    this.#only = options.only;
    this.#onAbort = () => this.#end('aborted');
    this.#unsubscribe = set.subscribe(() => this.#refresh(true));
    for (const channel of set.channels) this.#slots.set(channel.index, 'skipped');
    if (options.signal?.aborted) {
      this.#end('aborted');
      return;
    }
    options.signal?.addEventListener('abort', this.#onAbort, { once: true });
    this.#armTimer();
    this.#refresh(false);
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

  /** The replicas this round has sent its request to so far. */
  get asked(): number[] {
    const asked: number[] = [];
    for (const [index, slot] of this.#slots) if (slot === 'sent' || slot === 'answered') asked.push(index);
    return asked.sort((a, b) => a - b);
  }

  /** Asks every replica (after a `first`-only start). */
  widen(): void {
    if (this.#first === undefined) return;
    this.#first = undefined;
    this.#refresh(false);
  }

  /** Asks these replicas too, still holding back the rest (after a `first`-only start; no-op once widened). */
  widenTo(replicas: ReadonlySet<number>): void {
    if (this.#first === undefined) return;
    this.#first = new Set([...this.#first, ...replicas]);
    this.#refresh(false);
  }

  /**
   * Asks one replica again, with another request (a catch-up with evidence, docs/protocol.md "Epoch steps"), once
   * it has answered and while its connection is ready; its answer comes as any other. False when it cannot be asked.
   */
  ask(replica: number, body: RequestBody<K>): boolean {
    const channel = this.#set.channels.find((c) => c.index === replica);
    if (this.#ended || !channel || this.#slots.get(replica) !== 'answered' || !isReady(channel.state)) return false;
    this.#send(channel, body);
    return true;
  }

  /** Moves the deadline earlier (never later): used to stop waiting for stragglers. */
  shortenDeadline(deadline: number): void {
    if (deadline >= this.#deadline || this.#ended) return;
    this.#deadline = deadline;
    this.#armTimer();
  }

  /** The next answer or change; after the end, the end event again. */
  async next(): Promise<RoundEvent<K>> {
    for (;;) {
      const event = this.#queue.shift();
      if (event) {
        // Counted as possible until the caller has seen it, so `possible` never undercounts queued answers.
        if (event.type === 'answer') this.#slots.set(event.replica, 'answered');
        return event;
      }
      if (this.#ended) return this.#ended;
      if (this.possible === 0) {
        this.#end('exhausted');
        continue;
      }
      await new Promise<void>((resolve) => (this.#wake = resolve));
      this.#wake = undefined;
    }
  }

  /** Stops the round: no more requests go out, and requests still open are abandoned (late replies are ignored). */
  close(): void {
    if (!this.#ended) this.#ended = { type: 'end', why: 'exhausted' };
    this.#stop();
  }

  #stop(): void {
    this.#clock.clearTimeout(this.#timer);
    this.#unsubscribe();
    this.#signal?.removeEventListener('abort', this.#onAbort);
    // A reason of our own: abort() without one builds a DOMException (with its stack) for every round.
    this.#controller.abort(ROUND_CLOSED);
  }

  #armTimer(): void {
    this.#clock.clearTimeout(this.#timer);
    this.#timer = this.#clock.setTimeout(() => this.#end('deadline'), Math.max(0, this.#deadline - this.#clock.now()));
  }

  #end(why: 'exhausted' | 'deadline' | 'aborted'): void {
    if (this.#ended) return;
    this.#ended = { type: 'end', why };
    this.#stop();
    this.#wake?.();
  }

  #push(event: RoundEvent<K>): void {
    if (this.#ended) return;
    this.#queue.push(event);
    this.#wake?.();
  }

  /** Sends to channels that became ready; forgets ones that went down before we could ask them. */
  #refresh(notify: boolean): void {
    if (this.#ended) return;
    let changed = false;
    for (const channel of this.#set.channels) {
      const slot = this.#slots.get(channel.index);
      if (slot === 'sent' || slot === 'answered') continue;
      if (this.#only !== undefined && !this.#only.has(channel.index)) continue; // stays 'skipped'
      if (this.#first !== undefined && !this.#first.has(channel.index)) {
        const next: Slot = isReady(channel.state) || isPending(channel.state) ? 'held' : 'skipped';
        if (next !== slot) {
          this.#slots.set(channel.index, next);
          changed = true;
        }
        continue;
      }
      if (isReady(channel.state)) {
        this.#send(channel);
        changed = true;
      } else {
        const next: Slot = isPending(channel.state) ? 'waiting' : 'skipped';
        if (next !== slot) {
          this.#slots.set(channel.index, next);
          changed = true;
        }
      }
    }
    if (notify && changed) this.#push({ type: 'changed' });
  }

  #send(channel: ReplicaChannel, body: RequestBody<K> = this.#body(channel.index)): void {
    this.#slots.set(channel.index, 'sent');
    const timeoutMs = Math.max(0, this.#deadline - this.#clock.now());
    void channel.request(body, timeoutMs, this.#controller.signal).then((answer) => {
      this.#push({ type: 'answer', replica: channel.index, answer });
    });
  }
}
