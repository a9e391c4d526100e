import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BoundedMap } from '../../src/common/bounded-map.js';

describe('BoundedMap', () => {
  it('never holds more than its capacity and keeps the most recently set keys', () => {
    fc.assert(
      fc.property(
        fc.nat({ max: 8 }),
        fc.array(fc.tuple(fc.nat({ max: 12 }), fc.nat()), { maxLength: 60 }),
        (cap, ops) => {
          const map = new BoundedMap<number, number>(cap);
          const order: number[] = []; // the model: keys by last set, newest last
          const values = new Map<number, number>();
          for (const [key, value] of ops) {
            map.set(key, value);
            if (order.includes(key)) order.splice(order.indexOf(key), 1);
            order.push(key);
            values.set(key, value);
          }
          const kept = cap === 0 ? [] : order.slice(-cap);
          expect(map.size).toBeLessThanOrEqual(cap);
          expect([...map.keys()]).toEqual(kept);
          for (const key of kept) expect(map.get(key)).toBe(values.get(key));
        },
      ),
    );
  });

  it('get does not reorder: the oldest set is evicted first even if it was just read', () => {
    const map = new BoundedMap<string, number>(2);
    map.set('a', 1).set('b', 2);
    expect(map.get('a')).toBe(1);
    map.set('c', 3);
    expect([...map.keys()]).toEqual(['b', 'c']);
  });

  it('refuses a capacity that is not a whole number >= 0', () => {
    expect(() => new BoundedMap(-1)).toThrow(RangeError);
    expect(() => new BoundedMap(1.5)).toThrow(RangeError);
  });
});
