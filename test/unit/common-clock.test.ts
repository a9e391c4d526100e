/**
 * ManualClock: timers fire only as the clock passes them, each at its own due
 * time, earliest first; cancelled timers never fire; time never goes back.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/common/clock.js';

describe('ManualClock timers', () => {
  it('fires due timers in due order, each seeing its own due time, and none early', () => {
    const clock = new ManualClock(100);
    const fired: [string, number][] = [];
    clock.setTimeout(() => fired.push(['b', clock.now()]), 20);
    clock.setTimeout(() => fired.push(['a', clock.now()]), 10);
    clock.setTimeout(() => fired.push(['c', clock.now()]), 20);
    clock.advance(9);
    expect(fired).toEqual([]);
    clock.advance(16);
    expect(fired).toEqual([
      ['a', 110],
      ['b', 120],
      ['c', 120],
    ]);
    expect(clock.now()).toBe(125);
    expect(clock.pendingTimers).toBe(0);
  });

  it('fires a timer set by a firing timer when it falls within the same advance', () => {
    const clock = new ManualClock();
    const fired: number[] = [];
    clock.setTimeout(() => clock.setTimeout(() => fired.push(clock.now()), 5), 5);
    clock.advance(10);
    expect(fired).toEqual([10]);
  });

  it('never fires a cleared timer', () => {
    const clock = new ManualClock();
    let fired = false;
    const timer = clock.setTimeout(() => (fired = true), 1);
    clock.clearTimeout(timer);
    clock.clearTimeout(undefined);
    clock.advance(5);
    expect(fired).toBe(false);
  });

  it('refuses to move backwards', () => {
    expect(() => new ManualClock().advance(-1)).toThrow(RangeError);
  });
});
