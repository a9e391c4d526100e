/** The token bucket behind every per-connection rate (requests, evidence checks). */
import { describe, expect, it } from 'vitest';
import { takeFromAll, TokenBucket } from '../../src/common/token-bucket.js';

describe('TokenBucket', () => {
  it('starts full, spends one token per take, refills at its rate up to its burst', () => {
    const bucket = new TokenBucket(10, 3, 0);
    expect([bucket.take(0), bucket.take(0), bucket.take(0), bucket.take(0)]).toEqual([true, true, true, false]);
    expect(bucket.take(50)).toBe(false); // half a token
    expect(bucket.take(100)).toBe(true);
    // A long pause refills no more than the burst.
    const taken = Array.from({ length: 5 }, () => bucket.take(10_000));
    expect(taken).toEqual([true, true, true, false, false]);
  });

  it('a clock that goes back refills nothing', () => {
    const bucket = new TokenBucket(1_000, 1, 1_000);
    expect(bucket.take(1_000)).toBe(true);
    expect(bucket.take(0)).toBe(false);
  });

  it('takeFromAll spends one token of each bucket, or none when any of them is empty', () => {
    const wide = new TokenBucket(1, 5, 0);
    const narrow = new TokenBucket(1, 1, 0);
    expect(takeFromAll([wide, narrow], 0)).toBe(true);
    // The narrow one is empty: the wide one keeps its token.
    expect(takeFromAll([wide, narrow], 0)).toBe(false);
    expect([wide.take(0), wide.take(0), wide.take(0), wide.take(0), wide.take(0)]).toEqual([
      true,
      true,
      true,
      true,
      false,
    ]);
    expect(narrow.holds(1_000)).toBe(true);
    expect(takeFromAll([narrow], 1_000)).toBe(true);
  });
});
