/**
 * Which Ed25519 public keys may name a holder. RFC 8032 verification under a
 * small-order key is meaningless: with holder `01 ‖ 00×31` (the identity) the
 * signature `01 ‖ 00×63` verifies for every message under cofactored or
 * ZIP-215 rules, so anyone could authenticate as that holder or forge its
 * proofs. Honest keys are `a·B`, never small-order, and always canonically
 * encoded, so both are refused wherever a holder key arrives: the replica's
 * authentication and the proof-of-possession guard.
 */
import { ed25519 } from '@noble/curves/ed25519.js';

/**
 * True when `publicKey` is 32 bytes that canonically encode (y below the
 * field modulus, the RFC 8032 rule) a curve point that is not of small order.
 * Never throws. Mixed-order keys (a torsion component added to a real key)
 * are not refused here: they cannot sign for the key without it.
 */
export function isUsableHolderKey(publicKey: Uint8Array): boolean {
  if (!(publicKey instanceof Uint8Array) || publicKey.length !== 32) return false;
  try {
    // zip215 = false: the strict decoding that refuses y >= p.
    return !ed25519.Point.fromBytes(publicKey, false).isSmallOrder();
  } catch {
    return false;
  }
}
