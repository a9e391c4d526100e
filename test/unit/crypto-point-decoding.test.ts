/**
 * S5 unforgeability starts at decoding: every malformed point is refused, each
 * way with its own code, by both backends alike.
 */
import { describe, expect, it } from 'vitest';
import { bls12_381 } from '@noble/curves/bls12-381.js';
import { loadBackend } from '../../src/crypto/load.js';
import { FIELD_MODULUS } from '../../src/crypto/point-encoding.js';
import { bigIntToBytes } from '../../src/common/bytes.js';
import { codeOf } from '../support/error-code.js';

const backends = [loadBackend('noble'), loadBackend('blst')];
const Fp = bls12_381.fields.Fp;
const Fp2 = bls12_381.fields.Fp2;

/** A compressed G1 encoding of some x: on the curve (y² = x³ + 4) or not, as asked. */
function g1Encoding(onCurve: boolean): Uint8Array {
  for (let x = 1n; x < 1000n; x++) {
    const rhs = Fp.add(Fp.pow(x, 3n), 4n);
    const isSquare = Fp.pow(rhs, (FIELD_MODULUS - 1n) / 2n) === 1n;
    if (isSquare === onCurve) {
      const bytes = bigIntToBytes(x, 48);
      bytes[0]! |= 0x80;
      return bytes;
    }
  }
  throw new Error('no x found');
}

/** A compressed G2 encoding of some x = (c0 = k, c1 = 1): on the twist curve or not. */
function g2Encoding(onCurve: boolean): Uint8Array {
  for (let k = 1n; k < 1000n; k++) {
    const x = Fp2.fromBigTuple([k, 1n]);
    const rhs = Fp2.add(Fp2.pow(x, 3n), Fp2.fromBigTuple([4n, 4n]));
    let isSquare = true;
    try {
      Fp2.sqrt(rhs);
    } catch {
      isSquare = false;
    }
    if (isSquare === onCurve) {
      const bytes = new Uint8Array(96);
      bytes.set(bigIntToBytes(1n, 48), 0); // c1 first
      bytes.set(bigIntToBytes(k, 48), 48);
      bytes[0]! |= 0x80;
      return bytes;
    }
  }
  throw new Error('no x found');
}

const validG1 = bls12_381.G1.Point.BASE.multiply(12345n).toBytes(true);
const validG2 = bls12_381.G2.Point.BASE.multiply(12345n).toBytes(true);

describe.each(backends.map((b) => [b.name, b] as const))('point decoding (%s)', (_name, backend) => {
  it('accepts valid points', () => {
    expect(backend.decodePublicKey(validG1).bytes).toEqual(validG1);
    expect(backend.decodeSignature(validG2).bytes).toEqual(validG2);
  });

  it('refuses the identity point with POINT_IDENTITY', () => {
    const g1 = new Uint8Array(48);
    g1[0] = 0xc0;
    const g2 = new Uint8Array(96);
    g2[0] = 0xc0;
    expect(codeOf(() => backend.decodePublicKey(g1))).toBe('POINT_IDENTITY');
    expect(codeOf(() => backend.decodeSignature(g2))).toBe('POINT_IDENTITY');
  });

  it('refuses wrong lengths with BAD_LENGTH', () => {
    expect(codeOf(() => backend.decodePublicKey(validG1.subarray(0, 47)))).toBe('BAD_LENGTH');
    expect(codeOf(() => backend.decodeSignature(new Uint8Array([...validG2, 0])))).toBe('BAD_LENGTH');
  });

  it('refuses non-canonical encodings with POINT_NOT_CANONICAL', () => {
    const uncompressedFlag = validG1.slice();
    uncompressedFlag[0]! &= 0x7f;
    expect(codeOf(() => backend.decodePublicKey(uncompressedFlag))).toBe('POINT_NOT_CANONICAL');
    const infinityWithSign = new Uint8Array(48);
    infinityWithSign[0] = 0xe0;
    expect(codeOf(() => backend.decodePublicKey(infinityWithSign))).toBe('POINT_NOT_CANONICAL');
    const infinityWithPayload = new Uint8Array(96);
    infinityWithPayload[0] = 0xc0;
    infinityWithPayload[95] = 1;
    expect(codeOf(() => backend.decodeSignature(infinityWithPayload))).toBe('POINT_NOT_CANONICAL');
    // x = p (not reduced): same point class as x = 0 but a second encoding of it.
    const unreduced = bigIntToBytes(FIELD_MODULUS, 48);
    unreduced[0]! |= 0x80;
    expect(codeOf(() => backend.decodePublicKey(unreduced))).toBe('POINT_NOT_CANONICAL');
    const unreducedG2 = validG2.slice();
    unreducedG2.set(bigIntToBytes(FIELD_MODULUS + 1n, 48), 48);
    expect(codeOf(() => backend.decodeSignature(unreducedG2))).toBe('POINT_NOT_CANONICAL');
  });

  it('refuses x with no point on the curve with POINT_NOT_ON_CURVE', () => {
    expect(codeOf(() => backend.decodePublicKey(g1Encoding(false)))).toBe('POINT_NOT_ON_CURVE');
    expect(codeOf(() => backend.decodeSignature(g2Encoding(false)))).toBe('POINT_NOT_ON_CURVE');
  });

  it('refuses curve points outside the prime-order subgroup with POINT_NOT_IN_SUBGROUP', () => {
    // The cofactors are large, so a curve point picked by x is outside the subgroup with overwhelming probability.
    expect(codeOf(() => backend.decodePublicKey(g1Encoding(true)))).toBe('POINT_NOT_IN_SUBGROUP');
    expect(codeOf(() => backend.decodeSignature(g2Encoding(true)))).toBe('POINT_NOT_IN_SUBGROUP');
  });

  it('refuses secret keys of zero or not below r with BAD_KEY_FILE', () => {
    expect(codeOf(() => backend.secretKeyFromBytes(new Uint8Array(32)))).toBe('BAD_KEY_FILE');
    expect(codeOf(() => backend.secretKeyFromBytes(new Uint8Array(32).fill(0xff)))).toBe('BAD_KEY_FILE');
    expect(codeOf(() => backend.secretKeyFromBytes(new Uint8Array(31)))).toBe('BAD_LENGTH');
  });
});
