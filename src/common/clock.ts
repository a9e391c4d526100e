/**
 * Time sources. Only monotonic time is ever used for decisions (S6): leases run
 * on each replica's own monotonic clock, and guards read no clock at all. The
 * clock is injectable so tests can run leases on fake time or jump it.
 */
export interface MonotonicClock {
  /** Milliseconds from an arbitrary origin; never goes backwards within a process. */
  now(): number;
}

export const systemClock: MonotonicClock = {
  now: () => performance.now(),
};

/** A clock a test moves by hand. */
export class ManualClock implements MonotonicClock {
  #now: number;
  constructor(start = 0) {
    this.#now = start;
  }
  now(): number {
    return this.#now;
  }
  advance(ms: number): void {
    if (!(ms >= 0)) throw new RangeError('a monotonic clock only moves forward');
    this.#now += ms;
  }
}
