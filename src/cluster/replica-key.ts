/**
 * A replica's key file: its index and its Δ-scaled secret share. The file is
 * written with mode 0600 and never overwritten; loading checks it belongs to
 * the cluster and that the share matches the published public key share
 * (which the cluster load already checked against the Feldman commitments).
 */
import { QuorumFenceError } from '../common/errors.js';
import { bytesEqual, fromHex, toHex } from '../common/bytes.js';
import { readJsonFile } from '../common/files.js';
import { SECRET_KEY_BYTES, type SecretKey } from '../crypto/backend.js';
import { publicKeyShareOf, type DealtShare } from '../crypto/threshold.js';
import type { Cluster } from './description.js';

export const REPLICA_KEY_FORMAT = 'quorumfence/replica-key/v1';

export interface ReplicaKeyJson {
  format: typeof REPLICA_KEY_FORMAT;
  clusterId: string;
  index: number;
  /** sᵢ·Δ⁻¹ mod r, 32 bytes hex. Secret. */
  secretShare: string;
}

export interface ReplicaKey {
  readonly index: number;
  readonly secretKey: SecretKey;
}

export function replicaKeyJson(clusterIdHex: string, share: DealtShare): ReplicaKeyJson {
  return {
    format: REPLICA_KEY_FORMAT,
    clusterId: clusterIdHex,
    index: share.index,
    secretShare: toHex(share.scaledSecretShare),
  };
}

function bad(path: string, message: string): never {
  throw new QuorumFenceError('BAD_KEY_FILE', `replica key ${path}: ${message}`, { path });
}

/**
 * Reads a replica key file and checks it against the cluster.
 * @throws QuorumFenceError IO_ERROR, BAD_KEY_FILE, UNKNOWN_VERSION, CLUSTER_MISMATCH, SHARE_MISMATCH
 */
export function loadReplicaKeyFile(path: string, cluster: Cluster): ReplicaKey {
  return parseReplicaKey(readJsonFile(path, 'replica key', 'BAD_KEY_FILE'), cluster, path);
}

export function parseReplicaKey(json: unknown, cluster: Cluster, path = '(key)'): ReplicaKey {
  if (typeof json !== 'object' || json === null) bad(path, 'expected a JSON object');
  const k = json as Record<string, unknown>;
  if (k.format !== REPLICA_KEY_FORMAT) {
    throw new QuorumFenceError(
      'UNKNOWN_VERSION',
      `replica key ${path}: "format" expected "${REPLICA_KEY_FORMAT}", got ${JSON.stringify(k.format)}`,
    );
  }
  if (k.clusterId !== cluster.idHex) {
    throw new QuorumFenceError(
      'CLUSTER_MISMATCH',
      `replica key ${path} belongs to cluster ${String(k.clusterId).slice(0, 16)}…, not ${cluster.idHex.slice(0, 16)}…`,
    );
  }
  if (typeof k.index !== 'number' || !Number.isInteger(k.index) || k.index < 1 || k.index > cluster.n) {
    bad(path, `"index" expected 1..${cluster.n}, got ${JSON.stringify(k.index)}`);
  }
  let secretBytes: Uint8Array;
  try {
    secretBytes = fromHex(k.secretShare, SECRET_KEY_BYTES, 'secretShare');
  } catch (error) {
    bad(path, (error as Error).message);
  }
  const expected = cluster.replicas[k.index - 1]!.publicKeyShare.bytes;
  if (!bytesEqual(publicKeyShareOf(secretBytes), expected)) {
    throw new QuorumFenceError(
      'SHARE_MISMATCH',
      `replica key ${path}: the secret share does not match replica ${k.index}'s public key share in the cluster description`,
      { path, index: k.index },
    );
  }
  const secretKey = cluster.backend.secretKeyFromBytes(secretBytes);
  secretBytes.fill(0);
  return { index: k.index, secretKey };
}
