/**
 * The resharing rule over the ceremony's state machine (in memory, any
 * delivery order): the group key never changes, any t_new new shares make a
 * token that verifies, partials of the old and new generations never combine,
 * and an old member dealing anything but its current share is excluded.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { bls12_381 } from '@noble/curves/bls12-381.js';
import { parseCluster, type Cluster } from '../../src/cluster/description.js';
import { lagrangeAtZero, resharing, unscaledShare, type OldSharing } from '../../src/ceremony/reshare.js';
import { bytesToBigInt, toHex } from '../../src/common/bytes.js';
import type { SecretKey } from '../../src/crypto/backend.js';
import { loadBackend } from '../../src/crypto/load.js';
import { seededRandom } from '../../src/crypto/random.js';
import { combinePartials, dealKey, mod, type DealtKey } from '../../src/crypto/threshold.js';
import { encodeToken, verifyToken } from '../../src/token/admission-token.js';
import { grantMessage, makeGrant } from '../../src/token/grant.js';
import { commit, decodeCommitments, evaluate, pointBytes, shareMatchesCommitments } from '../../src/ceremony/vss.js';
import { simulateCeremony } from '../support/ceremony-sim.js';
import type { Proposal } from '../../src/ceremony/proposal.js';
import type { OutgoingRewrite } from '../../src/ceremony/events.js';
import type { DealBody } from '../../src/ceremony/packets.js';

const backend = loadBackend('blst');

function oldSharingOf(key: DealtKey): OldSharing {
  return {
    n: key.n,
    t: key.t,
    groupPublicKey: key.commitments[0]!,
    scaledPublicShares: new Map(key.shares.map((s) => [s.index, s.publicKeyShare])),
  };
}

function currentShareOf(key: DealtKey, index: number): bigint {
  return unscaledShare(bytesToBigInt(key.shares[index - 1]!.scaledSecretShare), key.n);
}

/** A token from the given signers' keys, checked against `cluster`. */
function tokenVerifies(cluster: Cluster, n: number, signers: { index: number; key: SecretKey }[]): boolean {
  const grant = makeGrant({ clusterId: cluster.id, resource: 'orders', epoch: 7n, holder: new Uint8Array(32).fill(3) });
  const signature = combinePartials(
    backend,
    n,
    signers.map((s) => ({ index: s.index, signature: backend.sign(s.key, grantMessage(grant)) })),
  );
  return signature !== null && verifyToken(encodeToken(grant, signature), cluster).ok;
}

/** Random subset of size k of 1..n, from fast-check's choices. */
function subset(n: number, k: number, choices: readonly number[]): number[] {
  const pool = Array.from({ length: n }, (_, i) => i + 1);
  const picked: number[] = [];
  for (let j = 0; j < k; j++) picked.push(pool.splice(choices[j % choices.length]! % pool.length, 1)[0]!);
  return picked.sort((a, b) => a - b);
}

const scenarios = {
  'replace one (disk of 4 gone)': { oldN: 4, newN: 4, dealers: [1, 2, 3] },
  'add: 4 -> 7': { oldN: 4, newN: 7, dealers: [1, 2, 3, 4] },
  'refresh: same four members': { oldN: 4, newN: 4, dealers: [1, 2, 3, 4] },
} as const;

describe('reshare: the group key is unchanged and any t_new new shares sign', () => {
  for (const [name, s] of Object.entries(scenarios)) {
    it(`${name}: every new member ends with the old group key; any t_new of them make a valid token; old and new partials never combine`, () => {
      fc.assert(
        fc.property(
          fc.uint8Array({ minLength: 32, maxLength: 32 }),
          fc.array(fc.nat(), { minLength: 1, maxLength: 40 }),
          (seed, choices) => {
            const old = dealKey(s.oldN, 2 * ((s.oldN - 1) / 3) + 1, seededRandom(seed));
            const oldSharing = oldSharingOf(old);
            let k = 0;
            const sim = simulateCeremony(s.newN, {
              pick: () => choices[k++ % choices.length]!,
              rule: (self) =>
                resharing(
                  oldSharing,
                  s.dealers,
                  (s.dealers as readonly number[]).includes(self) ? currentShareOf(old, self) : undefined,
                ),
            });
            expect(sim.members.map((m) => m.phase)).toEqual(sim.members.map(() => 'done'));
            const first = sim.members[0]!.result!;
            expect(first.cluster.groupPublicKey).toBe(toHex(old.commitments[0]!));
            expect(new Set(sim.members.map((m) => m.result!.cluster.clusterId)).size).toBe(1);
            const cluster = parseCluster(first.cluster, { backend });
            const newKeys = sim.members.map((m) => backend.secretKeyFromBytes(m.result!.scaledSecretShare));
            const tNew = sim.proposal.t;
            const signers = subset(s.newN, tNew, choices);
            expect(
              tokenVerifies(
                cluster,
                s.newN,
                signers.map((i) => ({ index: i, key: newKeys[i - 1]! })),
              ),
            ).toBe(true);
            // t_new partials, at least one from each generation: never a valid token.
            const oldKeys = old.shares.map((x) => backend.secretKeyFromBytes(x.scaledSecretShare));
            const fromOld = 1 + (choices[0]! % (tNew - 1));
            const mixed = signers.map((i, j) => ({
              index: i,
              key: j < fromOld && i <= s.oldN ? oldKeys[i - 1]! : newKeys[i - 1]!,
            }));
            if (mixed.some((m, j) => m.key !== newKeys[signers[j]! - 1])) {
              expect(tokenVerifies(cluster, s.newN, mixed)).toBe(false);
            }
          },
        ),
        { numRuns: 4 },
      );
    });
  }

  it('remove: 7 -> 4 (the rule alone): any five old deals give four shares of the same key, matching their commitments', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.array(fc.nat(), { minLength: 5, maxLength: 5 }),
        (seed, choices) => {
          const old = dealKey(7, 5, seededRandom(seed));
          const oldSharing = oldSharingOf(old);
          const random = seededRandom(seed.map((b) => b ^ 0xff));
          const dealers = subset(7, 5, choices);
          const deals = dealers.map((d) => {
            const polynomial = resharing(oldSharing, dealers, currentShareOf(old, d)).polynomial(d, 3, random);
            return { dealer: d, polynomial, commitments: decodeCommitments(commit(polynomial), 3) };
          });
          const rule = resharing(oldSharing, dealers);
          for (const d of deals) expect(rule.acceptsCommitments(d.dealer, d.commitments)).toBe(true);
          const results = [1, 2, 3, 4].map((j) =>
            rule.combine(
              deals.map((d) => ({ dealer: d.dealer, share: evaluate(d.polynomial, j), commitments: d.commitments })),
            ),
          );
          for (const [k, r] of results.entries()) {
            expect(toHex(pointBytes(r.commitments[0]!))).toBe(toHex(old.commitments[0]!));
            expect(shareMatchesCommitments(r.share, k + 1, r.commitments)).toBe(true);
          }
          // Any three of the four interpolate to the old secret.
          const three = subset(4, 3, choices);
          const secret = lagrangeAtZero(4, three).reduce(
            (sum, l, k) => mod(sum + l * results[three[k]! - 1]!.share),
            0n,
          );
          expect(toHex(bls12_381.G1.Point.BASE.multiply(secret).toBytes(true))).toBe(toHex(old.commitments[0]!));
        },
      ),
      { numRuns: 4 },
    );
  });
});

describe('reshare: remove 7 -> 4 through the ceremony, old members 5..7 dealing from outside the new set', () => {
  /** The rule for participant `self`: it deals its current share under its old index (the proposal maps it). */
  const ruleFor =
    (old: DealtKey, dealers: number[], lie?: { dealer: number }) => (self: number, proposal: Proposal) => {
      const dealer = proposal.participants[self - 1]!.dealer;
      const share =
        dealer === undefined || !dealers.includes(dealer)
          ? undefined
          : lie?.dealer === dealer
            ? mod(currentShareOf(old, dealer) + 1n)
            : currentShareOf(old, dealer);
      return resharing(oldSharingOf(old), dealers, share);
    };

  it('any delivery order, any t_old-or-more dealers: the four members keep the group key and sign; the outside dealers end knowing t_new members confirmed that cluster', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.array(fc.nat(), { minLength: 5, maxLength: 40 }),
        fc.integer({ min: 5, max: 7 }),
        (seed, choices, count) => {
          const old = dealKey(7, 5, seededRandom(seed));
          // Always some of 5..7 (outside the new set 1..4): count dealers of 7, at least one above 4.
          const dealers = [...new Set([7, ...subset(7, count, choices)])].sort((a, b) => a - b).slice(-count);
          const outside = dealers.filter((d) => d > 4);
          let k = 0;
          const sim = simulateCeremony(4, {
            pick: () => choices[k++ % choices.length]!,
            reshare: { dealers, outside },
            rule: ruleFor(old, dealers),
          });
          const members = sim.members.slice(0, 4);
          const dealersOnly = sim.members.slice(4);
          expect(dealersOnly.map((m) => m.role)).toEqual(outside.map(() => 'dealer-only'));
          expect(sim.members.map((m) => m.phase)).toEqual(sim.members.map(() => 'done'));
          const first = members[0]!.result!;
          expect(first.qualified).toEqual(dealers);
          expect(first.cluster.groupPublicKey).toBe(toHex(old.commitments[0]!));
          const cluster = parseCluster(first.cluster, { backend });
          for (const d of dealersOnly) {
            expect(d.result).toBeUndefined();
            expect(d.dealt).toMatchObject({ clusterId: cluster.idHex, qualified: dealers });
            expect(d.dealt!.confirmedBy.length).toBeGreaterThanOrEqual(3);
            expect(outside).toContain(d.dealt!.dealer);
          }
          const newKeys = members.map((m) => backend.secretKeyFromBytes(m.result!.scaledSecretShare));
          const signers = subset(4, 3, choices);
          expect(
            tokenVerifies(
              cluster,
              4,
              signers.map((i) => ({ index: i, key: newKeys[i - 1]! })),
            ),
          ).toBe(true);
        },
      ),
      { numRuns: 4 },
    );
  });

  it('an outside dealer that sends member 2 a bad share and does not answer the complaint is excluded by every member; with six others dealing the key is unchanged', () => {
    const old = dealKey(7, 5, seededRandom(new Uint8Array(32).fill(8)));
    const dealers = [1, 2, 3, 4, 5, 6, 7];
    // One deal to everyone (a deal that differs by recipient is equivocation), with member 2's share wrong.
    const rewrite: OutgoingRewrite = (phase, body, _recipient, own) => {
      if (phase === 'deal') {
        const deal = body as DealBody;
        return { ...deal, shares: deal.shares.map((s, j) => (j === 1 ? own.seal(2, 12345n) : s)) } as typeof body;
      }
      if (phase === 'justification') return { reveals: [] } as unknown as typeof body;
      return body;
    };
    // Participant 6 is the second outside dealer: old replica 6.
    const sim = simulateCeremony(4, {
      reshare: { dealers, outside: [5, 6, 7] },
      rule: ruleFor(old, dealers),
      rewrites: new Map([[6, rewrite]]),
    });
    for (const m of sim.members.slice(0, 4)) {
      expect(m.phase).toBe('done');
      expect(m.result!.excluded).toEqual([{ dealer: 6, reason: 'did not answer the complaint of member 2' }]);
      expect(m.result!.cluster.groupPublicKey).toBe(toHex(old.commitments[0]!));
    }
    expect(sim.members[4]!.dealt!.excluded).toEqual([
      { dealer: 6, reason: 'did not answer the complaint of member 2' },
    ]);
  });

  it('an outside dealer that answers the complaint with the right share stays qualified; one dealing another share than its own is excluded; too few honest dealers abort everywhere', () => {
    const old = dealKey(7, 5, seededRandom(new Uint8Array(32).fill(9)));
    const honestAfterComplaint: OutgoingRewrite = (phase, body, _recipient, own) => {
      if (phase === 'deal') {
        const deal = body as DealBody;
        return { ...deal, shares: deal.shares.map((s, j) => (j === 2 ? own.seal(3, 777n) : s)) } as typeof body;
      }
      return body;
    };
    const all = [1, 2, 3, 4, 5, 6, 7];
    const justified = simulateCeremony(4, {
      reshare: { dealers: all, outside: [5, 6, 7] },
      rule: ruleFor(old, all, { dealer: 7 }),
      rewrites: new Map([[5, honestAfterComplaint]]),
    });
    for (const m of justified.members.slice(0, 4)) {
      expect(m.phase).toBe('done');
      expect(m.result!.qualified).toEqual([1, 2, 3, 4, 5, 6]);
      expect(m.result!.excluded).toEqual([{ dealer: 7, reason: 'commitments refused by the dealing rule' }]);
      expect(m.result!.cluster.groupPublicKey).toBe(toHex(old.commitments[0]!));
    }
    // Exactly t_old = 5 dealers, one of them (outside) lying: 4 qualify, and every participant aborts naming it.
    const five = [1, 2, 3, 4, 5];
    const short = simulateCeremony(4, {
      reshare: { dealers: five, outside: [5] },
      rule: ruleFor(old, five, { dealer: 5 }),
    });
    for (const m of short.members) {
      expect(m.phase).toBe('aborted');
      if (m.role === 'member') expect(m.abort!.members).toEqual([5]);
    }
  });
});

describe('reshare: an old member must deal its current share', () => {
  it('refresh: a dealer whose constant term is not its share is excluded by every member, and the key is unchanged', () => {
    const old = dealKey(4, 3, seededRandom(new Uint8Array(32).fill(5)));
    const oldSharing = oldSharingOf(old);
    const dealers = [1, 2, 3, 4];
    const sim = simulateCeremony(4, {
      rule: (self) =>
        resharing(oldSharing, dealers, self === 2 ? mod(currentShareOf(old, 2) + 1n) : currentShareOf(old, self)),
    });
    for (const m of sim.members) {
      expect(m.phase).toBe('done');
      expect(m.result!.excluded).toEqual([{ dealer: 2, reason: 'commitments refused by the dealing rule' }]);
      expect(m.result!.cluster.groupPublicKey).toBe(toHex(old.commitments[0]!));
    }
  });

  it('replace one: with one of the three dealers lying, fewer than t_old deals qualify and every member aborts naming it', () => {
    const old = dealKey(4, 3, seededRandom(new Uint8Array(32).fill(6)));
    const oldSharing = oldSharingOf(old);
    const sim = simulateCeremony(4, {
      rule: (self) =>
        resharing(
          oldSharing,
          [1, 2, 3],
          self === 4 ? undefined : self === 3 ? mod(currentShareOf(old, 3) + 1n) : currentShareOf(old, self),
        ),
    });
    for (const m of sim.members) {
      expect(m.phase).toBe('aborted');
      expect(m.abort!.members).toEqual([3]);
    }
  });
});
