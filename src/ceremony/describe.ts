/**
 * The public cluster description of a ceremony's result, built exactly as the
 * dealer's (describeDealtKey): the same Δ-scaled public key shares, the same
 * commitments, the same cluster id. Pure: commitments in, JSON out.
 */
import { toHex } from '../common/bytes.js';
import { CLUSTER_FORMAT, clusterIdOfKey, type ClusterDescriptionJson } from '../cluster/description.js';
import type { Proposal } from './proposal.js';
import { pointBytes, scaledPublicShare, type G1Point } from './vss.js';

export function describeCeremonyKey(
  proposal: Proposal,
  commitments: readonly G1Point[],
): { cluster: ClusterDescriptionJson; clusterId: Uint8Array } {
  const { n, t, f } = proposal;
  const publicShares = proposal.members.map((m) => scaledPublicShare(commitments, m.index, n));
  const commitmentBytes = commitments.map(pointBytes);
  const clusterId = clusterIdOfKey(commitmentBytes[0]!);
  return {
    clusterId,
    cluster: {
      format: CLUSTER_FORMAT,
      n,
      f,
      t,
      groupPublicKey: toHex(commitmentBytes[0]!),
      commitments: commitmentBytes.map(toHex),
      replicas: proposal.members.map((m) => ({
        index: m.index,
        publicKeyShare: toHex(publicShares[m.index - 1]!),
        endpoint: m.endpoint,
      })),
      clusterId: toHex(clusterId),
    },
  };
}
