/**
 * One round, sans I/O: the same request for every replica that is connected, and for any that connects while
 * the round is open, with answers handed to the caller one at a time (`next`). The caller decides after each
 * answer whether it has heard enough; `possible` tells it how many more could still come, so it can stop as soon
 * as its goal is out of reach instead of waiting for a deadline. A round never waits for a replica whose
 * connection is down. Every call's core (acquire, renew, release, status, leases) runs its requests through one.
 *
 * A round is plain data (RoundState, part of its call's state) changed only by the functions here, which take the
 * call's outbox for the actions they add.
 */
import { isPending, isReady } from '../connection-state.js';
import type { ReplicaAnswer, RequestKind } from '../replica-channel.js';
import { bodyFor, type RoundBodies } from './bodies.js';
import { outbox, type AnyRequestBody, type ConnectionView, type Outbox } from './io.js';

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

export interface RoundState {
  readonly group: number;
  /** The request for each replica (usually the same for all). */
  bodies: RoundBodies;
  readonly slots: Map<number, Slot>;
  /** Open requests of this round: request number → replica. */
  readonly requests: Map<number, number>;
  readonly queue: RoundEvent[];
  connections: readonly ConnectionView[];
  deadline: number;
  timer: number | undefined;
  ended: Extract<RoundEvent, { type: 'end' }> | undefined;
  first: ReadonlySet<number> | undefined;
  readonly only: ReadonlySet<number> | undefined;
  /**
   * A request of this round timed out. Each is sent with the round's time left (its deadline only moves earlier), so
   * its timing out means the round's deadline has come, whether or not the round's own timer fired first: a round
   * that runs out of replicas then ended at its deadline, not for want of replicas. Counted as exhausted, such a round
   * made an acquire whose caller's wait ran out say `unavailable` ("only 1 replicas answered") with every replica up.
   */
  timedOut: boolean;
}

/** @param bodies the request for each replica (usually the same for all). */
export function newRound(
  out: Outbox,
  connections: readonly ConnectionView[],
  bodies: RoundBodies,
  setup: RoundSetup,
): RoundState {
  const round: RoundState = {
    group: outbox.id(out),
    bodies,
    slots: new Map(),
    requests: new Map(),
    queue: [],
    connections,
    deadline: setup.deadline,
    timer: undefined,
    ended: undefined,
    first: setup.first,
    only: setup.only,
    timedOut: false,
  };
  for (const connection of connections) round.slots.set(connection.index, 'skipped');
  if (setup.aborted) {
    endRound(round, out, 'aborted');
    return round;
  }
  armTimer(round, out, setup.at);
  refresh(round, out, setup.at, false);
  return round;
}

/** Replicas that may still answer: asked and not yet answered, or connecting now. */
export function roundPossible(round: RoundState): number {
  let count = 0;
  for (const slot of round.slots.values()) if (slot === 'sent' || slot === 'waiting' || slot === 'held') count++;
  return count;
}

/** True while only the `first` replicas have been asked. */
export function roundNarrow(round: RoundState): boolean {
  return round.first !== undefined;
}

/** The replicas this round has sent its request to so far. */
export function roundAsked(round: RoundState): number[] {
  const asked: number[] = [];
  for (const [index, slot] of round.slots) if (slot === 'sent' || slot === 'answered') asked.push(index);
  return asked.sort((a, b) => a - b);
}

/** Asks every replica (after a `first`-only start). */
export function widenRound(round: RoundState, out: Outbox, at: number): void {
  if (round.first === undefined) return;
  round.first = undefined;
  refresh(round, out, at, false);
}

/** Asks these replicas too, still holding back the rest (after a `first`-only start; no-op once widened). */
export function widenRoundTo(round: RoundState, out: Outbox, replicas: ReadonlySet<number>, at: number): void {
  if (round.first === undefined) return;
  round.first = new Set([...round.first, ...replicas]);
  refresh(round, out, at, false);
}

/**
 * Asks one replica again, with another request (a catch-up with evidence, docs/protocol.md "Epoch steps"), once
 * it has answered and while its connection is ready; its answer comes as any other. False when it cannot be asked.
 */
export function askAgain(round: RoundState, out: Outbox, replica: number, body: AnyRequestBody, at: number): boolean {
  const connection = round.connections.find((c) => c.index === replica);
  if (round.ended || !connection || round.slots.get(replica) !== 'answered' || !isReady(connection.state)) return false;
  send(round, out, replica, at, body);
  return true;
}

/** Moves the deadline earlier (never later): used to stop waiting for stragglers. */
export function shortenRoundDeadline(round: RoundState, out: Outbox, deadline: number, at: number): void {
  if (deadline >= round.deadline || round.ended) return;
  round.deadline = deadline;
  armTimer(round, out, at);
}

/** A connection changed: sends to those that became ready, forgets those that went down before being asked. */
export function roundConnectionsChanged(
  round: RoundState,
  out: Outbox,
  connections: readonly ConnectionView[],
  at: number,
): void {
  round.connections = connections;
  refresh(round, out, at, true);
}

/** Takes an answer; false when it is not one of this round's open requests (or the round is over). */
export function roundAnswer(round: RoundState, request: number, answer: ReplicaAnswer<RequestKind>): boolean {
  const replica = round.requests.get(request);
  if (replica === undefined || round.ended) return false;
  round.requests.delete(request);
  if (answer.kind === 'timeout') round.timedOut = true;
  round.queue.push({ type: 'answer', replica, answer });
  return true;
}

/** True when `timer` was this round's deadline (the round has ended). */
export function roundTimer(round: RoundState, out: Outbox, timer: number): boolean {
  if (timer !== round.timer) return false;
  round.timer = undefined;
  endRound(round, out, 'deadline');
  return true;
}

/**
 * The next answer or change; after the end, the end event again; undefined while nothing has come and more
 * may (wait for the next event).
 */
export function nextRoundEvent(round: RoundState, out: Outbox): RoundEvent | undefined {
  const event = round.queue.shift();
  if (event) {
    // Counted as possible until the caller has seen it, so `possible` never undercounts queued answers.
    if (event.type === 'answer') round.slots.set(event.replica, 'answered');
    return event;
  }
  if (round.ended) return round.ended;
  if (roundPossible(round) > 0) return undefined;
  endRound(round, out, round.timedOut ? 'deadline' : 'exhausted');
  return round.ended;
}

/**
 * Why a round's caller stopped it: `why`, the round's own end (undefined when the caller stopped before the round
 * ended, its rules having heard enough); 'deadline' when undefined and a request timed out (`timedOut`).
 */
export function roundEndedBy(round: RoundState, why: RoundEnd | undefined): RoundEnd | undefined {
  return why ?? (round.timedOut ? 'deadline' : undefined);
}

/** Ends the round (answers already queued are still handed out first). */
export function endRound(round: RoundState, out: Outbox, why: RoundEnd): void {
  if (round.ended) return;
  round.ended = { type: 'end', why };
  stop(round, out);
}

/** Stops the round: no more requests go out, and requests still open are abandoned (late replies are ignored). */
export function closeRound(round: RoundState, out: Outbox): void {
  if (!round.ended) round.ended = { type: 'end', why: 'exhausted' };
  stop(round, out);
}

function stop(round: RoundState, out: Outbox): void {
  outbox.clearTimer(out, round.timer);
  round.timer = undefined;
  round.requests.clear();
  outbox.abandon(out, round.group);
}

function armTimer(round: RoundState, out: Outbox, at: number): void {
  outbox.clearTimer(out, round.timer);
  round.timer = outbox.setTimer(out, round.deadline - at);
}

/** Sends to connections that became ready; forgets ones that went down before we could ask them. */
function refresh(round: RoundState, out: Outbox, at: number, notify: boolean): void {
  if (round.ended) return;
  let changed = false;
  for (const connection of round.connections) {
    const slot = round.slots.get(connection.index);
    if (slot === 'sent' || slot === 'answered') continue;
    const next = slotFor(round, connection);
    if (next === 'sent') {
      send(round, out, connection.index, at);
      changed = true;
    } else if (next !== slot) {
      round.slots.set(connection.index, next);
      changed = true;
    }
  }
  if (notify && changed) round.queue.push({ type: 'changed' });
}

/** Where a replica not yet asked stands now: asked at once ('sent'), held back, waiting for its connection, or skipped. */
function slotFor(round: RoundState, connection: ConnectionView): Slot {
  if (round.only !== undefined && !round.only.has(connection.index)) return 'skipped';
  const up = isReady(connection.state);
  if (round.first !== undefined && !round.first.has(connection.index))
    return up || isPending(connection.state) ? 'held' : 'skipped';
  if (up) return 'sent';
  return isPending(connection.state) ? 'waiting' : 'skipped';
}

function send(round: RoundState, out: Outbox, replica: number, at: number, body?: AnyRequestBody): void {
  round.slots.set(replica, 'sent');
  const request = body ?? bodyFor(round.bodies, replica);
  round.requests.set(outbox.send(out, round.group, replica, request, round.deadline - at), replica);
}
