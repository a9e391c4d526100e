/**
 * Which waiting (unauthenticated) connection a listener drops for a newcomer: the shared rule
 * (src/common/address-admission.ts: none while there is room; the oldest of the newcomer's own prefix once that
 * prefix is at its bound; else the oldest of the prefix holding the most once the pool is full; a prefix is an
 * IPv4 address or an IPv6 /64), and the ceremony's reserved places on top of it (src/ceremony/admission.ts): a
 * connection from an expected participant's prefix is displaced only by a newcomer of the same prefix.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { addressPrefix, displacedBy, type WaitingConnection } from '../../src/common/address-admission.js';
import { admissionLimits, admit, type CeremonyWaiting } from '../../src/ceremony/admission.js';

const at = (order: number, prefix: string): WaitingConnection => ({ order, prefix });
const limits = { total: 6, perPrefix: 3 };

describe('address prefixes', () => {
  it('an IPv4 address is its own prefix, and so is its IPv4-mapped IPv6 form', () => {
    expect(addressPrefix('127.0.0.2')).toBe('ipv4:127.0.0.2');
    expect(addressPrefix('::ffff:127.0.0.2')).toBe('ipv4:127.0.0.2');
    expect(addressPrefix('::ffff:7f00:2')).toBe('ipv4:127.0.0.2');
    expect(addressPrefix('127.0.0.3')).not.toBe(addressPrefix('127.0.0.2'));
  });

  it('IPv6 addresses share a prefix exactly when their first 64 bits agree, however they are written', () => {
    const a = addressPrefix('2001:db8:1:2:aaaa::1');
    expect(addressPrefix('2001:db8:1:2:ffff:ffff:ffff:ffff')).toBe(a);
    expect(addressPrefix('2001:0db8:0001:0002::9')).toBe(a);
    expect(addressPrefix('2001:DB8:1:2::')).toBe(a);
    expect(addressPrefix('2001:db8:1:3::1')).not.toBe(a);
    expect(addressPrefix('fe80::1%eth0')).toBe(addressPrefix('fe80::2'));
    expect(addressPrefix('::1')).toBe('ipv6:0:0:0:0::/64');
  });

  it('anything else is its own prefix', () => {
    expect(addressPrefix('unknown')).toBe('other:unknown');
    expect(addressPrefix('')).toBe('other:');
  });
});

describe('displacement (the shared rule)', () => {
  it('lets a newcomer in without displacing anyone while there is room', () => {
    expect(displacedBy([], 'a', limits)).toBeUndefined();
    expect(displacedBy([at(0, 'a'), at(1, 'a'), at(2, 'b')], 'c', limits)).toBeUndefined();
  });

  it("displaces the oldest of the newcomer's own prefix at its bound, even with room elsewhere", () => {
    const waiting = [at(5, 'a'), at(2, 'a'), at(9, 'a'), at(1, 'b')];
    expect(displacedBy(waiting, 'a', limits)).toEqual(at(2, 'a'));
  });

  it('with the pool full, displaces the oldest of the prefix holding the most, never one of a smaller prefix', () => {
    const waiting = [at(0, 'member'), at(1, 'x'), at(2, 'x'), at(3, 'x'), at(4, 'y'), at(5, 'y')];
    expect(displacedBy(waiting, 'member', limits)).toEqual(at(1, 'x'));
    // Two prefixes tied for most: the older connection of the two goes.
    const tied = [at(7, 'member'), at(3, 'x'), at(8, 'x'), at(1, 'y'), at(9, 'y'), at(10, 'z')];
    expect(displacedBy(tied, 'z', limits)).toEqual(at(1, 'y'));
  });

  it('property: the one displaced is of the newcomer’s prefix or of a prefix holding the most, and the oldest there', () => {
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom('a', 'b', 'c', 'd'), { maxLength: 12 }),
        fc.constantFrom('a', 'b', 'c', 'd'),
        fc.integer({ min: 1, max: 8 }),
        fc.integer({ min: 1, max: 12 }),
        (prefixes, newcomer, perPrefix, total) => {
          const waiting = prefixes.map((prefix, order) => at(order, prefix));
          const victim = displacedBy(waiting, newcomer, { perPrefix, total });
          const count = (prefix: string) => waiting.filter((w) => w.prefix === prefix).length;
          const room = count(newcomer) < perPrefix && waiting.length < total;
          if (room) {
            expect(victim).toBeUndefined();
            return;
          }
          expect(victim).toBeDefined();
          const most = Math.max(...waiting.map((w) => count(w.prefix)));
          if (count(newcomer) < perPrefix) expect(count(victim!.prefix)).toBe(most);
          else expect(victim!.prefix).toBe(newcomer);
          const older = waiting.filter((w) => w.prefix === victim!.prefix && w.order < victim!.order);
          expect(older).toEqual([]);
        },
      ),
      { numRuns: 500 },
    );
  });
});

describe('ceremony admission', () => {
  const member = addressPrefix('127.0.0.1');
  const expected = new Map([[member, 3]]);
  const waiter = (order: number, prefix: string, reserved: boolean): CeremonyWaiting => ({ order, prefix, reserved });

  it('general bounds grow with the participants; each expected participant reserves two places at its prefix', () => {
    expect(admissionLimits(4)).toEqual({ total: 16, perPrefix: 8, reserved: new Map() });
    expect(admissionLimits(31).total).toBe(124);
    expect(admissionLimits(4, expected).reserved).toEqual(new Map([[member, 6]]));
  });

  it("a member's prefix waits in its reserved places: a pool full of outsiders displaces none of it", () => {
    const bounds = admissionLimits(4, expected);
    const outsiders = Array.from({ length: 16 }, (_, k) => waiter(k + 1, addressPrefix(`127.0.0.${k + 2}`), false));
    const inFlight = waiter(0, member, true);
    for (let k = 0; k < 100; k++) {
      const { reserved, displaced } = admit([inFlight, ...outsiders], addressPrefix(`127.0.0.${18 + k}`), bounds);
      expect(reserved).toBe(false);
      expect(displaced?.reserved).toBe(false);
    }
    // A newcomer from the member's prefix takes a reserved place, displacing nobody while there is one.
    expect(admit([inFlight, ...outsiders], member, bounds)).toEqual({ reserved: true, displaced: undefined });
  });

  it('a full reserved prefix displaces only its own oldest', () => {
    const bounds = admissionLimits(4, new Map([[member, 1]]));
    const mine = [waiter(4, member, true), waiter(2, member, true)];
    expect(admit([...mine, waiter(1, 'ipv4:10.0.0.1', false)], member, bounds)).toEqual({
      reserved: true,
      displaced: waiter(2, member, true),
    });
  });

  it('property: a newcomer from another prefix never displaces a reserved connection', () => {
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom('m', 'n', 'x', 'y', 'z'), { maxLength: 40 }),
        fc.constantFrom('m', 'n', 'x', 'y', 'z'),
        (entries, newcomer) => {
          const bounds = admissionLimits(
            4,
            new Map([
              ['m', 2],
              ['n', 1],
            ]),
          );
          const waiting = entries.map((prefix, order) => waiter(order, prefix, bounds.reserved.has(prefix)));
          const { reserved, displaced } = admit(waiting, newcomer, bounds);
          expect(reserved).toBe(bounds.reserved.has(newcomer));
          if (displaced?.reserved) expect(displaced.prefix).toBe(newcomer);
          if (displaced && !reserved) expect(displaced.reserved).toBe(false);
        },
      ),
      { numRuns: 500 },
    );
  });
});
