/**
 * Following a membership change (docs/resharing.md): a description endorsed by the group key with the
 * new members' shares is followed by a holder of the old description; anything else is refused with a
 * code (another cluster, not newer, no or a bad endorsement, a change after signing, a malformed one).
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  clusterToJson,
  describeDealtKey,
  localEndpoints,
  parseCluster,
  type Cluster,
  type ClusterDescriptionJson,
} from '../../src/cluster/description.js';
import {
  combineEndorsement,
  followMembership,
  membershipMessage,
  signMembership,
} from '../../src/cluster/membership.js';
import { toHex } from '../../src/common/bytes.js';
import { isQuorumFenceError } from '../../src/common/errors.js';
import { loadBackend } from '../../src/crypto/load.js';
import { seededRandom } from '../../src/crypto/random.js';
import { dealKey, type DealtKey } from '../../src/crypto/threshold.js';
import { reshareByHand } from '../support/reshared-key.js';

const backend = loadBackend();

interface Generation {
  readonly key: DealtKey;
  readonly cluster: Cluster;
}

function generation(key: DealtKey, version: number, basePort: number): Generation {
  const json: ClusterDescriptionJson = { ...describeDealtKey(key, localEndpoints(key.n, basePort)) };
  if (version > 0) json.membershipVersion = version;
  return { key, cluster: parseCluster(json, { backend }) };
}

/** The endorsement of `g` by the given members (1-based indices of g). */
function endorse(g: Generation, signers: readonly number[]): string {
  const partials = signers.map((index) =>
    signMembership(g.cluster, index, backend.secretKeyFromBytes(g.key.shares[index - 1]!.scaledSecretShare)),
  );
  return toHex(combineEndorsement(g.cluster, partials).bytes);
}

function endorsedJson(g: Generation, signers: readonly number[]): ClusterDescriptionJson {
  return { ...clusterToJson(g.cluster), endorsement: endorse(g, signers) };
}

function refusal(current: Cluster, candidate: unknown): string {
  const outcome = followMembership(current, candidate);
  return outcome.ok ? 'followed' : outcome.code;
}

/** Distinct members 1..n, t of them, from fast-check's choices. */
function pick(n: number, t: number, choices: readonly number[]): number[] {
  const pool = Array.from({ length: n }, (_, i) => i + 1);
  return Array.from({ length: t }, (_, j) => pool.splice(choices[j % choices.length]! % pool.length, 1)[0]!);
}

describe('membership endorsed by the group key', () => {
  it('any t_new new members endorse a reshared membership (4 -> 7, replace, refresh); a holder of the old description follows it', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.constantFrom(4, 7),
        fc.array(fc.nat(), { minLength: 1, maxLength: 10 }),
        (seed, newN, choices) => {
          const random = seededRandom(seed);
          const old = generation(dealKey(4, 3, random), 0, 7101);
          const next = generation(reshareByHand(old.key, newN, random), 1, 7201);
          expect(next.cluster.idHex).toBe(old.cluster.idHex);
          const candidate = endorsedJson(next, pick(newN, next.cluster.t, choices));
          const outcome = followMembership(old.cluster, candidate);
          expect(outcome.ok).toBe(true);
          if (outcome.ok) {
            expect(outcome.cluster.membershipVersion).toBe(1);
            expect(outcome.cluster.replicas.map((r) => r.endpoint)).toEqual(localEndpoints(newN, 7201));
          }
        },
      ),
      { numRuns: 8 },
    );
  });

  describe('refusals, each with its code', () => {
    const random = seededRandom(new Uint8Array(32).fill(9));
    const old = generation(dealKey(4, 3, random), 3, 7101);
    const next = generation(reshareByHand(old.key, 7, random), 4, 7201);
    const valid = endorsedJson(next, [2, 4, 5, 6, 7]);

    it('the valid candidate is followed (the baseline of every refusal below)', () => {
      expect(refusal(old.cluster, valid)).toBe('followed');
    });

    it('an endorsement by another group key: MEMBERSHIP_NOT_ENDORSED', () => {
      const other = generation(reshareByHand(dealKey(4, 3, random), 7, random), 4, 7201);
      expect(refusal(old.cluster, { ...valid, endorsement: endorse(other, [1, 2, 3, 4, 5]) })).toBe(
        'MEMBERSHIP_NOT_ENDORSED',
      );
    });

    it('no endorsement: MEMBERSHIP_NOT_ENDORSED', () => {
      const { endorsement: _dropped, ...bare } = valid;
      expect(refusal(old.cluster, bare)).toBe('MEMBERSHIP_NOT_ENDORSED');
    });

    it('an equal or lower version: MEMBERSHIP_NOT_NEWER (even when endorsed)', () => {
      for (const version of [3, 2, 0]) {
        const g = generation(next.key, version, 7201);
        expect(refusal(old.cluster, endorsedJson(g, [1, 2, 3, 4, 5]))).toBe('MEMBERSHIP_NOT_NEWER');
      }
    });

    it('a member changed after signing (an endpoint, the version): MEMBERSHIP_NOT_ENDORSED', () => {
      const moved = JSON.parse(JSON.stringify(valid)) as ClusterDescriptionJson;
      moved.replicas[2]!.endpoint = 'ws://attacker.invalid:7203';
      expect(refusal(old.cluster, moved)).toBe('MEMBERSHIP_NOT_ENDORSED');
      expect(refusal(old.cluster, { ...valid, membershipVersion: 5 })).toBe('MEMBERSHIP_NOT_ENDORSED');
    });

    it('a description of another cluster, even endorsed by its own key: CLUSTER_MISMATCH', () => {
      const stranger = generation(dealKey(4, 3, random), 9, 7101);
      expect(refusal(old.cluster, endorsedJson(stranger, [1, 2, 3]))).toBe('CLUSTER_MISMATCH');
    });

    it('a truncated or garbled endorsement: BAD_CLUSTER naming the field', () => {
      expect(refusal(old.cluster, { ...valid, endorsement: valid.endorsement!.slice(0, 190) })).toBe('BAD_CLUSTER');
      expect(refusal(old.cluster, { ...valid, endorsement: 'zz' + valid.endorsement!.slice(2) })).toBe('BAD_CLUSTER');
      const outcome = followMembership(old.cluster, { ...valid, endorsement: valid.endorsement!.slice(0, 190) });
      expect(outcome.ok ? '' : outcome.message).toMatch(/"endorsement"/);
    });

    it('a malformed version: BAD_CLUSTER', () => {
      for (const membershipVersion of [-1, 1.5, '4', 2 ** 60])
        expect(refusal(old.cluster, { ...valid, membershipVersion })).toBe('BAD_CLUSTER');
    });

    it('combining refuses fewer than t valid partials, naming the bad ones (MEMBERSHIP_NOT_ENDORSED)', () => {
      const message = membershipMessage(next.cluster);
      const good = [1, 2, 3, 4].map((index) =>
        signMembership(next.cluster, index, backend.secretKeyFromBytes(next.key.shares[index - 1]!.scaledSecretShare)),
      );
      // Member 5 signs with member 6's share.
      const wrong = {
        index: 5,
        signature: backend.sign(backend.secretKeyFromBytes(next.key.shares[5]!.scaledSecretShare), message),
      };
      try {
        combineEndorsement(next.cluster, [...good, wrong, good[0]!]);
        expect.unreachable('combined');
      } catch (error) {
        expect(isQuorumFenceError(error, 'MEMBERSHIP_NOT_ENDORSED')).toBe(true);
        expect((error as Error).message).toMatch(/partials of 5 do not verify/);
      }
    });

    it('a description of membership 0 writes no new field and reads as before', () => {
      const json = clusterToJson(generation(old.key, 0, 7101).cluster);
      expect(Object.keys(json)).not.toContain('membershipVersion');
      expect(Object.keys(json)).not.toContain('endorsement');
      expect(parseCluster(json, { backend }).membershipVersion).toBe(0);
    });
  });
});
