/**
 * The console's rules: f lying replicas cannot make a lease appear, and a replica is faulty only on proof, so a
 * replica that is down, lags or runs ahead by a lone grant never makes another look faulty.
 */
import { describe, expect, it } from 'vitest';
import type { ActiveLease } from '../../src/protocol/messages.js';
import {
  ConsoleJudge,
  confirmedLeases,
  provableLies,
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
  answer: ReplicaObservation['answer'] = leases === undefined ? 'unreachable' : 'ok',
  more = false,
): ReplicaObservation => ({
  replica,
  answer,
  leases,
  more,
  statusEpochs: new Map(Object.entries(statusEpochs)),
  newConnection: false,
  identityMismatch: null,
});

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
      {
        resource: 'orders',
        epoch: 3n,
        holder: '01'.repeat(32),
        remainingMs: 1_000,
        reportedBy: [1, 2, 4],
        atRisk: false,
      },
    ]);
  });

  it('flags a lease fewer than t = 2f+1 replicas list as at risk: its renewal cannot gather t answers', () => {
    const orders = lease('orders', 3n, alice, 5_000);
    // N = 4, f = 1, t = 3: listed by 2 (one signer down, one that never signed it), so at risk.
    const twoList = [observe(1, undefined), observe(2, [orders]), observe(3, [orders]), observe(4, [])];
    expect(confirmedLeases(twoList, 1).map((l) => l.atRisk)).toEqual([true]);
    // Listed by all four (the lead's coming protocol) or by t: not at risk.
    const all = [1, 2, 3, 4].map((r) => observe(r, [orders]));
    expect(confirmedLeases(all, 1).map((l) => l.atRisk)).toEqual([false]);
    expect(confirmedLeases([...all.slice(0, 3), observe(4, undefined)], 1).map((l) => l.atRisk)).toEqual([false]);
  });

  it('does not call a lease at risk when the replicas not listing it cut their lists (negative case)', () => {
    const orders = lease('orders', 3n, alice, 5_000);
    // Replica 4's list was cut (`more`): it may hold the lease beyond its page, so 2 + 1 might renew it.
    const cut = [observe(1, undefined), observe(2, [orders]), observe(3, [orders]), observe(4, [], {}, 'ok', true)];
    expect(confirmedLeases(cut, 1).map((l) => l.atRisk)).toEqual([false]);
    // A cut list counts only for a replica that answered: one that did not cannot renew anything.
    const silent = [observe(1, undefined, {}, 'unreachable', true), observe(2, [orders]), observe(3, [orders])];
    expect(confirmedLeases(silent, 1).map((l) => l.atRisk)).toEqual([true]);
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

describe('provableLies', () => {
  it('names an epoch at or above 2^62, two leases on one resource, and an epoch lower than one reported before', () => {
    const phantom = lease('byzantine/phantom', 2n ** 63n - 1n, mallory, 60_000);
    expect(provableLies(observe(4, [phantom]), new Map()).map((l) => l.kind)).toEqual(['impossible_epoch']);
    expect(provableLies(observe(4, [], { orders: 2n ** 62n }), new Map()).map((l) => l.kind)).toEqual([
      'impossible_epoch',
    ]);
    expect(
      provableLies(observe(2, [lease('orders', 3n, alice, 5), lease('orders', 4n, mallory, 5)]), new Map()).map(
        (l) => l.kind,
      ),
    ).toEqual(['two_leases']);
    // Listed at 5, then a status of 4 in the same poll; and a status below what it said at an earlier poll.
    expect(provableLies(observe(1, [lease('orders', 5n, alice, 5)], { orders: 4n }), new Map())).toEqual([
      {
        kind: 'epoch_went_down',
        reason: expect.stringContaining('reports epoch 4 for "orders" after reporting 5'),
        // What it said, kept with the evidence.
        observed: { answer: 'status', resource: 'orders', epoch: '4', earlierEpoch: '5' },
      },
    ]);
    expect(provableLies(observe(1, [], { orders: 0n }), new Map([['orders', 7n]])).map((l) => l.kind)).toEqual([
      'epoch_went_down',
    ]);
  });

  it('finds nothing in what honest replicas say: lagging, far ahead by a lone grant, just below the ceiling (negative case)', () => {
    expect(provableLies(observe(4, [], { orders: 1n }), new Map([['orders', 1n]]))).toEqual([]);
    expect(
      provableLies(observe(1, [lease('orders', 1_000_003n, alice, 5)], { orders: 1_000_003n }), new Map()),
    ).toEqual([]);
    expect(provableLies(observe(1, [], { orders: 2n ** 62n - 1n }), new Map([['orders', 2n ** 62n - 2n]]))).toEqual([]);
    // One lease listed twice identically is not two leases.
    const twice = lease('orders', 3n, alice, 5);
    expect(provableLies(observe(1, [twice, twice], { orders: 3n }), new Map())).toEqual([]);
  });
});

describe('ConsoleJudge', () => {
  const at = (second: number) => new Date(Date.UTC(2026, 0, 1, 3, 0, second)).toISOString();

  it('keeps the survivors of a lease whose signer is down available: margin 0 at N = 4, nobody faulty (issue 29)', () => {
    const judge = new ConsoleJudge(1);
    const signed = [lease('orders/101', 1n, alice, 9_000)];
    for (let poll = 0; poll < 5; poll++) {
      const verdict = judge.poll(
        [
          observe(1, undefined, {}, 'unreachable'),
          observe(2, signed, { 'orders/101': 1n }),
          observe(3, signed, { 'orders/101': 1n }),
          observe(4, [], { 'orders/101': 0n }),
        ],
        at(poll),
      );
      expect(verdict.replicas.map((r) => [r.reachable, r.faulty])).toEqual([
        [false, null],
        [true, null],
        [true, null],
        [true, null],
      ]);
      expect(verdict.margin).toBe(0);
    }
  });

  it('keeps a conviction once found, the first proof as the reason, and counts protocol faults as proof', () => {
    const judge = new ConsoleJudge(1);
    judge.poll([observe(4, [], { orders: 2n ** 63n - 1n })], at(0));
    const later = judge.poll([observe(4, [], { orders: 2n }), observe(3, undefined, {}, 'protocol')], at(1));
    expect(later.replicas[0]).toMatchObject({
      faulty: expect.stringContaining('9223372036854775807'),
      faultySince: at(0),
    });
    expect(later.replicas[1]!.faulty).toMatch(/^broke the protocol/);
    judge.convict(4, 'equivocation', 'convicted', at(2));
    // 2 after 2^63-1 is a second proof (a record went down); the first stays the reason.
    expect(judge.convictions(4).map((c) => c.kind)).toEqual(['impossible_epoch', 'epoch_went_down', 'equivocation']);
  });

  it('reports each proof the first time its kind is found against a replica: the evidence it is kept as', () => {
    const judge = new ConsoleJudge(1);
    const first = judge.poll(
      [
        observe(4, [], { orders: 2n ** 63n - 1n }),
        { ...observe(3, undefined, {}, 'protocol'), message: 'a text frame' },
      ],
      at(0),
    );
    expect(first.newConvictions).toEqual([
      {
        replica: 4,
        kind: 'impossible_epoch',
        reason: expect.stringContaining('9223372036854775807'),
        at: at(0),
        observed: { answer: 'status', resource: 'orders', epoch: '9223372036854775807' },
      },
      {
        replica: 3,
        kind: 'protocol',
        reason: 'broke the protocol: a text frame',
        at: at(0),
        observed: { answer: 'a frame or reply that breaks the protocol', message: 'a text frame' },
      },
    ]);
    // Told again: counted on the conviction, not new evidence.
    const again = judge.poll(
      [observe(4, [], { orders: 2n ** 63n - 1n }), { ...observe(3, undefined, {}, 'protocol'), message: 'x' }],
      at(1),
    );
    expect(again.newConvictions).toEqual([]);
    expect(judge.convictions(3)[0]).toMatchObject({ count: 2, firstAt: at(0), lastAt: at(1) });
  });

  it('an epoch at or above 2^62 convicts while at most f replicas reported one; once more than f did, it proves nothing (issue 43, finding 4)', () => {
    const judge = new ConsoleJudge(1);
    const ceiling = 2n ** 62n;
    const one = judge.poll([observe(1, [], { orders: ceiling }), observe(2, [], { orders: 5n })], at(0));
    expect(one.replicas.map((r) => r.faulty !== null)).toEqual([true, false]);
    expect(one.margin).toBe(-2);
    // The cluster crossed the ceiling (a reshare inherited a lie before inherit refused them): every replica is
    // there after an honest grant at 2^62. Two of four: one of them is honest, so nobody is faulty for it.
    const all = judge.poll(
      [1, 2, 3, 4].map((replica) => observe(replica, [], { orders: ceiling + 1n })),
      at(1),
    );
    expect(all.replicas.map((r) => r.faulty)).toEqual([null, null, null, null]);
    expect(all.margin).toBe(1);
    // Other proofs still count.
    const down = judge.poll([observe(3, [], { orders: 7n })], at(2));
    expect(down.replicas[0]!.faulty).toMatch(/after reporting/);
  });

  it('starts a replica’s history over on a new connection, so a reshare’s new member is not blamed (negative case)', () => {
    const judge = new ConsoleJudge(1);
    judge.poll([observe(2, [], { orders: 9n })], at(0));
    const fresh = judge.poll([{ ...observe(2, [], { orders: 3n }), newConnection: true }], at(1));
    expect(fresh.replicas[0]!.faulty).toBeNull();
    const same = judge.poll([observe(2, [], { orders: 2n })], at(2));
    expect(same.replicas[0]!.faulty).toMatch(/after reporting 3/);
  });
});

describe('quorumMargin', () => {
  it('is the available replicas minus 2f+1', () => {
    expect(quorumMargin(4, 1)).toBe(1);
    expect(quorumMargin(3, 1)).toBe(0);
    expect(quorumMargin(2, 1)).toBe(-1);
  });
});
