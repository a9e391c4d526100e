/** The lease table: the replica's own clock and the restart rule. */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/common/clock.js';
import { LeaseTable } from '../../src/replica/leases.js';
import type { SignedRecord } from '../../src/replica/policy.js';

const alice = new Uint8Array(32).fill(0xa1);

describe('S6 leases on the replica clock', () => {
  const record = (): SignedRecord => ({ epoch: 1n, holder: alice, grantDigest: new Uint8Array(32) });

  it('treats every record as leased for maxTtl after a restart, then lets it lapse', () => {
    const clock = new ManualClock(500);
    const leases = new LeaseTable(clock, 1_000, 2);
    expect(leases.endsAt('r', record())).toBe(1_500);
    expect(leases.endsAt('r', undefined)).toBe(0);
    expect(leases.activeCount()).toBe(2);
    leases.set('r', record(), 800);
    expect(leases.activeCount()).toBe(2);
    clock.advance(400);
    expect(leases.activeCount()).toBe(1);
    clock.advance(700);
    expect(leases.activeCount()).toBe(0);
    expect(leases.endsAt('other', record())).toBe(1_500);
  });

  it('forgets expired entries only once the restart window is over', () => {
    const clock = new ManualClock(0);
    const leases = new LeaseTable(clock, 100, 1);
    leases.set('r', record(), 10);
    clock.advance(50);
    leases.set('s', undefined, 60);
    expect(leases.endsAt('r', record())).toBe(10);
    clock.advance(10_000);
    leases.set('t', undefined, 20_000);
    // Swept now, and the restart default is long over, so the answer is unchanged: not leased.
    expect(leases.endsAt('r', record()) <= clock.now()).toBe(true);
  });
});
