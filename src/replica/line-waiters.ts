/**
 * A line's waiters (handoff-queue.ts): what the line keeps of each, and where each goes and at which epoch its turn
 * is decided (pure functions of the waiters; the line performs them).
 */
import type { AcquireRequest, Outcome } from '../protocol/messages.js';
import type { LineServing, WaiterId } from './core/line-core.js';
import type { Caller } from './policy.js';

/**
 * Where a new nextEpoch waiter takes its place in a line that holds `waiting` requests: the back (`waiting`) in
 * every replica; the simulator (src/simulation) plants a line that serves the newest first through it, to prove
 * its arrival-order check can fail.
 */
export type LinePlacement = (waiting: number) => number;

/** The lease a new waiter was told is in its way (the decision that said `busy`). */
export interface BusyLease {
  readonly epoch: bigint;
  readonly remainingMs: number;
}

/** One kept request: tried again at its turn, answered through `answer`. */
export interface Waiter {
  readonly request: AcquireRequest;
  readonly caller: Caller;
  readonly answer: (outcome: Outcome) => void;
  /** Ends the wait with an error instead (the replica was frozen for a reshare: it answers nothing any more). */
  readonly fail: (error: unknown) => void;
  readonly signal: AbortSignal | undefined;
  readonly onAbort: () => void;
  /** Told the epoch its turn will grant (nextEpoch requests only). */
  readonly onTurn: ((epoch: bigint) => void) | undefined;
  /** The epoch it was told (nextEpoch requests): its turn is decided at it, or above if the record passed it. */
  turnEpoch: bigint | undefined;
  /** Names its `waitOver` timer. */
  readonly id: number;
}

export interface Line {
  readonly waiters: Waiter[];
  /** Its `leaseEnds` timer is set: it wakes the line when the lease in its way runs out (a release wakes it sooner). */
  leaseTimer: boolean;
  /** The lease in the way as last decided: its epoch and its end on this replica's clock. */
  lease: { readonly epoch: bigint; readonly endsAt: number } | undefined;
  /** Its head's tries, one at a time (core/line-core.ts). */
  readonly serving: LineServing;
}

/**
 * Where a new waiter goes. A nextEpoch request: where the placement says (the back). A request for a fixed epoch:
 * before the first waiter that will take a higher epoch (a waiter not yet told its epoch will), so the lowest epoch
 * is tried first and a signer grants in the order its leader told the epochs.
 */
export function placeOf(waiters: readonly Waiter[], request: AcquireRequest, placement: LinePlacement): number {
  if (request.nextEpoch) return placement(waiters.length);
  const at = waiters.findIndex((waiter) =>
    waiter.request.nextEpoch
      ? waiter.turnEpoch === undefined || waiter.turnEpoch > request.epoch
      : waiter.request.epoch > request.epoch,
  );
  return at < 0 ? waiters.length : at;
}

/** The waiter `id` of `line`: the core names only waiters it was told are in the line. */
export function waiterOf(line: Line, id: WaiterId): Waiter {
  const waiter = line.waiters.find((candidate) => candidate.id === id);
  if (!waiter) throw new Error(`unreachable: waiter ${id} is not in its line`);
  return waiter;
}

/** Tells a nextEpoch waiter the epoch its turn will grant (once per epoch; `tell` false: decided at it, untold). */
export function announce(waiter: Waiter, epoch: bigint, tell: boolean): void {
  if (!waiter.request.nextEpoch || waiter.turnEpoch === epoch) return;
  waiter.turnEpoch = epoch;
  if (tell) waiter.onTurn?.(epoch);
}

/** The epoch a nextEpoch waiter's turn grants after the lease at `current`: the next one, or its own if higher. */
export function turnEpochAfter(waiter: Waiter, current: bigint): bigint {
  return atLeast(turnRequest(waiter).epoch, current + 1n);
}

/** The request a waiter's turn is decided by: a nextEpoch one at the epoch it was told, if that is above its own. */
export function turnRequest(waiter: Waiter): AcquireRequest {
  const told = waiter.turnEpoch;
  return told !== undefined && told > waiter.request.epoch ? { ...waiter.request, epoch: told } : waiter.request;
}

export function atLeast(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}
