/**
 * The one check of a holder's Ed25519 signature (common/holder-signature.ts), used by the replica's `hello` and
 * the guard's proof of possession: node's native verification must agree with the reference (noble, RFC 8032
 * strict) on honest and tampered signatures, and refuse the keys and encodings the reference refuses or that
 * verify forgeries.
 */
import { ed25519 } from '@noble/curves/ed25519.js';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { verifyHolderSignature } from '../../src/common/holder-signature.js';

/** The identity point's encoding, and a signature that verifies under it for any message (cofactored rules). */
const SMALL_ORDER_KEY = Uint8Array.from({ length: 32 }, (_, i) => (i === 0 ? 1 : 0));
const FORGED_SIGNATURE = Uint8Array.from({ length: 64 }, (_, i) => (i === 0 ? 1 : 0));
/** y = p + 1: a non-canonical encoding of a point (y >= p) that a lenient decoder accepts. */
const NON_CANONICAL_KEY = Uint8Array.from({ length: 32 }, (_, i) => (i === 0 ? 0xee : i === 31 ? 0x7f : 0xff));
/** The group order L, little-endian, for the malleated signature S + L. */
const ORDER = 2n ** 252n + 27742317777372353535851937790883648493n;

function addOrderToS(signature: Uint8Array): Uint8Array {
  let s = 0n;
  for (let i = 63; i >= 32; i--) s = (s << 8n) | BigInt(signature[i]!);
  let malleated = s + ORDER;
  const out = Uint8Array.from(signature);
  for (let i = 32; i < 64; i++) {
    out[i] = Number(malleated & 0xffn);
    malleated >>= 8n;
  }
  return out;
}

describe('verifyHolderSignature', () => {
  test('agrees with the RFC 8032 reference on honest signatures and on any one byte changed', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.uint8Array({ minLength: 0, maxLength: 200 }),
        fc.nat(),
        fc.integer({ min: 1, max: 255 }),
        fc.constantFrom('signature', 'message', 'key'),
        (seed, message, position, flip, what) => {
          const key = ed25519.getPublicKey(seed);
          const signature = ed25519.sign(message, seed);
          expect(verifyHolderSignature(key, message, signature)).toBe(true);
          const tampered = {
            key: Uint8Array.from(key),
            message: Uint8Array.from(message),
            signature: Uint8Array.from(signature),
          };
          const target = tampered[what];
          if (target.length === 0) return;
          target[position % target.length]! ^= flip;
          const reference = (() => {
            try {
              return ed25519.verify(tampered.signature, tampered.message, tampered.key, { zip215: false });
            } catch {
              return false;
            }
          })();
          expect(reference).toBe(false);
          expect(verifyHolderSignature(tampered.key, tampered.message, tampered.signature)).toBe(false);
        },
      ),
      { numRuns: 200 },
    );
  });

  test('refuses a small-order key whose forged signature passes cofactored rules, and a non-canonical key', () => {
    const message = new TextEncoder().encode('any message at all');
    expect(ed25519.verify(FORGED_SIGNATURE, message, SMALL_ORDER_KEY, { zip215: true })).toBe(true);
    expect(verifyHolderSignature(SMALL_ORDER_KEY, message, FORGED_SIGNATURE)).toBe(false);
    expect(verifyHolderSignature(NON_CANONICAL_KEY, message, FORGED_SIGNATURE)).toBe(false);
  });

  test('refuses a malleated signature (S + L), as the reference does', () => {
    const seed = ed25519.utils.randomSecretKey();
    const message = new TextEncoder().encode('hello');
    const malleated = addOrderToS(ed25519.sign(message, seed));
    const key = ed25519.getPublicKey(seed);
    expect(() => ed25519.verify(malleated, message, key, { zip215: false })).not.toThrow();
    expect(ed25519.verify(malleated, message, key, { zip215: false })).toBe(false);
    expect(verifyHolderSignature(key, message, malleated)).toBe(false);
  });

  test('is false, never a throw, for wrong lengths and wrong types', () => {
    const seed = ed25519.utils.randomSecretKey();
    const key = ed25519.getPublicKey(seed);
    const message = Uint8Array.of(1, 2, 3);
    const signature = ed25519.sign(message, seed);
    expect(verifyHolderSignature(key.subarray(1), message, signature)).toBe(false);
    expect(verifyHolderSignature(key, message, signature.subarray(1))).toBe(false);
    expect(verifyHolderSignature(new Uint8Array(32), message, signature)).toBe(false);
    expect(verifyHolderSignature('key' as unknown as Uint8Array, message, signature)).toBe(false);
    expect(verifyHolderSignature(key, null as unknown as Uint8Array, signature)).toBe(false);
    expect(verifyHolderSignature(key, message, [...signature] as unknown as Uint8Array)).toBe(false);
  });
});
