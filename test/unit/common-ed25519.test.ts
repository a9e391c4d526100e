/**
 * The project's one Ed25519 (common/ed25519.ts): used by the replica's `hello`, the guard's proof of possession,
 * client identities and the key ceremony's node keys. Node's native verification must agree with the reference
 * (noble, RFC 8032 strict) on honest and tampered signatures and refuse the keys and encodings that verify
 * forgeries; native signing must give the reference's bytes.
 */
import { ed25519 } from '@noble/curves/ed25519.js';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { ed25519Signer, isUsableEd25519Key, newEd25519Seed, verifyEd25519 } from '../../src/common/ed25519.js';

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

describe('ed25519Signer', () => {
  test('signs the bytes of the reference under its public key, and keeps its own copy of the seed', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.uint8Array({ maxLength: 200 }),
        (seed, message) => {
          const copy = Uint8Array.from(seed);
          const signer = ed25519Signer(seed);
          seed.fill(0);
          expect(signer.publicKey).toEqual(ed25519.getPublicKey(copy));
          expect(signer.sign(message)).toEqual(ed25519.sign(message, copy));
          expect(verifyEd25519(signer.publicKey, message, signer.sign(message))).toBe(true);
        },
      ),
      { numRuns: 100 },
    );
    expect(newEd25519Seed()).toHaveLength(32);
    expect(newEd25519Seed()).not.toEqual(newEd25519Seed());
  });
});

describe('verifyEd25519', () => {
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
          expect(verifyEd25519(key, message, signature)).toBe(true);
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
          expect(verifyEd25519(tampered.key, tampered.message, tampered.signature)).toBe(false);
        },
      ),
      { numRuns: 200 },
    );
  });

  test('refuses a small-order key whose forged signature passes cofactored rules, and a non-canonical key', () => {
    const message = new TextEncoder().encode('any message at all');
    expect(ed25519.verify(FORGED_SIGNATURE, message, SMALL_ORDER_KEY, { zip215: true })).toBe(true);
    expect(verifyEd25519(SMALL_ORDER_KEY, message, FORGED_SIGNATURE)).toBe(false);
    expect(verifyEd25519(NON_CANONICAL_KEY, message, FORGED_SIGNATURE)).toBe(false);
    expect([isUsableEd25519Key(SMALL_ORDER_KEY), isUsableEd25519Key(NON_CANONICAL_KEY)]).toEqual([false, false]);
  });

  test('refuses a malleated signature (S + L), as the reference does', () => {
    const seed = ed25519.utils.randomSecretKey();
    const message = new TextEncoder().encode('hello');
    const malleated = addOrderToS(ed25519.sign(message, seed));
    const key = ed25519.getPublicKey(seed);
    expect(() => ed25519.verify(malleated, message, key, { zip215: false })).not.toThrow();
    expect(ed25519.verify(malleated, message, key, { zip215: false })).toBe(false);
    expect(verifyEd25519(key, message, malleated)).toBe(false);
  });

  test('is false, never a throw, for wrong lengths and wrong types', () => {
    const seed = ed25519.utils.randomSecretKey();
    const key = ed25519.getPublicKey(seed);
    const message = Uint8Array.of(1, 2, 3);
    const signature = ed25519.sign(message, seed);
    expect(verifyEd25519(key.subarray(1), message, signature)).toBe(false);
    expect(verifyEd25519(key, message, signature.subarray(1))).toBe(false);
    expect(verifyEd25519(new Uint8Array(32), message, signature)).toBe(false);
    expect(verifyEd25519('key' as unknown as Uint8Array, message, signature)).toBe(false);
    expect(verifyEd25519(key, null as unknown as Uint8Array, signature)).toBe(false);
    expect(verifyEd25519(key, message, [...signature] as unknown as Uint8Array)).toBe(false);
  });
});
