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

  it('keeps nothing for a compacted resource: forget drops its lease end and its release, sweep drops expired ends', () => {
    const clock = new ManualClock(0);
    const leases = new LeaseTable(clock, 100, 0);
    leases.set('a', undefined, 50);
    leases.release('b', record());
    leases.set('c', undefined, 20_000);
    expect(leases.isRunning('a', record())).toBe(true);
    expect(leases.isReleased('b', record())).toBe(true);
    leases.forget('b');
    expect(leases.isReleased('b', record())).toBe(false);
    clock.advance(1_000);
    expect(leases.isRunning('a', record())).toBe(false);
    leases.sweep();
    expect(leases.size).toBe(1); // only c, whose lease still runs
    leases.forget('c');
    expect(leases.size).toBe(0);
  });
});
