/**
 * The admission token: version ‖ grant body ‖ signature(96, compressed G2).
 * Text form: base64url of the binary, no padding. Decoding is strict: one
 * token has exactly one encoding, and every way bytes can be wrong has its
 * own error code.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { QuorumFenceError, type ErrorCode } from '../common/errors.js';
import { bytesEqual, concatBytes, copyBytes, fromBase64Url, toBase64Url, toHex } from '../common/bytes.js';
import { decodeResource } from '../common/check.js';
import { MAX_EPOCH, MAX_RESOURCE_BYTES, MIN_EPOCH } from '../common/limits.js';
import { SIGNATURE_BYTES, type BlsBackend, type Signature } from '../crypto/backend.js';
import { verifyBatcherFor } from '../crypto/verify-batch.js';
import type { Cluster } from '../cluster/description.js';
import { CLUSTER_ID_BYTES, HOLDER_BYTES, encodeGrantBody, grantMessage, type Grant } from './grant.js';

export const TOKEN_VERSION = 0x01;
/** version + clusterId + epoch + resourceLength + holder + signature, without the resource itself. */
const FIXED_BYTES = 1 + CLUSTER_ID_BYTES + 8 + 2 + HOLDER_BYTES + SIGNATURE_BYTES;
/** The longest token there can be: version, cluster id, epoch, length, 256-byte resource, holder, signature. */
export const MAX_TOKEN_BYTES = FIXED_BYTES + MAX_RESOURCE_BYTES;
/** Its text form (base64url, no padding). */
export const MAX_TOKEN_TEXT_LENGTH = Math.ceil((MAX_TOKEN_BYTES * 4) / 3);

export interface AdmissionToken {
  readonly grant: Grant;
  readonly signature: Signature;
  /** The canonical binary encoding. */
  readonly bytes: Uint8Array;
}

/** Assembles a token from a grant and its (already combined) group signature. */
export function encodeToken(grant: Grant, signature: Signature): AdmissionToken {
  return {
    grant,
    signature,
    bytes: concatBytes(Uint8Array.of(TOKEN_VERSION), encodeGrantBody(grant), signature.bytes),
  };
}

export function tokenToText(token: AdmissionToken): string {
  return toBase64Url(token.bytes);
}

/** SHA-256 of the binary token: names a token in caches, guard logs and evidence. */
export function tokenDigest(token: AdmissionToken): Uint8Array {
  return sha256(token.bytes);
}

function fail(code: ErrorCode, message: string): never {
  throw new QuorumFenceError(code, `admission token: ${message}`);
}

/**
 * Decodes a binary token, checking every field and the signature point
 * (canonical, on curve, in subgroup, not identity). Does not check the
 * signature itself: see verifyToken.
 * @throws QuorumFenceError BAD_LENGTH, UNKNOWN_VERSION, TRAILING_BYTES, EPOCH_OUT_OF_RANGE,
 *   RESOURCE_EMPTY, RESOURCE_TOO_LONG, RESOURCE_NOT_UTF8, POINT_NOT_CANONICAL, POINT_NOT_ON_CURVE,
 *   POINT_NOT_IN_SUBGROUP, POINT_IDENTITY, INVALID_ARGUMENT (not bytes)
 */
export function decodeToken(bytes: Uint8Array, backend: BlsBackend): AdmissionToken {
  if (!(bytes instanceof Uint8Array)) fail('INVALID_ARGUMENT', 'expected bytes');
  // First, before any field is read, as every verifier does (docs/protocol.md, "Token": the order of checks).
  if (bytes.length > MAX_TOKEN_BYTES) fail('BAD_LENGTH', `longer than ${MAX_TOKEN_BYTES} bytes`);
  if (bytes.length === 0) fail('BAD_LENGTH', 'empty');
  if (bytes[0] !== TOKEN_VERSION)
    fail('UNKNOWN_VERSION', `unknown version byte 0x${bytes[0]!.toString(16).padStart(2, '0')}`);
  const headerBytes = 1 + CLUSTER_ID_BYTES + 8 + 2;
  if (bytes.length < headerBytes) fail('BAD_LENGTH', `expected at least ${FIXED_BYTES + 1} bytes, got ${bytes.length}`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let offset = 1;
  // Real copies throughout (copyBytes): a Buffer's slice is a view, and the token must not share the caller's memory.
  const clusterId = copyBytes(bytes.subarray(offset, (offset += CLUSTER_ID_BYTES)));
  const epoch = view.getBigUint64(offset);
  offset += 8;
  if (epoch < MIN_EPOCH || epoch > MAX_EPOCH) fail('EPOCH_OUT_OF_RANGE', `epoch ${epoch} outside 1 .. 2^63-1`);
  const resourceLength = view.getUint16(offset);
  offset += 2;
  if (resourceLength === 0) fail('RESOURCE_EMPTY', 'resource must not be empty');
  if (resourceLength > MAX_RESOURCE_BYTES)
    fail('RESOURCE_TOO_LONG', `resource length ${resourceLength} exceeds ${MAX_RESOURCE_BYTES}`);
  const expectedLength = FIXED_BYTES + resourceLength;
  if (bytes.length < expectedLength) fail('BAD_LENGTH', `expected ${expectedLength} bytes, got ${bytes.length}`);
  if (bytes.length > expectedLength)
    fail('TRAILING_BYTES', `${bytes.length - expectedLength} bytes after the signature`);
  const resource = decodeResource(bytes.subarray(offset, (offset += resourceLength)));
  const holder = copyBytes(bytes.subarray(offset, (offset += HOLDER_BYTES)));
  const signature = backend.decodeSignature(bytes.subarray(offset, offset + SIGNATURE_BYTES), 'token signature');
  return { grant: { clusterId, resource, epoch, holder }, signature, bytes: copyBytes(bytes) };
}

/**
 * Decodes the text form. Text longer than the longest token's is refused before it is decoded at all, so an
 * oversized input costs nothing.
 * @throws QuorumFenceError BAD_LENGTH, BAD_ENCODING, and everything decodeToken throws.
 */
export function decodeTokenText(text: string, backend: BlsBackend): AdmissionToken {
  if (typeof text === 'string' && text.length > MAX_TOKEN_TEXT_LENGTH)
    fail('BAD_LENGTH', `longer than ${MAX_TOKEN_TEXT_LENGTH} characters`);
  return decodeToken(fromBase64Url(text, 'admission token'), backend);
}

export type TokenVerification =
  | { readonly ok: true; readonly token: AdmissionToken }
  | { readonly ok: false; readonly reason: 'wrong_cluster'; readonly message: string }
  | { readonly ok: false; readonly reason: 'bad_signature'; readonly message: string };

/**
 * What verifying a token needs of a cluster: its id, its group key and a backend. A loaded `Cluster` is one;
 * the universal verifier (src/verify) makes one from a pinned id and key without loading a description.
 */
export type TokenTrust = Pick<Cluster, 'id' | 'idHex' | 'groupPublicKey' | 'backend'>;

/** The cluster-id rule: a token of another cluster is refused before any pairing. */
function clusterMismatch(token: AdmissionToken, cluster: TokenTrust): TokenVerification | undefined {
  if (bytesEqual(token.grant.clusterId, cluster.id)) return undefined;
  return {
    ok: false,
    reason: 'wrong_cluster',
    message: `token is for cluster ${toHex(token.grant.clusterId).slice(0, 16)}…, not ${cluster.idHex.slice(0, 16)}…`,
  };
}

const BAD_SIGNATURE: TokenVerification = {
  ok: false,
  reason: 'bad_signature',
  message: 'signature does not verify against the group public key',
};

/** Checks the token is for this cluster and its signature verifies against the group key. One pairing. */
export function verifyToken(token: AdmissionToken, cluster: TokenTrust): TokenVerification {
  const mismatch = clusterMismatch(token, cluster);
  if (mismatch) return mismatch;
  if (!cluster.backend.verify(cluster.groupPublicKey, grantMessage(token.grant), token.signature)) return BAD_SIGNATURE;
  return { ok: true, token };
}

/** `verifyToken`, with the pairing run in the process's batch of checks (src/crypto/verify-batch.ts). */
export async function verifyTokenBatched(token: AdmissionToken, cluster: TokenTrust): Promise<TokenVerification> {
  const mismatch = clusterMismatch(token, cluster);
  if (mismatch) return mismatch;
  const valid = await verifyBatcherFor(cluster.backend).verify(
    cluster.groupPublicKey,
    grantMessage(token.grant),
    token.signature,
  );
  return valid ? { ok: true, token } : BAD_SIGNATURE;
}

export type TokenCheck =
  | TokenVerification
  | { readonly ok: false; readonly reason: 'malformed'; readonly code: ErrorCode; readonly message: string };

/**
 * Decodes (binary or text form) and verifies, with every failure as a value:
 * the entry point for anything that receives a token from outside.
 */
export function checkToken(input: Uint8Array | string, cluster: TokenTrust): TokenCheck {
  let token: AdmissionToken;
  try {
    token = typeof input === 'string' ? decodeTokenText(input, cluster.backend) : decodeToken(input, cluster.backend);
  } catch (error) {
    if (error instanceof QuorumFenceError)
      return { ok: false, reason: 'malformed', code: error.code, message: error.message };
    throw error;
  }
  return verifyToken(token, cluster);
}
