/**
 * The grant: (cluster id, resource, epoch, holder). Replicas sign its message;
 * it carries no time, so a guard needs no clock to check it (S6).
 *
 *   grant body    = clusterId(32) ‖ epoch(u64) ‖ resourceLength(u16) ‖ resource ‖ holder(32)
 *   grant message = "quorumfence/grant/v1" ‖ grant body
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { concatBytes, copyBytes, lengthPrefixed, u64be } from '../common/bytes.js';
import { expectBytes, expectEpoch, expectResource } from '../common/check.js';

export const GRANT_DOMAIN_TAG = new TextEncoder().encode('quorumfence/grant/v1');
export const CLUSTER_ID_BYTES = 32;
export const HOLDER_BYTES = 32;

export interface Grant {
  /** 32 bytes. */
  readonly clusterId: Uint8Array;
  readonly resource: string;
  /** 1 .. 2^63-1 */
  readonly epoch: bigint;
  /** Ed25519 public key, 32 bytes. */
  readonly holder: Uint8Array;
}

/**
 * Checks the fields and returns a Grant.
 * @throws QuorumFenceError INVALID_ARGUMENT, BAD_LENGTH, EPOCH_OUT_OF_RANGE, RESOURCE_EMPTY, RESOURCE_TOO_LONG, RESOURCE_NOT_UTF8
 */
export function makeGrant(fields: { clusterId: unknown; resource: unknown; epoch: unknown; holder: unknown }): Grant {
  // Copies: the grant must not share memory the caller may change later.
  const clusterId = copyBytes(expectBytes(fields.clusterId, CLUSTER_ID_BYTES, 'clusterId'));
  expectResource(fields.resource);
  const epoch = expectEpoch(fields.epoch);
  const holder = copyBytes(expectBytes(fields.holder, HOLDER_BYTES, 'holder'));
  return { clusterId, resource: fields.resource as string, epoch, holder };
}

/** clusterId ‖ epoch ‖ resourceLength ‖ resource ‖ holder: the token's bytes between version and signature. */
export function encodeGrantBody(grant: Grant): Uint8Array {
  const resource = expectResource(grant.resource);
  return concatBytes(grant.clusterId, u64be(grant.epoch), lengthPrefixed(resource), grant.holder);
}

/** What replicas sign: the domain tag followed by the grant body. */
export function grantMessage(grant: Grant): Uint8Array {
  return concatBytes(GRANT_DOMAIN_TAG, encodeGrantBody(grant));
}

/** SHA-256 of the grant message: names a grant in signing records and evidence. */
export function grantDigest(grant: Grant): Uint8Array {
  return sha256(grantMessage(grant));
}
