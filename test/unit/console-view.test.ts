/** The console's (f+1)-th rules: one (or f) lying replicas cannot make a lease appear or an honest replica look faulty. */
import { describe, expect, it } from 'vitest';
import type { ActiveLease } from '../../src/protocol/messages.js';
import {
  ContradictionTracker,
  confirmedLeases,
  findContradictions,
  quorumMargin,
  type ReplicaObservation,
} from '../../src/console/view.js';

const alice = new Uint8Array(32).fill(1);
const mallory = new Uint8Array(32).fill(2);
const lease = (resource: string, epoch: bigint, holder: Uint8Array, remainingMs: number): ActiveLease => ({
  resource,
  epoch,
  holder,
  remainingMs,
});
const observe = (
  replica: number,
  leases: ActiveLease[] | undefined,
  statusEpochs: Record<string, bigint> = {},
): ReplicaObservation => ({ replica, leases, statusEpochs: new Map(Object.entries(statusEpochs)) });

describe('confirmedLeases', () => {
  it('shows a lease f+1 replicas list, with the (f+1)-th largest time left', () => {
    const shown = confirmedLeases(
      [
        observe(1, [lease('orders', 3n, alice, 900)]),
        observe(2, [lease('orders', 3n, alice, 1_000)]),
        observe(3, []),
        // The liar inflates the time left: the (f+1)-th largest (f = 1) ignores it.
        observe(4, [lease('orders', 3n, alice, 60_000)]),
      ],
      1,
    );
    expect(shown).toEqual([
      { resource: 'orders', epoch: 3n, holder: '01'.repeat(32), remainingMs: 1_000, reportedBy: [1, 2, 4] },
    ]);
  });

  it('does not show a lease only f replicas list, nor count one replica listing it twice (negative case)', () => {
    const phantom = lease('orders', 9n, mallory, 60_000);
    expect(
      confirmedLeases([observe(1, []), observe(2, []), observe(3, undefined), observe(4, [phantom, phantom])], 1),
    ).toEqual([]);
    // Same resource and epoch, different holders: two leases of one vote each, neither shown.
    expect(
      confirmedLeases([observe(1, [lease('orders', 3n, alice, 5)]), observe(2, [lease('orders', 3n, mallory, 5)])], 1),
    ).toEqual([]);
  });
});

describe('findContradictions', () => {
  it('names a replica claiming an epoch no f+1 others confirm, by status or by a listed lease', () => {
    const found = findContradictions(
      [
        observe(1, [], { orders: 2n }),
        observe(2, [], { orders: 2n }),
        observe(3, [], { orders: 1n }),
        observe(4, [lease('orders', 2n ** 63n - 1n, mallory, 60_000)], { orders: 2n }),
      ],
      1,
    );
    expect(found).toEqual([{ replica: 4, resource: 'orders', claimed: 2n ** 63n - 1n, confirmed: 2n }]);
  });

  it('does not blame a replica that lags, nor one whose epoch f+1 others confirm (negative case)', () => {
    expect(
      findContradictions(
        [
          observe(1, [], { orders: 5n }),
          observe(2, [], { orders: 5n }),
          observe(3, [], { orders: 5n }),
          observe(4, [], { orders: 1n }), // missed grants: an acquire needs only 2f+1 signers
        ],
        1,
      ),
    ).toEqual([]);
    // Too few other answers to judge: no verdict rather than a guess.
    expect(findContradictions([observe(1, [], { orders: 9n }), observe(2, [], { orders: 1n })], 1)).toEqual([]);
  });
});

describe('ContradictionTracker', () => {
  it('marks a replica faulty only after persistent contradictions, and clears it after a clean poll', () => {
    const tracker = new ContradictionTracker(3);
    const c = { replica: 4, resource: 'orders', claimed: 9n, confirmed: 2n };
    tracker.update([c]);
    tracker.update([c]);
    expect(tracker.faultOf(4)).toBeUndefined();
    tracker.update([c]);
    expect(tracker.faultOf(4)).toEqual(c);
    expect(tracker.faultOf(1)).toBeUndefined();
    tracker.update([]);
    expect(tracker.faultOf(4)).toBeUndefined();
  });
});

describe('quorumMargin', () => {
  it('is the available replicas minus 2f+1', () => {
    expect(quorumMargin(4, 1)).toBe(1);
    expect(quorumMargin(3, 1)).toBe(0);
    expect(quorumMargin(2, 1)).toBe(-1);
  });
});
