/**
 * Compressed point encodings by x alone, for tests of decoding: on the curve or not, as asked. A point found so is
 * almost never in the prime-order subgroup (the cofactors are large), which is what the subgroup tests rely on.
 */
import { bls12_381 } from '@noble/curves/bls12-381.js';
import { bigIntToBytes } from '../../src/common/bytes.js';
import { FIELD_MODULUS } from '../../src/crypto/point-encoding.js';

const Fp = bls12_381.fields.Fp;
const Fp2 = bls12_381.fields.Fp2;

/** A compressed G1 encoding of some x: on the curve (y² = x³ + 4) or not, as asked. */
export function g1Encoding(onCurve: boolean): Uint8Array {
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
export function g2Encoding(onCurve: boolean): Uint8Array {
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
