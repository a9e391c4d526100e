/**
 * `quorumfence/verify`: the token verifier for browsers, Deno, Bun and edge workers. Pure ESM on
 * `@noble/curves` and `@noble/hashes`, no Node built-ins, `Uint8Array` only; the decoding and the checks are
 * the Node verifier's own (src/token), with the same results and error codes.
 *
 * The barrier stays with the caller: a verified token proves who was granted which epoch, not that it is
 * still the newest. Keep, per resource, the highest epoch you accepted, and refuse a lower one, in the same
 * atomic step as the write it guards (docs/protocol.md, "Guard rules").
 */
import { QuorumFenceError } from '../common/errors.js';
import { bytesEqual, fromHex, toHex } from '../common/bytes.js';
import { clusterIdOfKey, CLUSTER_FORMAT } from '../cluster/cluster-id.js';
import { createNobleBackend } from '../crypto/noble.js';
import { checkToken, type AdmissionToken, type TokenCheck, type TokenTrust } from '../token/admission-token.js';

export type { AdmissionToken, TokenCheck };
export { QuorumFenceError };

/** What to pin: from the cluster's `cluster.json` (the object itself will do), both lowercase hex. */
export interface PinnedCluster {
  /** The cluster id, 32 bytes. */
  readonly clusterId: string;
  /** The group public key, a 48-byte compressed G1 point. */
  readonly groupPublicKey: string;
  /** The description format; for `quorumfence/cluster/v2` (or none given) the id must be the key's v2 id. */
  readonly format?: string;
}

export interface TokenVerifier {
  /** The pinned cluster id, hex. */
  readonly clusterId: string;
  /**
   * Decodes (base64url text or the binary form) and verifies one token. Every failure is a value:
   * `malformed` with the decoder's code, `wrong_cluster`, or `bad_signature`.
   */
  check(token: string | Uint8Array): TokenCheck;
}

/**
 * A verifier pinned to one cluster.
 * @throws QuorumFenceError BAD_ENCODING / BAD_LENGTH for a malformed id or key, POINT_* for a key that is not
 *   a valid G1 point, CLUSTER_MISMATCH when a v2 id is not its key's.
 */
export function createTokenVerifier(pinned: PinnedCluster): TokenVerifier {
  const backend = createNobleBackend();
  const id = fromHex(pinned.clusterId, 32, 'clusterId');
  const groupPublicKey = backend.decodePublicKey(
    fromHex(pinned.groupPublicKey, 48, 'groupPublicKey'),
    'groupPublicKey',
  );
  if (
    (pinned.format === undefined || pinned.format === CLUSTER_FORMAT) &&
    !bytesEqual(id, clusterIdOfKey(groupPublicKey.bytes))
  )
    throw new QuorumFenceError('CLUSTER_MISMATCH', 'the pinned cluster id is not the id of the pinned group key');
  const trust: TokenTrust = { id, idHex: toHex(id), groupPublicKey, backend };
  return {
    clusterId: trust.idHex,
    check: (token) => checkToken(token, trust),
  };
}
