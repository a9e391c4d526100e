/**
 * The limiter of log lines a peer can provoke (src/common/log-limiter.ts): per key a burst, then a steady
 * rate; every line held back is counted, and drain hands each key's count over once. A property holds the
 * counts exact over any sequence of keys and times: written + suppressed = offered, per key, and no key
 * writes more than its burst plus its rate over the time that passed.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DEFAULT_LOG_LIMIT, LogLimiter } from '../../src/common/log-limiter.js';

describe('LogLimiter', () => {
  it('writes a burst, then one line per 1/perSecond, and counts the rest until drained', () => {
    const limiter = new LogLimiter({ perSecond: 1, burst: 3 });
    const at0 = Array.from({ length: 10 }, () => limiter.admit('refusal:invalid', 0));
    expect(at0).toEqual([true, true, true, false, false, false, false, false, false, false]);
    // Another key has a bucket of its own.
    expect(limiter.admit('refusal:busy', 0)).toBe(true);
    expect(limiter.admit('refusal:invalid', 999)).toBe(false);
    expect(limiter.admit('refusal:invalid', 1_000)).toBe(true);
    expect(limiter.drain()).toEqual([{ key: 'refusal:invalid', count: 8 }]);
    // Drained counts are handed over once.
    expect(limiter.drain()).toEqual([]);
  });

  it('refuses a limit that would admit nothing or is not whole', () => {
    expect(() => new LogLimiter({ perSecond: 0, burst: 1 })).toThrow(RangeError);
    expect(() => new LogLimiter({ perSecond: 1, burst: 0 })).toThrow(RangeError);
    expect(() => new LogLimiter({ perSecond: 1, burst: 1.5 })).toThrow(RangeError);
    expect(() => new LogLimiter({ perSecond: Number.NaN, burst: 1 })).toThrow(RangeError);
  });

  it('counts exactly, and never writes more than the burst plus the rate over the time passed (property)', () => {
    const keys = ['refusal:invalid', 'refusal:busy', 'admin_refused'] as const;
    fc.assert(
      fc.property(
        fc.record({ perSecond: fc.integer({ min: 1, max: 50 }), burst: fc.integer({ min: 1, max: 20 }) }),
        fc.array(fc.record({ key: fc.constantFrom(...keys), step: fc.integer({ min: 0, max: 500 }) }), {
          maxLength: 300,
        }),
        fc.array(fc.integer({ min: 0, max: 299 }), { maxLength: 5 }),
        (limit, offers, drainsAfter) => {
          const limiter = new LogLimiter(limit);
          const offered = new Map<string, number>();
          const written = new Map<string, number>();
          const suppressed = new Map<string, number>();
          const firstAt = new Map<string, number>();
          let now = 0;
          const add = (map: Map<string, number>, key: string, n = 1) => map.set(key, (map.get(key) ?? 0) + n);
          offers.forEach(({ key, step }, k) => {
            now += step;
            if (!firstAt.has(key)) firstAt.set(key, now);
            add(offered, key);
            if (limiter.admit(key, now)) add(written, key);
            if (drainsAfter.includes(k)) for (const { key: d, count } of limiter.drain()) add(suppressed, d, count);
          });
          for (const { key, count } of limiter.drain()) {
            expect(count).toBeGreaterThan(0);
            add(suppressed, key, count);
          }
          for (const [key, count] of offered) {
            expect((written.get(key) ?? 0) + (suppressed.get(key) ?? 0)).toBe(count);
            const elapsed = now - firstAt.get(key)!;
            expect(written.get(key) ?? 0).toBeLessThanOrEqual(limit.burst + (elapsed * limit.perSecond) / 1000 + 1e-9);
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  it('the default limiter writes ten lines of a flood at once, then one a second', () => {
    const limiter = new LogLimiter();
    const burst = Array.from({ length: 30 }, () => limiter.admit('refusal:invalid', 5_000)).filter(Boolean).length;
    expect(burst).toBe(DEFAULT_LOG_LIMIT.burst);
    expect(limiter.admit('refusal:invalid', 5_000 + 1_000 / DEFAULT_LOG_LIMIT.perSecond)).toBe(true);
    expect(limiter.drain()).toEqual([{ key: 'refusal:invalid', count: 20 }]);
  });
});
