/**
 * A monotonic clock that can be jumped forward, for the replica inside the
 * Byzantine entry point (S6: replicas use only their own monotonic clock, so
 * a jump is how a test makes one replica's leases end early, as a fast clock
 * or a suspended VM would). It never goes backwards.
 */
import { systemClock, type Clock, type TimerHandle } from '../../common/clock.js';
import { QuorumFenceError } from '../../common/errors.js';

export class JumpClock implements Clock {
  readonly #base: Clock;
  #offsetMs = 0;
  #jumps = 0;

  constructor(base: Clock = systemClock) {
    this.#base = base;
  }

  now(): number {
    return this.#base.now() + this.#offsetMs;
  }

  /** Timers run on the base clock: a jump ends leases early, it does not fire timers. */
  setTimeout(callback: () => void, ms: number, options?: { unref?: boolean }): TimerHandle {
    return this.#base.setTimeout(callback, ms, options);
  }

  clearTimeout(timer: TimerHandle): void {
    this.#base.clearTimeout(timer);
  }

  /**
   * Moves the clock forward by `ms`.
   * @throws QuorumFenceError INVALID_ARGUMENT for a negative or non-finite value (monotonic clocks only move forward)
   */
  jump(ms: number): void {
    if (typeof ms !== 'number' || !(Number.isFinite(ms) && ms >= 0)) {
      throw new QuorumFenceError('INVALID_ARGUMENT', `"jumpClockMs" expected a finite number >= 0, got ${String(ms)}`, {
        field: 'jumpClockMs',
      });
    }
    this.#offsetMs += ms;
    this.#jumps++;
  }

  get offsetMs(): number {
    return this.#offsetMs;
  }

  get jumps(): number {
    return this.#jumps;
  }
}
