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
