/**
 * Fair hot handoffs at one replica (docs/protocol.md, Hot handoffs). An acquire that finds the resource held by
 * someone else and says it may wait (`waitMs`) is kept here instead of being answered `busy`, in arrival order
 * with the other waiting ones. When the lease ends (its holder released it, or it ran out), the oldest waiting
 * request is tried again, and answered once the replica's rules decide anything but `busy`; the next one waits
 * for the lease that grant starts. So a waiter is answered as soon as its turn comes, with no polling, and no
 * later arrival overtakes it here: the service answers `busy` to an acquire that would be granted while others
 * wait (the lease just ended and the line's turn is on its way), which with `waitMs` takes its place at the back.
 *
 * This changes when a replica answers, never what it may sign: every try goes through the same rules and the
 * same signing record as any acquire. The queue is volatile (a restart answers nobody; clients time out and
 * ask again) and bounded per resource; a waiter leaves it when its wait is over, or when its connection closes.
 */
import { bytesEqual } from '../common/bytes.js';
import { isQuorumFenceError } from '../common/errors.js';
import type { Clock, TimerHandle } from '../common/clock.js';
import type { AcquireRequest, Outcome } from '../protocol/messages.js';
import type { LineExit } from './metrics.js';
import type { Caller } from './policy.js';

/** One kept request: tried again with `retry`, answered through `answer`. */
interface Waiter {
  readonly request: AcquireRequest;
  readonly caller: Caller;
  readonly answer: (outcome: Outcome) => void;
  /** Ends the wait with an error instead (the replica was frozen for a reshare: it answers nothing any more). */
  readonly fail: (error: unknown) => void;
  readonly signal: AbortSignal | undefined;
  readonly onAbort: () => void;
  /** Told the epoch its turn will grant once it is first in line (nextEpoch requests only). */
  readonly onFirst: ((epoch: bigint) => void) | undefined;
  /** The epoch it was told, if any (told once per epoch). */
  announced: bigint | undefined;
  timer: TimerHandle;
}

interface Line {
  readonly waiters: Waiter[];
  /** Wakes the line when the lease in its way runs out (a release wakes it sooner). */
  leaseTimer: TimerHandle;
  /** A try is under way: wakes meanwhile only ask for another pass. */
  trying: boolean;
  again: boolean;
}

/**
 * Where a new waiter takes its place in a line that holds `waiting` requests: the back (`waiting`) in every
 * replica; the simulator (src/simulation) plants a line that serves the newest first through it, to prove its
 * arrival-order check can fail.
 */
export type LinePlacement = (waiting: number) => number;

const AT_THE_BACK: LinePlacement = (waiting) => waiting;

/** Tries an acquire once; `queued` is true for a request that waited its turn (the nextEpoch rule applies). */
export type TryAcquire = (request: AcquireRequest, caller: Caller, queued: boolean) => Promise<Outcome>;

export class HandoffQueue {
  readonly #lines = new Map<string, Line>();
  readonly #clock: Clock;
  readonly #tryAcquire: TryAcquire;
  readonly #maxPerResource: number;
  readonly #onExit: (how: LineExit) => void;
  readonly #placement: LinePlacement;

  /** `onExit` hears how each waiter left its line (for the replica's metrics). */
  constructor(
    clock: Clock,
    tryAcquire: TryAcquire,
    maxPerResource: number,
    onExit?: (how: LineExit) => void,
    placement: LinePlacement = AT_THE_BACK,
  ) {
    this.#clock = clock;
    this.#tryAcquire = tryAcquire;
    this.#maxPerResource = maxPerResource;
    this.#onExit = onExit ?? (() => undefined);
    this.#placement = placement;
  }

  /** Requests waiting now, over all resources. */
  get size(): number {
    let count = 0;
    for (const line of this.#lines.values()) count += line.waiters.length;
    return count;
  }

  /**
   * Keeps `request` (answered `busy` just now: the lease at `busy.epoch` runs `busy.remainingMs` more) until its
   * turn, its wait ends, or `signal` aborts. A nextEpoch request that is (or becomes) first in line hears, through
   * `onFirst`, the epoch its turn will grant. Resolves with the answer to send; undefined when the line is full
   * (answer `busy` now).
   */
  wait(
    request: AcquireRequest,
    caller: Caller,
    busy: { readonly epoch: bigint; readonly remainingMs: number },
    signal: AbortSignal | undefined,
    onFirst?: (epoch: bigint) => void,
  ): Promise<Outcome> | undefined {
    const waitMs = request.waitMs ?? 0;
    if (waitMs <= 0 || signal?.aborted) return undefined;
    let line = this.#lines.get(request.resource);
    if (line && line.waiters.length >= this.#maxPerResource) return undefined;
    if (!line) {
      line = { waiters: [], leaseTimer: undefined, trying: false, again: false };
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
        onFirst: request.nextEpoch ? onFirst : undefined,
        announced: undefined,
        timer: undefined,
      };
      // Its wait is over. First in line: one last try (the lease may be ending right now), answered whatever it
      // says. Behind others: `busy` as the replica last saw it, since a try could overtake those ahead.
      const busyEndsAt = this.#clock.now() + busy.remainingMs;
      waiter.timer = this.#clock.setTimeout(() => {
        const first = current.waiters[0] === waiter;
        if (!this.#remove(request.resource, waiter, 'expired')) return;
        const stillBusy: Outcome = {
          status: 'busy',
          epoch: busy.epoch,
          remainingMs: Math.max(0, Math.ceil(busyEndsAt - this.#clock.now())),
        };
        if (!first) return waiter.answer(stillBusy);
        this.#tryAcquire(request, caller, true).then(waiter.answer, (error: unknown) =>
          isQuorumFenceError(error, 'REPLICA_FROZEN') ? waiter.fail(error) : waiter.answer(stillBusy),
        );
        this.wake(request.resource); // the next one is first now
      }, waitMs);
      signal?.addEventListener('abort', waiter.onAbort, { once: true });
      current.waiters.splice(this.#placement(current.waiters.length), 0, waiter);
      this.#armLeaseTimer(request.resource, current, busy.remainingMs);
      // First in line: a try now, whose decision (inside the record's critical section) is either its grant or the
      // `busy` that names the lease in the way, and so the epoch its turn will grant. `busy` above may be stale by
      // now: a grant may have been decided since (the line's previous head, just leaving it).
      if (current.waiters.length === 1) this.wake(request.resource);
    });
  }

  /** Whether acquires of `resource` are waiting in its line (then a new grant is theirs first). */
  hasWaiters(resource: string): boolean {
    return this.#lines.has(resource);
  }

  /** The lease on `resource` ended (released): the oldest waiter tries now. */
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
          outcome = await this.#tryAcquire(head.request, head.caller, true);
        } catch (error) {
          if (isQuorumFenceError(error, 'REPLICA_FROZEN')) {
            this.failAll(error); // Frozen: no try will ever succeed here; nobody waits for nothing.
            break;
          }
          // A store or signer failure: the server would have answered an error; this waiter gets `busy` instead.
          outcome = { status: 'busy', epoch: head.request.epoch, remainingMs: 0 };
          failed = true;
        }
        if (line.waiters[0] !== head) {
          // It left meanwhile (wait over, connection closed, withdrawn by its holder, who got its token from the
          // others first): the next one tries. A grant it leaves behind is the lease the next one's turn follows,
          // so the next one hears its epoch now, as after any grant: were it granted unannounced, it would ask the
          // others only then, together with the one after it (announced at that grant), and could lose to it there.
          const next = line.waiters[0];
          if (next && outcome.status === 'granted' && outcome.epoch !== undefined)
            announce(next, turnEpoch(next.request, outcome.epoch));
          line.again = true;
          continue;
        }
        if (outcome.status === 'busy') {
          // Still held: wait for that lease, unless it ended during the try. No grant but the head's can come before
          // its turn now (newcomers are sent behind the line), so the lease in the way names the epoch of its turn.
          if (!failed) announce(head, turnEpoch(head.request, outcome.epoch));
          this.#armLeaseTimer(resource, line, outcome.remainingMs);
          continue;
        }
        this.#leave(resource, head, outcome, 'turn');
        const next = line.waiters[0];
        if (next && outcome.status === 'granted' && outcome.epoch !== undefined)
          announce(next, turnEpoch(next.request, outcome.epoch));
        // The next waiter tries at once: after a grant that says `busy` with the new lease's time, which arms the timer.
        line.again = line.waiters.length > 0;
      } while (line.again);
    } finally {
      line.trying = false;
    }
  }

  #armLeaseTimer(resource: string, line: Line, remainingMs: number): void {
    this.#clock.clearTimeout(line.leaseTimer);
    line.leaseTimer = this.#clock.setTimeout(
      () => {
        line.leaseTimer = undefined;
        this.wake(resource);
      },
      // Just after the lease's end, so the try does not find it still running.
      remainingMs + 1,
    );
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
    this.#clock.clearTimeout(waiter.timer);
    waiter.signal?.removeEventListener('abort', waiter.onAbort);
    if (line.waiters.length === 0) {
      this.#clock.clearTimeout(line.leaseTimer);
      this.#lines.delete(resource);
    }
    this.#onExit(how);
    return true;
  }
}

/** Tells a nextEpoch waiter, first in line now, the epoch its turn will grant (once per epoch). */
function announce(waiter: Waiter, epoch: bigint): void {
  if (waiter.announced === epoch) return;
  waiter.announced = epoch;
  waiter.onFirst?.(epoch);
}

/** The epoch a nextEpoch request's turn grants after the lease at `current`: the next one, or its own if higher. */
function turnEpoch(request: AcquireRequest, current: bigint): bigint {
  return current + 1n > request.epoch ? current + 1n : request.epoch;
}
