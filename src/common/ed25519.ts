/**
 * Ed25519, once for the whole project: which public keys are accepted, how a
 * signature is checked, and how a key signs. Holders use it (a client's
 * identity, its `hello` to each replica, its proofs of possession to a
 * guard), and so do members of the key ceremony (their node keys sign every
 * packet and the cluster file).
 *
 * Keys. RFC 8032 verification under a small-order key is meaningless: with
 * key `01 ‖ 00×31` (the identity) the signature `01 ‖ 00×63` verifies for
 * every message under cofactored or ZIP-215 rules, so anyone could
 * authenticate as that holder or forge its packets. Honest keys are `a·B`,
 * never small-order, and always canonically encoded (y < p), so both kinds
 * are refused wherever a key arrives.
 *
 * Verification and signing are node's native Ed25519: the pure-JavaScript
 * one costs about 1 ms per check and 0.4 ms per signature on the bench
 * machine, the native one a tenth or less (`bench replica`, "connections
 * authenticating at once"). A replica that restarts is met by every client
 * reconnecting at the same moment, and a proof-of-possession guard has every
 * request signed. Ed25519 signatures are deterministic, so the bytes are any
 * RFC 8032 signer's; unit tests hold both halves to the pure-JavaScript
 * reference.
 *
 * Node-only (node:crypto). The universal token verifier (src/verify) checks
 * BLS only and does not import this.
 */
import { createPrivateKey, createPublicKey, randomFillSync, sign, verify, type KeyObject } from 'node:crypto';
import { ed25519 } from '@noble/curves/ed25519.js';
import { BoundedMap } from './bounded-map.js';
import { concatBytes } from './bytes.js';

export const ED25519_PUBLIC_KEY_BYTES = 32;
export const ED25519_SIGNATURE_BYTES = 64;
export const ED25519_SEED_BYTES = 32;

/**
 * True when `publicKey` is 32 bytes that canonically encode (y below the
 * field modulus, the RFC 8032 rule) a curve point that is not of small order.
 * Never throws. Mixed-order keys (a torsion component added to a real key)
 * are not refused here: they cannot sign for the key without it.
 */
export function isUsableEd25519Key(publicKey: Uint8Array): boolean {
  if (!(publicKey instanceof Uint8Array) || publicKey.length !== ED25519_PUBLIC_KEY_BYTES) return false;
  try {
    // zip215 = false: the strict decoding that refuses y >= p.
    return !ed25519.Point.fromBytes(publicKey, false).isSmallOrder();
  } catch {
    return false;
  }
}

// DER headers for raw Ed25519 keys (RFC 8410): node's crypto takes keys only wrapped.
const SPKI_PREFIX = Uint8Array.from([0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00]);
const PKCS8_PREFIX = Uint8Array.from([
  0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
]);

/** Imported public keys, bounded: an import costs about as much as a check, and the same keys come back. */
const KEY_CACHE_LIMIT = 1024;
const importedKeys = new BoundedMap<string, KeyObject>(KEY_CACHE_LIMIT);

function publicKeyObject(publicKey: Uint8Array): KeyObject | undefined {
  const id = Buffer.from(publicKey).toString('hex');
  let key = importedKeys.get(id);
  if (!key) {
    if (!isUsableEd25519Key(publicKey)) return undefined;
    try {
      key = createPublicKey({ key: Buffer.from(concatBytes(SPKI_PREFIX, publicKey)), format: 'der', type: 'spki' });
    } catch {
      return undefined; // not a point on the curve: no signature can verify under it
    }
    importedKeys.set(id, key);
  }
  return key;
}

/**
 * True when `signature` is `publicKey`'s Ed25519 signature over `message`
 * (RFC 8032; S must be below the group order) and `publicKey` is a usable
 * key. Never throws: bytes of any kind or length only make it false.
 */
export function verifyEd25519(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
  if (!(publicKey instanceof Uint8Array) || !(signature instanceof Uint8Array) || !(message instanceof Uint8Array))
    return false;
  if (publicKey.length !== ED25519_PUBLIC_KEY_BYTES || signature.length !== ED25519_SIGNATURE_BYTES) return false;
  const key = publicKeyObject(publicKey);
  if (!key) return false;
  try {
    return verify(null, message, key, signature);
  } catch {
    return false;
  }
}

/** A key that signs; its secret stays inside node's key object. */
export interface Ed25519Signer {
  readonly publicKey: Uint8Array;
  sign(message: Uint8Array): Uint8Array;
}

/**
 * The signer for a 32-byte seed (RFC 8032's secret key). The key object keeps
 * its own copy: a caller may wipe or reuse `seed` afterwards.
 */
export function ed25519Signer(seed: Uint8Array): Ed25519Signer {
  const der = Buffer.from(concatBytes(PKCS8_PREFIX, seed));
  const key = createPrivateKey({ key: der, format: 'der', type: 'pkcs8' });
  der.fill(0);
  const publicKey = new Uint8Array(Buffer.from(createPublicKey(key).export({ format: 'jwk' }).x!, 'base64url'));
  return { publicKey, sign: (message) => new Uint8Array(sign(null, message, key)) };
}

/** A fresh seed from the OS CSPRNG. */
export function newEd25519Seed(): Uint8Array {
  return randomFillSync(new Uint8Array(ED25519_SEED_BYTES));
}
