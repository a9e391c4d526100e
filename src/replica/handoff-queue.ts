/**
 * Fair hot handoffs at one replica (docs/protocol.md, "Lines (hot handoffs)"). An acquire that finds the resource
 * held by someone else and says it may wait (`waitMs`) is kept here instead of being answered `busy`. When the
 * lease ends (its holder released it, or it ran out), the first waiting request is tried again, and answered once
 * the replica's rules decide anything but `busy`; the next one waits for the lease that grant starts. So a waiter
 * is answered as soon as its turn comes, with no polling, and no later arrival overtakes it here: the service
 * answers `busy` to an acquire that would be granted while others wait, which with `waitMs` takes its place in line.
 *
 * Two kinds of waiter share a line. At the resource's leader, `nextEpoch` waiters, in arrival order: the first
 * TURNS_TOLD_AHEAD of them are told (`onTurn`) the epoch their turn will grant, each one above the one before it,
 * and their turns are decided at exactly that epoch; so a waiter asks the other signers for its epoch a whole
 * turn or more before it comes. At those signers, waiters for a fixed epoch (the epoch their leader told them), in
 * epoch order: the lowest is tried first when a lease ends, so the leader's order is every signer's order.
 *
 * This changes when a replica answers, never what it may sign: every try goes through the same rules and the
 * same signing record as any acquire. The queue is volatile (a restart answers nobody; clients time out and
 * ask again) and bounded per resource; a waiter leaves it when its wait is over, or when its connection closes.
 *
 * The line sets no timer of its own (issue 44): it asks its driver (`LineDriver`, the service) to set or clear a
 * `LineTimer`, and hears `timerFired` when one fires (line-timers.ts; `lineTimersOn` is the driver's side over a clock).
 * Nor does it loop over its tries: the replica core decides its serving (core/line-core.ts, `stepServing`); this
 * performs a `serveHead` by trying the head once, and that try's outcome is the core's next event. The waiters'
 * shapes, places and turn epochs are in line-waiters.ts.
 */
import { bytesEqual } from '../common/bytes.js';
import { isQuorumFenceError } from '../common/errors.js';
import type { AcquireRequest, Outcome } from '../protocol/messages.js';
import type { LineExit } from './metrics.js';
import type { LineDriver, LineTimer } from './line-timers.js';
import { createLineServing, stepServing, waitOverAction, type HeadResult, type LineEvent } from './core/line-core.js';
import type { Caller } from './policy.js';
import {
  announce,
  atLeast,
  placeOf,
  turnEpochAfter,
  turnRequest,
  waiterOf,
  type BusyLease,
  type Line,
  type LinePlacement,
  type Waiter,
} from './line-waiters.js';

export type { BusyLease, LinePlacement } from './line-waiters.js';

/**
 * How many waiters at the head of a leader's line know their turn's epoch. Two: the one whose turn comes next,
 * and the one after it, who then has a whole turn (the next holder's hold plus a handoff) to reach the other
 * signers before the lease in its way ends, even when holders release the moment they are granted. One (the
 * first in line only) left that waiter racing the holder's release to the signers. More would only lengthen the
 * waits at the signers and the gaps that waiters who leave leave behind.
 */
export const TURNS_TOLD_AHEAD = 2;

const AT_THE_BACK: LinePlacement = (waiting) => waiting;

/** Tries an acquire once; `queued` is true for a request that waited its turn (the nextEpoch rule applies). */
export type TryAcquire = (request: AcquireRequest, caller: Caller, queued: boolean) => Promise<Outcome>;

export interface LineOptions {
  /** Hears how each waiter left its line (for the replica's metrics). */
  readonly onExit?: (how: LineExit) => void;
  /** Where a new nextEpoch waiter goes (default: the back). */
  readonly placement?: LinePlacement;
  /**
   * How many waiters at the head know their turn's epoch (default TURNS_TOLD_AHEAD); the simulator plants 0
   * through it, to prove its handoff bound can fail.
   */
  readonly turnsToldAhead?: number;
}

export class HandoffQueue {
  readonly #lines = new Map<string, Line>();
  /** Per resource: acquires decided `busy` on their way into its line (see `arriving`). */
  readonly #arriving = new Map<string, number>();
  readonly #driver: LineDriver;
  readonly #tryAcquire: TryAcquire;
  readonly #maxPerResource: number;
  readonly #onExit: (how: LineExit) => void;
  readonly #placement: LinePlacement;
  readonly #turnsToldAhead: number;
  #nextWaiter = 0;

  /** `driver`: the time and the timers; the driver tells `timerFired` when one of them fires (see lineTimersOn). */
  constructor(driver: LineDriver, tryAcquire: TryAcquire, maxPerResource: number, options: LineOptions = {}) {
    this.#driver = driver;
    this.#tryAcquire = tryAcquire;
    this.#maxPerResource = maxPerResource;
    this.#onExit = options.onExit ?? (() => undefined);
    this.#placement = options.placement ?? AT_THE_BACK;
    this.#turnsToldAhead = options.turnsToldAhead ?? TURNS_TOLD_AHEAD;
  }

  /** Requests waiting now, over all resources, those on their way into a line (`arriving`) included. */
  get size(): number {
    let count = 0;
    for (const line of this.#lines.values()) count += line.waiters.length;
    for (const arriving of this.#arriving.values()) count += arriving;
    return count;
  }

  /**
   * Keeps `request` until its turn, its wait ends, or `signal` aborts. `busy` is the lease the decision that sent it
   * here saw in its way; undefined for a nextEpoch request joining a line that already waits (the service sends it
   * straight here, see service.ts). A nextEpoch request near the head of the line hears, through `onTurn`, the epoch
   * its turn will grant. Resolves with the answer to send; undefined when the line is full (answer `busy` now).
   */
  wait(
    request: AcquireRequest,
    caller: Caller,
    busy: BusyLease | undefined,
    signal: AbortSignal | undefined,
    onTurn?: (epoch: bigint) => void,
  ): Promise<Outcome> | undefined {
    const waitMs = request.waitMs ?? 0;
    if (waitMs <= 0 || signal?.aborted) return undefined;
    let line = this.#lines.get(request.resource);
    if (line && line.waiters.length >= this.#maxPerResource) return undefined;
    if (!line) {
      line = { waiters: [], leaseTimer: false, lease: undefined, serving: createLineServing() };
      this.#lines.set(request.resource, line);
    }
    const current = line;
    return new Promise<Outcome>((resolve, reject) => {
      const waiter: Waiter = {
        request,
        caller,
        signal,
        answer: resolve,
        fail: reject,
        // The connection is gone: nobody to answer.
        onAbort: () =>
          this.#leave(request.resource, waiter, { status: 'busy', epoch: request.epoch, remainingMs: 0 }, 'closed'),
        onTurn: request.nextEpoch ? onTurn : undefined,
        turnEpoch: undefined,
        id: this.#nextWaiter++,
      };
      this.#driver.setTimer({ kind: 'waitOver', resource: request.resource, waiter: waiter.id }, waitMs);
      signal?.addEventListener('abort', waiter.onAbort, { once: true });
      current.waiters.splice(placeOf(current.waiters, request, this.#placement), 0, waiter);
      if (busy) this.#armLeaseTimer(request.resource, current, busy);
      // First in line: a try now, whose decision (inside the record's critical section) is either its grant or the
      // `busy` that names the lease in the way, and so the epoch its turn will grant. `busy` above may be stale by
      // now: a grant may have been decided since (the line's previous head, just leaving it).
      if (current.waiters.length === 1) this.wake(request.resource);
      else this.#tellTurns(current);
    });
  }

  /** One of the timers this line asked its driver for fired. */
  timerFired(timer: LineTimer): void {
    const line = this.#lines.get(timer.resource);
    if (!line) return;
    if (timer.kind === 'leaseEnds') {
      line.leaseTimer = false;
      this.wake(timer.resource);
      return;
    }
    const waiter = line.waiters.find((candidate) => candidate.id === timer.waiter);
    if (waiter) this.#waitOver(timer.resource, line, waiter);
  }

  /**
   * A waiter's wait is over. First in line: one last try (the lease may be ending right now), answered whatever it
   * says. Behind others: `busy` as the replica last saw it, since a try could overtake those ahead.
   */
  #waitOver(resource: string, line: Line, waiter: Waiter): void {
    const first = line.waiters[0] === waiter;
    if (!this.#remove(resource, waiter, 'expired')) return;
    const stillBusy = this.#stillBusy(line, waiter.request);
    if (waitOverAction(first) === 'answerBusy') return waiter.answer(stillBusy);
    this.#tryAcquire(turnRequest(waiter), waiter.caller, true).then(waiter.answer, (error: unknown) =>
      isQuorumFenceError(error, 'REPLICA_FROZEN') ? waiter.fail(error) : waiter.answer(stillBusy),
    );
    this.wake(resource); // the next one is first now
  }

  /**
   * Whether acquires of `resource` wait in its line, or are on their way into it (`arriving`): then a new grant is
   * theirs first.
   */
  hasWaiters(resource: string): boolean {
    return this.#lines.has(resource) || this.#arriving.has(resource);
  }

  /**
   * Whether a newcomer's place is at the back of `resource`'s line right now: the line waits, and nobody decided
   * `busy` before it is still on the way in (it would take its place behind the newcomer).
   */
  joinable(resource: string): boolean {
    return this.#lines.has(resource) && !this.#arriving.has(resource);
  }

  /**
   * A waiting acquire of `resource` was just decided `busy`, inside the record's critical section, and will call
   * `wait` once its answer is back from the section, a few microtasks later; `arrived` when it does. Meanwhile the
   * section may decide the next request, which must not be granted past it (a holder asking for its next turn at
   * once would be), so it counts as waiting.
   */
  arriving(resource: string): void {
    this.#arriving.set(resource, (this.#arriving.get(resource) ?? 0) + 1);
  }

  /** The acquire `arriving` announced is here (it calls `wait` now, or gives up waiting). */
  arrived(resource: string): void {
    const count = this.#arriving.get(resource) ?? 0;
    if (count <= 1) this.#arriving.delete(resource);
    else this.#arriving.set(resource, count - 1);
  }

  /** The lease on `resource` ended (released): the first waiter tries now. */
  wake(resource: string): void {
    const line = this.#lines.get(resource);
    if (line) this.#serve(resource, line, { type: 'wake', head: line.waiters[0]?.id });
  }

  /**
   * A release from `caller` also withdraws its waiting acquires of `resource` at `epoch` or below (the same holder and
   * session): a client that gave up an attempt releases it everywhere, and a request still in a line must not turn
   * into a lease later.
   */
  withdraw(resource: string, caller: Caller, epoch: bigint): void {
    const line = this.#lines.get(resource);
    if (!line) return;
    for (const waiter of [...line.waiters]) {
      if (
        waiter.request.epoch <= epoch &&
        bytesEqual(waiter.caller.holder, caller.holder) &&
        waiter.caller.session === caller.session
      )
        this.#leave(resource, waiter, { status: 'busy', epoch: waiter.request.epoch, remainingMs: 0 }, 'withdrawn');
    }
    // The withdrawn one may have been first in line.
    if (line.waiters.length > 0) this.wake(resource);
  }

  /**
   * Ends every wait with `error` (the replica was frozen for a reshare): a waiter would otherwise be answered
   * only when its turn or its wait came, and every try from now on is refused anyway.
   */
  failAll(error: unknown): void {
    for (const [resource, line] of this.#lines) {
      for (const waiter of [...line.waiters]) if (this.#remove(resource, waiter, 'frozen')) waiter.fail(error);
    }
  }

  /** Answers every waiter with `busy` (shutdown). */
  close(): void {
    for (const [resource, line] of this.#lines) {
      for (const waiter of [...line.waiters])
        this.#leave(resource, waiter, { status: 'busy', epoch: waiter.request.epoch, remainingMs: 0 }, 'closed');
    }
  }

  /**
   * Steps the line's serving (core/line-core.ts) with `event` and performs what it calls for: one try of the head at a
   * time, whose outcome comes back as the next event.
   */
  #serve(resource: string, line: Line, event: LineEvent): void {
    for (const action of stepServing(line.serving, event)) {
      switch (action.type) {
        case 'serveHead':
          this.#tryHead(resource, line, waiterOf(line, action.head));
          break;
        case 'failAll':
          this.failAll(action.error);
          break;
        case 'announceHead': {
          const head = waiterOf(line, action.head);
          announce(head, turnEpochAfter(head, action.epoch), this.#turnsToldAhead > 0);
          this.#tellTurns(line);
          break;
        }
        case 'armLeaseTimer':
          this.#armLeaseTimer(resource, line, action.busy);
          break;
        case 'leave':
          this.#leave(resource, waiterOf(line, action.head), action.outcome, 'turn');
          break;
        case 'afterGrant':
          this.#afterGrant(line, action.outcome);
          break;
        case 'continue':
          this.#serve(resource, line, { type: 'continue', head: line.waiters[0]?.id });
      }
    }
  }

  /** Tries `head` once, at its turn's epoch; its outcome (or failure) is the line's next event. */
  #tryHead(resource: string, line: Line, head: Waiter): void {
    const tried = (result: HeadResult): void => {
      const inLine = line.waiters.includes(head);
      try {
        this.#serve(resource, line, { type: 'headTried', head: head.id, inLine, epoch: head.request.epoch, result });
      } catch (error) {
        this.#serve(resource, line, { type: 'abandoned' });
        throw error;
      }
    };
    void this.#tryAcquire(turnRequest(head), head.caller, true).then(
      (outcome) => tried({ ok: true, outcome }),
      (error: unknown) => tried({ ok: false, frozen: isQuorumFenceError(error, 'REPLICA_FROZEN'), error }),
    );
  }

  /** A grant at the head's try: the new first waiter's turn follows it. */
  #afterGrant(line: Line, outcome: Outcome): void {
    const next = line.waiters[0];
    if (next && outcome.status === 'granted' && outcome.epoch !== undefined) {
      announce(next, turnEpochAfter(next, outcome.epoch), this.#turnsToldAhead > 0);
      this.#tellTurns(line);
    }
  }

  /**
   * Tells the waiters near the head their turn's epoch, each one above the epoch the one before it takes: those
   * behind a waiter whose epoch is known, within TURNS_TOLD_AHEAD of the head. The head's own epoch comes only from a
   * decision made while it is first (its `busy`, or the grant to the one before it), inside the record's critical
   * section, so it is the epoch the record allows; the others follow from it.
   */
  #tellTurns(line: Line): void {
    let before: bigint | undefined;
    for (const [position, waiter] of line.waiters.entries()) {
      if (position >= this.#turnsToldAhead) break;
      if (position > 0 && before === undefined) break;
      if (!waiter.request.nextEpoch) {
        // A fixed epoch takes that epoch, or none (it is stale by its turn).
        before = position === 0 || waiter.request.epoch > before! ? waiter.request.epoch : before;
        continue;
      }
      if (position > 0 && waiter.turnEpoch === undefined)
        announce(waiter, atLeast(waiter.request.epoch, before! + 1n), true);
      before = waiter.turnEpoch;
    }
  }

  #stillBusy(line: Line, request: AcquireRequest): Outcome {
    const lease = line.lease;
    return {
      status: 'busy',
      epoch: lease?.epoch ?? request.epoch,
      remainingMs: lease ? Math.max(0, Math.ceil(lease.endsAt - this.#driver.now())) : 0,
    };
  }

  #armLeaseTimer(resource: string, line: Line, busy: BusyLease): void {
    line.lease = { epoch: busy.epoch, endsAt: this.#driver.now() + busy.remainingMs };
    // Just after the lease's end, so the try does not find it still running (it replaces the one set before).
    this.#driver.setTimer({ kind: 'leaseEnds', resource }, busy.remainingMs + 1);
    line.leaseTimer = true;
  }

  #leave(resource: string, waiter: Waiter, outcome: Outcome, how: LineExit): void {
    if (this.#remove(resource, waiter, how)) waiter.answer(outcome);
  }

  /** Takes `waiter` out of its line (it left `how`); false when it already left. */
  #remove(resource: string, waiter: Waiter, how: LineExit): boolean {
    const line = this.#lines.get(resource);
    const at = line ? line.waiters.indexOf(waiter) : -1;
    if (!line || at < 0) return false;
    line.waiters.splice(at, 1);
    this.#driver.clearTimer({ kind: 'waitOver', resource, waiter: waiter.id });
    waiter.signal?.removeEventListener('abort', waiter.onAbort);
    if (line.waiters.length === 0) {
      if (line.leaseTimer) this.#driver.clearTimer({ kind: 'leaseEnds', resource });
      line.leaseTimer = false;
      this.#lines.delete(resource);
    } else this.#tellTurns(line); // a waiter within the told ones may have moved up
    this.#onExit(how);
    return true;
  }
}
