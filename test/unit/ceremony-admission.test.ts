/**
 * Which waiting (unauthenticated) connection a ceremony listener drops for a
 * newcomer (src/ceremony/admission.ts): none while there is room; the oldest
 * of the newcomer's own address once that address is at its bound; else the
 * oldest of the address holding the most once the pool is full. A property:
 * an address never loses a connection to a newcomer from another address
 * while some other address holds more.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { admissionLimits, displacedBy, type WaitingConnection } from '../../src/ceremony/admission.js';

const at = (order: number, address: string): WaitingConnection => ({ order, address });
const limits = { total: 6, perAddress: 3 };

describe('ceremony admission', () => {
  it('bounds grow with the participants: two dials each from one address, twice that in all', () => {
    expect(admissionLimits(4)).toEqual({ total: 16, perAddress: 8 });
    expect(admissionLimits(31)).toEqual({ total: 124, perAddress: 62 });
  });

  it('lets a newcomer in without displacing anyone while there is room', () => {
    expect(displacedBy([], 'a', limits)).toBeUndefined();
    expect(displacedBy([at(0, 'a'), at(1, 'a'), at(2, 'b')], 'c', limits)).toBeUndefined();
  });

  it("displaces the oldest of the newcomer's own address at its bound, even with room elsewhere", () => {
    const waiting = [at(5, 'a'), at(2, 'a'), at(9, 'a'), at(1, 'b')];
    expect(displacedBy(waiting, 'a', limits)).toEqual(at(2, 'a'));
  });

  it('with the pool full, displaces the oldest of the address holding the most, never one of a smaller address', () => {
    const waiting = [at(0, 'member'), at(1, 'x'), at(2, 'x'), at(3, 'x'), at(4, 'y'), at(5, 'y')];
    expect(displacedBy(waiting, 'member', limits)).toEqual(at(1, 'x'));
    // Two addresses tied for most: the older connection of the two goes.
    const tied = [at(7, 'member'), at(3, 'x'), at(8, 'x'), at(1, 'y'), at(9, 'y'), at(10, 'z')];
    expect(displacedBy(tied, 'z', limits)).toEqual(at(1, 'y'));
  });

  it('property: the one displaced is of the newcomer’s address or of an address holding the most, and the oldest there', () => {
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom('a', 'b', 'c', 'd'), { maxLength: 12 }),
        fc.constantFrom('a', 'b', 'c', 'd'),
        fc.integer({ min: 1, max: 8 }),
        fc.integer({ min: 1, max: 12 }),
        (addresses, newcomer, perAddress, total) => {
          const waiting = addresses.map((address, order) => at(order, address));
          const bounds = { perAddress, total };
          const victim = displacedBy(waiting, newcomer, bounds);
          const count = (address: string) => waiting.filter((w) => w.address === address).length;
          const room = count(newcomer) < perAddress && waiting.length < total;
          if (room) {
            expect(victim).toBeUndefined();
            return;
          }
          expect(victim).toBeDefined();
          const most = Math.max(...waiting.map((w) => count(w.address)));
          if (count(newcomer) < perAddress) expect(count(victim!.address)).toBe(most);
          else expect(victim!.address).toBe(newcomer);
          const older = waiting.filter((w) => w.address === victim!.address && w.order < victim!.order);
          expect(older).toEqual([]);
        },
      ),
      { numRuns: 500 },
    );
  });
});
