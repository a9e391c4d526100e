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
import { g1Encoding, g2Encoding } from '../support/curve-encodings.js';

const backends = [loadBackend('noble'), loadBackend('blst')];

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

  it('a point decoded without its subgroup check is refused by checkSignature, or already at decoding', () => {
    // blst defers the check to checkSignature; noble's decoding includes it. Either way no Signature comes out.
    const code = codeOf(() => backend.checkSignature(backend.decodeSignaturePoint(g2Encoding(true))));
    expect(code).toBe('POINT_NOT_IN_SUBGROUP');
    // Every other check still comes first, with the same codes as decodeSignature.
    expect(codeOf(() => backend.decodeSignaturePoint(g2Encoding(false)))).toBe('POINT_NOT_ON_CURVE');
    expect(codeOf(() => backend.decodeSignaturePoint(new Uint8Array(95)))).toBe('BAD_LENGTH');
    const identity = new Uint8Array(96);
    identity[0] = 0xc0;
    expect(codeOf(() => backend.decodeSignaturePoint(identity))).toBe('POINT_IDENTITY');
    // A valid point passes both steps, and combining points gives what combining signatures gives.
    const point = backend.decodeSignaturePoint(validG2);
    expect(backend.checkSignature(point).bytes).toEqual(validG2);
    const terms = [
      { coefficient: 3n, index: 0 },
      { coefficient: -2n, index: 1 },
    ];
    const other = bls12_381.G2.Point.BASE.multiply(777n).toBytes(true);
    const points = [point, backend.decodeSignaturePoint(other)];
    const signatures = [backend.decodeSignature(validG2), backend.decodeSignature(other)];
    const fromPoints = backend.combinePoints(
      terms.map((t) => ({ point: points[t.index]!, coefficient: t.coefficient })),
    );
    const fromSignatures = backend.linearCombination(
      terms.map((t) => ({ signature: signatures[t.index]!, coefficient: t.coefficient })),
    );
    expect(fromPoints?.bytes).toEqual(fromSignatures?.bytes);
  });

  it('refuses secret keys of zero or not below r with BAD_KEY_FILE', () => {
    expect(codeOf(() => backend.secretKeyFromBytes(new Uint8Array(32)))).toBe('BAD_KEY_FILE');
    expect(codeOf(() => backend.secretKeyFromBytes(new Uint8Array(32).fill(0xff)))).toBe('BAD_KEY_FILE');
    expect(codeOf(() => backend.secretKeyFromBytes(new Uint8Array(31)))).toBe('BAD_LENGTH');
  });
});
