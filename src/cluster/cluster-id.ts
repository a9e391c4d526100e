/**
 * The v2 cluster id, in a module of its own with no Node dependency: the universal verifier
 * (quorumfence/verify) checks a pinned id against its group key with it.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { concatBytes } from '../common/bytes.js';

/**
 * v2: the cluster id is SHA-256(format ‖ group public key) only, so it
 * survives a reshare (new members, n, t and shares; the same key): guards
 * pin it and keep working across membership changes (docs/resharing.md).
 */
export const CLUSTER_FORMAT = 'quorumfence/cluster/v2';

/** The v2 cluster id: SHA-256("quorumfence/cluster/v2" ‖ groupPublicKey). */
export function clusterIdOfKey(groupPublicKey: Uint8Array): Uint8Array {
  return sha256(concatBytes(new TextEncoder().encode(CLUSTER_FORMAT), groupPublicKey));
}
