/**
 * The ceremony's pure core: with every member honest, in any delivery order,
 * every member ends with the same cluster, whose group key is the sum of the
 * qualified dealers' constant commitments, whose public shares match the
 * commitments, and whose shares make tokens that verify.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { parseCluster } from '../../src/cluster/description.js';
import { parseReplicaKey, replicaKeyJson } from '../../src/cluster/replica-key.js';
import { groupKeyOf } from '../../src/ceremony/dealing.js';
import { decodeCommitments } from '../../src/ceremony/vss.js';
import { toHex } from '../../src/common/bytes.js';
import { loadBackend } from '../../src/crypto/load.js';
import { combinePartials } from '../../src/crypto/threshold.js';
import { encodeToken, verifyToken } from '../../src/token/admission-token.js';
import { grantMessage, makeGrant } from '../../src/token/grant.js';
import { simulateCeremony } from '../support/ceremony-sim.js';

const backend = loadBackend('blst');

describe('ceremony core: honest members agree on one key', () => {
  it('any delivery order: same cluster everywhere, group key = Σ constant commitments, shares match, a token verifies', () => {
    fc.assert(
      fc.property(fc.constantFrom(4, 7), fc.array(fc.nat(), { minLength: 1, maxLength: 50 }), (n, choices) => {
        let k = 0;
        const sim = simulateCeremony(n, { pick: () => choices[k++ % choices.length]! });
        const results = sim.members.map((m) => m.result);
        expect(results.every((r) => r !== undefined)).toBe(true);
        const ids = new Set(results.map((r) => r!.cluster.clusterId));
        expect(ids.size).toBe(1);
        const first = results[0]!;
        expect(first.qualified).toEqual(Array.from({ length: n }, (_, i) => i + 1));
        expect(first.signatures.length).toBe(n);
        // Group key = Σ of the qualified dealers' constant commitments, from the deals themselves.
        const dealVectors = first.qualified.map((dealer) => {
          const deal = sim.members[0]!.dealCommitments(dealer)!;
          return decodeCommitments(deal, sim.proposal.t);
        });
        expect(first.cluster.groupPublicKey).toBe(toHex(groupKeyOf(dealVectors)));
        // parseCluster checks every public share against the commitments and recomputes the id.
        const cluster = parseCluster(first.cluster, { backend });
        const keys = results.map((r, i) =>
          parseReplicaKey(
            replicaKeyJson(cluster.idHex, {
              index: i + 1,
              scaledSecretShare: r!.scaledSecretShare,
              publicKeyShare: new Uint8Array(),
            }),
            cluster,
          ),
        );
        const grant = makeGrant({
          clusterId: cluster.id,
          resource: 'orders',
          epoch: 1n,
          holder: new Uint8Array(32).fill(9),
        });
        const signers = keys.slice(n - sim.proposal.t);
        const signature = combinePartials(
          backend,
          n,
          signers.map((key) => ({ index: key.index, signature: backend.sign(key.secretKey, grantMessage(grant)) })),
        )!;
        expect(verifyToken(encodeToken(grant, signature), cluster).ok).toBe(true);
      }),
      { numRuns: 12 },
    );
  });
});
