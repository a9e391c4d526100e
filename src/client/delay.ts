/** Waiting that an AbortSignal can cut short: the one way the SDK sleeps. */
import { systemClock, type Clock } from '../common/clock.js';

/** Resolves true after `ms` on `clock`, or false as soon as `signal` aborts (at once if it already has). */
export function delay(ms: number, signal?: AbortSignal, clock: Clock = systemClock): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = () => {
      clock.clearTimeout(timer);
      resolve(false);
    };
    const timer = clock.setTimeout(
      () => {
        signal?.removeEventListener('abort', onAbort);
        resolve(true);
      },
      Math.max(0, ms),
    );
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
