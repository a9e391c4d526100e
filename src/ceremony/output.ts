/**
 * What a member keeps from a successful ceremony, in its own data directory:
 *   replica.key    its Δ-scaled share (quorumfence/replica-key/v1, mode 0600)
 *   cluster.json   the public description, as `keygen` writes it, plus a
 *                  `ceremony` block: the proposal digest, the members' node
 *                  keys, the qualified and excluded dealers, and the
 *                  signatures of the members that confirmed the cluster id
 * Nothing is written on an abort. Files are written exclusively: a data
 * directory that already holds a key is refused before the ceremony starts.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { fromHex, toHex } from '../common/bytes.js';
import { writeFileDurably } from '../common/files.js';
import { checkCeremonyRecord, type CeremonyRecordJson } from '../cluster/ceremony-record.js';
import type { ClusterDescriptionJson } from '../cluster/description.js';
import { REPLICA_KEY_FORMAT, type ReplicaKeyJson } from '../cluster/replica-key.js';
import type { Proposal } from './proposal.js';
import type { CeremonyResult } from './events.js';

export const REPLICA_KEY_FILE = 'replica.key';
export const CLUSTER_FILE = 'cluster.json';

export type { CeremonyRecordJson } from '../cluster/ceremony-record.js';

export type CeremonyClusterJson = ClusterDescriptionJson & { ceremony: CeremonyRecordJson };

export function ceremonyClusterJson(proposal: Proposal, result: CeremonyResult): CeremonyClusterJson {
  return {
    ...result.cluster,
    ceremony: {
      proposal: toHex(proposal.digest),
      ceremonyId: toHex(proposal.ceremonyId),
      members: proposal.members.map((m) => ({ index: m.index, nodeKey: toHex(m.nodeKey) })),
      qualified: result.qualified,
      excluded: result.excluded,
      signatures: result.signatures.map((s) => ({ index: s.index, signature: toHex(s.signature) })),
    },
  };
}

/**
 * Checks the member signatures of a ceremony's cluster.json (checkCeremonyRecord, the check every load of a
 * description makes): each valid under the member's node key over the proposal digest and cluster id.
 * @returns the indices of the confirming members
 * @throws QuorumFenceError BAD_CLUSTER naming the field that fails
 */
export function verifiedSigners(json: CeremonyClusterJson): number[] {
  return checkCeremonyRecord(json.ceremony, { id: fromHex(json.clusterId, 32, 'clusterId'), n: json.n, t: json.t });
}

/**
 * Refuses a data directory that already holds a ceremony's output.
 * @throws QuorumFenceError FILE_EXISTS
 */
export function assertNoKeyYet(dataDir: string): void {
  for (const name of [REPLICA_KEY_FILE, CLUSTER_FILE]) {
    const path = join(dataDir, name);
    if (existsSync(path)) {
      throw new QuorumFenceError(
        'FILE_EXISTS',
        `${path} already exists; this replica already has a key (move it away to run a new ceremony)`,
        { path },
      );
    }
  }
}

/**
 * Writes the key (0600) then the public description into the data directory;
 * optionally a copy of the public description elsewhere.
 * @throws QuorumFenceError FILE_EXISTS, IO_ERROR
 */
export function writeCeremonyOutput(
  dataDir: string,
  proposal: Proposal,
  self: number,
  result: CeremonyResult,
  publishTo?: string,
): { keyPath: string; clusterPath: string } {
  const keyJson: ReplicaKeyJson = {
    format: REPLICA_KEY_FORMAT,
    clusterId: result.cluster.clusterId,
    index: self,
    secretShare: toHex(result.scaledSecretShare),
  };
  const keyPath = join(dataDir, REPLICA_KEY_FILE);
  const clusterPath = join(dataDir, CLUSTER_FILE);
  const text = JSON.stringify(ceremonyClusterJson(proposal, result), null, 2) + '\n';
  writeFileDurably(keyPath, JSON.stringify(keyJson, null, 2) + '\n', { mode: 0o600, exclusive: true });
  writeFileDurably(clusterPath, text);
  if (publishTo) writeFileDurably(publishTo, text);
  return { keyPath, clusterPath };
}
