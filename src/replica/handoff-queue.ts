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
 */
import { bytesEqual } from '../common/bytes.js';
import { isQuorumFenceError } from '../common/errors.js';
import type { AcquireRequest, Outcome } from '../protocol/messages.js';
import type { LineExit } from './metrics.js';
import type { LineDriver, LineTimer } from './line-timers.js';
import type { Caller } from './policy.js';

/**
 * How many waiters at the head of a leader's line know their turn's epoch. Two: the one whose turn comes next,
 * and the one after it, who then has a whole turn (the next holder's hold plus a handoff) to reach the other
 * signers before the lease in its way ends, even when holders release the moment they are granted. One (the
 * first in line only) left that waiter racing the holder's release to the signers. More would only lengthen the
 * waits at the signers and the gaps that waiters who leave leave behind.
 */
export const TURNS_TOLD_AHEAD = 2;

/** One kept request: tried again with `retry`, answered through `answer`. */
interface Waiter {
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

interface Line {
  readonly waiters: Waiter[];
  /** Its `leaseEnds` timer is set: it wakes the line when the lease in its way runs out (a release wakes it sooner). */
  leaseTimer: boolean;
  /** The lease in the way as last decided: its epoch and its end on this replica's clock. */
  lease: { readonly epoch: bigint; readonly endsAt: number } | undefined;
  /** A try is under way: wakes meanwhile only ask for another pass. */
  trying: boolean;
  again: boolean;
}

/**
 * Where a new nextEpoch waiter takes its place in a line that holds `waiting` requests: the back (`waiting`) in
 * every replica; the simulator (src/simulation) plants a line that serves the newest first through it, to prove
 * its arrival-order check can fail.
 */
export type LinePlacement = (waiting: number) => number;

const AT_THE_BACK: LinePlacement = (waiting) => waiting;

/** Tries an acquire once; `queued` is true for a request that waited its turn (the nextEpoch rule applies). */
export type TryAcquire = (request: AcquireRequest, caller: Caller, queued: boolean) => Promise<Outcome>;

/** The lease a new waiter was told is in its way (the decision that said `busy`). */
export interface BusyLease {
  readonly epoch: bigint;
  readonly remainingMs: number;
}

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
      line = { waiters: [], leaseTimer: false, lease: undefined, trying: false, again: false };
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
    if (!first) return waiter.answer(stillBusy);
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
    if (!line) return;
    if (line.trying) {
      line.again = true;
      return;
    }
    void this.#serve(resource, line);
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

  async #serve(resource: string, line: Line): Promise<void> {
    line.trying = true;
    try {
      do {
        line.again = false;
        const head = line.waiters[0];
        if (!head) break;
        let outcome: Outcome;
        let failed = false;
        try {
          outcome = await this.#tryAcquire(turnRequest(head), head.caller, true);
        } catch (error) {
          if (isQuorumFenceError(error, 'REPLICA_FROZEN')) {
            this.failAll(error); // Frozen: no try will ever succeed here; nobody waits for nothing.
            break;
          }
          // A store or signer failure: the server would have answered an error; this waiter gets `busy` instead.
          outcome = { status: 'busy', epoch: head.request.epoch, remainingMs: 0 };
          failed = true;
        }
        if (!line.waiters.includes(head)) {
          // It left meanwhile (wait over, connection closed, withdrawn by its holder, who got its token from the
          // others first): the next one tries. A grant it leaves behind is the lease the next one's turn follows,
          // so the next one hears its epoch now, as after any grant.
          this.#afterGrant(line, outcome);
          line.again = true;
          continue;
        }
        if (outcome.status === 'busy') {
          // Still held: wait for that lease, unless it ended during the try. No grant but those of the line can
          // come before its turn now (newcomers are sent into the line), so the lease in the way names the epoch
          // of its turn.
          if (!failed) {
            announce(head, turnEpochAfter(head, outcome.epoch), this.#turnsToldAhead > 0);
            this.#tellTurns(line);
          }
          this.#armLeaseTimer(resource, line, outcome);
          continue;
        }
        this.#leave(resource, head, outcome, 'turn');
        this.#afterGrant(line, outcome);
        // The next waiter tries at once: after a grant that says `busy` with the new lease's time, which arms the timer.
        line.again = line.waiters.length > 0;
      } while (line.again);
    } finally {
      line.trying = false;
    }
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

/**
 * Where a new waiter goes. A nextEpoch request: where the placement says (the back). A request for a fixed epoch:
 * before the first waiter that will take a higher epoch (a waiter not yet told its epoch will), so the lowest epoch
 * is tried first and a signer grants in the order its leader told the epochs.
 */
function placeOf(waiters: readonly Waiter[], request: AcquireRequest, placement: LinePlacement): number {
  if (request.nextEpoch) return placement(waiters.length);
  const at = waiters.findIndex((waiter) =>
    waiter.request.nextEpoch
      ? waiter.turnEpoch === undefined || waiter.turnEpoch > request.epoch
      : waiter.request.epoch > request.epoch,
  );
  return at < 0 ? waiters.length : at;
}

/** Tells a nextEpoch waiter the epoch its turn will grant (once per epoch; `tell` false: decided at it, untold). */
function announce(waiter: Waiter, epoch: bigint, tell: boolean): void {
  if (!waiter.request.nextEpoch || waiter.turnEpoch === epoch) return;
  waiter.turnEpoch = epoch;
  if (tell) waiter.onTurn?.(epoch);
}

/** The epoch a nextEpoch waiter's turn grants after the lease at `current`: the next one, or its own if higher. */
function turnEpochAfter(waiter: Waiter, current: bigint): bigint {
  return atLeast(turnRequest(waiter).epoch, current + 1n);
}

/** The request a waiter's turn is decided by: a nextEpoch one at the epoch it was told, if that is above its own. */
function turnRequest(waiter: Waiter): AcquireRequest {
  const told = waiter.turnEpoch;
  return told !== undefined && told > waiter.request.epoch ? { ...waiter.request, epoch: told } : waiter.request;
}

function atLeast(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}
