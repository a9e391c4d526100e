/**
 * Time sources. Only monotonic time is ever used for decisions (S6): leases run
 * on each replica's own monotonic clock, and guards read no clock at all. The
 * clock is injectable, its timers too, so tests can run leases, a client and
 * a replica on fake time, or jump it.
 */
export interface MonotonicClock {
  /** Milliseconds from an arbitrary origin; never goes backwards within a process. */
  now(): number;
}

/** What `Clock.setTimeout` returns; only its own clock's `clearTimeout` understands it. */
export type TimerHandle = unknown;

/** A monotonic clock with timers that run on it: the client and the replica take one. */
export interface Clock extends MonotonicClock {
  /** Calls `callback` once, when `ms` have passed on this clock; `unref`: the timer alone keeps no process alive. */
  setTimeout(callback: () => void, ms: number, options?: { unref?: boolean }): TimerHandle;
  /** Cancels a timer of this clock; a no-op for one that fired, was cancelled, or `undefined`. */
  clearTimeout(timer: TimerHandle): void;
}

export const systemClock: Clock = {
  now: () => performance.now(),
  setTimeout: (callback, ms, options) => {
    const timer = setTimeout(callback, ms);
    if (options?.unref) timer.unref();
    return timer;
  },
  clearTimeout: (timer) => clearTimeout(timer as NodeJS.Timeout | undefined),
};

interface ManualTimer {
  readonly id: number;
  readonly due: number;
  readonly callback: () => void;
}

/** A clock a test moves by hand; its timers fire, in due order, only as `advance` passes them. */
export class ManualClock implements Clock {
  #now: number;
  #nextId = 1;
  #timers: ManualTimer[] = [];
  constructor(start = 0) {
    this.#now = start;
  }
  now(): number {
    return this.#now;
  }
  setTimeout(callback: () => void, ms: number): TimerHandle {
    const timer = { id: this.#nextId++, due: this.#now + Math.max(0, ms), callback };
    this.#timers.push(timer);
    return timer.id;
  }
  clearTimeout(timer: TimerHandle): void {
    this.#timers = this.#timers.filter((t) => t.id !== timer);
  }
  /** Timers not yet fired. */
  get pendingTimers(): number {
    return this.#timers.length;
  }
  /**
   * Moves the clock forward by `ms`, firing each timer that falls due on the way
   * at its own due time (earliest first; ties in the order they were set).
   */
  advance(ms: number): void {
    if (!(ms >= 0)) throw new RangeError('a monotonic clock only moves forward');
    const end = this.#now + ms;
    for (;;) {
      const next = this.#timers.reduce<ManualTimer | undefined>(
        (best, t) => (t.due <= end && (!best || t.due < best.due || (t.due === best.due && t.id < best.id)) ? t : best),
        undefined,
      );
      if (!next) break;
      this.#timers = this.#timers.filter((t) => t !== next);
      this.#now = Math.max(this.#now, next.due);
      next.callback();
    }
    this.#now = end;
  }
}
