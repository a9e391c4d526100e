/**
 * A line's timers as actions and events (issue 44): the line (handoff-queue.ts) sets none of its own; it asks its
 * driver to set or clear a `LineTimer` and hears `timerFired` when one fires. `lineTimersOn` is the driver's side over
 * a clock (the service's: the system's in production, virtual time in the simulator).
 */
import type { Clock, TimerHandle } from '../common/clock.js';

/** A timer of a line: a waiter's wait is over, or the lease in a line's way ends. */
export type LineTimer =
  | { readonly kind: 'waitOver'; readonly resource: string; readonly waiter: number }
  | { readonly kind: 'leaseEnds'; readonly resource: string };

/** What the line asks of its driver: the time now, and timers set and cleared (a fired one comes back as `timerFired`). */
export interface LineDriver {
  now(): number;
  setTimer(timer: LineTimer, delayMs: number): void;
  clearTimer(timer: LineTimer): void;
}

/** One key per timer: at most one of each is set at a time. */
function timerKey(timer: LineTimer): string {
  return timer.kind === 'waitOver' ? `w${timer.waiter}` : `l${timer.resource}`;
}

/**
 * The driver's side of a line's timers over `clock`: each timer set is one of the clock's, cleared with it; when it
 * fires, `fired` hears it (the line's `timerFired`).
 */
export function lineTimersOn(clock: Clock, fired: (timer: LineTimer) => void): LineDriver {
  const handles = new Map<string, TimerHandle>();
  return {
    now: () => clock.now(),
    setTimer(timer, delayMs) {
      const key = timerKey(timer);
      clock.clearTimeout(handles.get(key));
      const handle = clock.setTimeout(() => {
        if (handles.get(key) === handle) handles.delete(key);
        fired(timer);
      }, delayMs);
      handles.set(key, handle);
    },
    clearTimer(timer) {
      const key = timerKey(timer);
      clock.clearTimeout(handles.get(key));
      handles.delete(key);
    },
  };
}
