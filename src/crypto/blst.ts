/**
 * The native backend: @chainsafe/blst (supranational's blst). About 16x
 * faster than noble for sign and verify. Its API has point addition
 * (aggregation) but no scalar multiplication, which is all combining needs:
 * the Δ-scaled coefficients are small integers (see threshold.ts).
 */
import type * as blst from '@chainsafe/blst';
import { QuorumFenceError } from '../common/errors.js';
import { copyBytes } from '../common/bytes.js';
import type { BlsBackend, CombineTerm, PointTerm, PublicKey, SecretKey, Signature, SignaturePoint } from './backend.js';
import { checkCompressedPoint, negateUncompressedG2 } from './point-encoding.js';
import { secretScalar } from './threshold.js';

class BlstPublicKey implements PublicKey {
  readonly backend = 'blst' as const;
  constructor(
    readonly bytes: Uint8Array,
    readonly inner: blst.PublicKey,
  ) {}
}

/** A G2 point with its compressed bytes; the two kinds below differ only in what was checked. */
abstract class BlstG2 {
  readonly backend = 'blst' as const;
  constructor(
    readonly bytes: Uint8Array,
    readonly inner: blst.Signature,
  ) {}
}

class BlstSignature extends BlstG2 implements Signature {
  readonly inSubgroup = true as const;
}

class BlstSignaturePoint extends BlstG2 implements SignaturePoint {
  readonly inSubgroup = false as const;
}

class BlstSecretKey implements SecretKey {
  readonly backend = 'blst' as const;
  constructor(readonly inner: blst.SecretKey) {}
}

function own<T>(value: unknown, type: abstract new (...args: never[]) => T, what: string): T {
  if (!(value instanceof type)) {
    throw new QuorumFenceError('INVALID_ARGUMENT', `${what} was not made by the blst backend`);
  }
  return value;
}

function bitLength(value: bigint): number {
  return value === 0n ? 0 : value.toString(2).length;
}

function gcd(a: bigint, b: bigint): bigint {
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
}

type BlstModule = typeof blst;

/**
 * Σ scalarᵢ·pointᵢ for non-negative scalars by interleaved double-and-add
 * (Straus): one aggregation call per bit, adding every point whose bit is set.
 */
function interleavedMultiply(
  sum: (points: blst.Signature[]) => blst.Signature,
  points: blst.Signature[],
  scalars: bigint[],
): blst.Signature | null {
  let accumulator: blst.Signature | null = null;
  for (let bit = Math.max(...scalars.map(bitLength)) - 1; bit >= 0; bit--) {
    const addends: blst.Signature[] = accumulator ? [accumulator, accumulator] : [];
    for (let i = 0; i < points.length; i++) if ((scalars[i]! >> BigInt(bit)) & 1n) addends.push(points[i]!);
    if (addends.length > 0) accumulator = sum(addends);
  }
  return accumulator;
}

/** @param blst the loaded native module (the loader requires it, so a failed load is caught in one place). */
export function createBlstBackend(native: BlstModule): BlsBackend {
  // Aggregation in blst is add-or-double, so summing [P, P] doubles P.
  const sum = (points: blst.Signature[]): blst.Signature =>
    points.length === 1 ? points[0]! : native.aggregateSignatures(points, false);
  const decodeSignaturePoint = (bytes: Uint8Array, field = 'signature'): BlstSignaturePoint => {
    checkCompressedPoint(bytes, 96, field);
    let inner: blst.Signature;
    try {
      inner = native.Signature.fromBytes(bytes, false);
    } catch {
      throw new QuorumFenceError('POINT_NOT_ON_CURVE', `"${field}" is not a point on the curve`, { field });
    }
    return new BlstSignaturePoint(copyBytes(bytes), inner);
  };
  const checkSignature = (point: SignaturePoint, field = 'signature'): BlstSignature => {
    const { bytes, inner } = own(point, BlstSignaturePoint, 'signature point');
    try {
      inner.sigValidate(true);
    } catch {
      throw new QuorumFenceError('POINT_NOT_IN_SUBGROUP', `"${field}" is not in the prime-order subgroup`, { field });
    }
    return new BlstSignature(bytes, inner);
  };
  /** Σ coefficientᵢ·pointᵢ (linearCombination, combinePoints); null for the identity. */
  const combine = (
    terms: readonly { readonly inner: blst.Signature; readonly coefficient: bigint }[],
  ): { bytes: Uint8Array; inner: blst.Signature } | null => {
    const points: blst.Signature[] = [];
    const magnitudes: bigint[] = [];
    for (const { inner, coefficient } of terms) {
      if (coefficient === 0n) continue;
      // Negative coefficients multiply the negated point.
      points.push(
        coefficient > 0n ? inner : native.Signature.fromBytes(negateUncompressedG2(inner.toBytes(false)), false),
      );
      magnitudes.push(coefficient > 0n ? coefficient : -coefficient);
    }
    if (points.length === 0) return null;
    // Δ·λ coefficients share a large common factor (most of N!); multiplying it out once
    // after the interleaved sum costs far fewer additions than carrying it in every term.
    const common = magnitudes.reduce(gcd);
    let result = interleavedMultiply(
      sum,
      points,
      magnitudes.map((m) => m / common),
    );
    if (result && common > 1n) result = interleavedMultiply(sum, [result], [common]);
    if (!result) return null;
    const bytes = result.toBytes(true);
    if ((bytes[0]! & 0x40) !== 0) return null;
    return { bytes, inner: result };
  };
  return {
    name: 'blst',

    decodePublicKey(bytes, field = 'publicKey') {
      checkCompressedPoint(bytes, 48, field);
      let inner: blst.PublicKey;
      try {
        inner = native.PublicKey.fromBytes(bytes, false);
      } catch {
        throw new QuorumFenceError('POINT_NOT_ON_CURVE', `"${field}" is not a point on the curve`, { field });
      }
      try {
        inner.keyValidate();
      } catch {
        throw new QuorumFenceError('POINT_NOT_IN_SUBGROUP', `"${field}" is not in the prime-order subgroup`, { field });
      }
      return new BlstPublicKey(copyBytes(bytes), inner);
    },

    decodeSignature(bytes, field = 'signature') {
      return checkSignature(decodeSignaturePoint(bytes, field), field);
    },

    decodeSignaturePoint,
    checkSignature,

    secretKeyFromBytes(bytes) {
      secretScalar(bytes);
      return new BlstSecretKey(native.SecretKey.fromBytes(bytes));
    },

    publicKeyOf(secretKey) {
      const inner = own(secretKey, BlstSecretKey, 'secret key').inner.toPublicKey();
      return new BlstPublicKey(inner.toBytes(true), inner);
    },

    sign(secretKey, message) {
      const inner = own(secretKey, BlstSecretKey, 'secret key').inner.sign(message);
      return new BlstSignature(inner.toBytes(true), inner);
    },

    verify(publicKey, message, signature) {
      const pk = own(publicKey, BlstPublicKey, 'public key');
      const sig = own(signature, BlstSignature, 'signature');
      try {
        // Both points were fully validated when decoded, so blst need not check them again.
        return native.verify(message, pk.inner, sig.inner, false, false);
      } catch {
        return false;
      }
    },

    verifyAll(sets) {
      if (sets.length === 0) return false;
      const nativeSets = sets.map(({ publicKey, message, signature }) => ({
        msg: message,
        pk: own(publicKey, BlstPublicKey, 'public key').inner,
        sig: own(signature, BlstSignature, 'signature').inner,
      }));
      try {
        // Points were validated when decoded; blst draws a random scalar per set.
        return native.verifyMultipleAggregateSignatures(nativeSets, false, false);
      } catch {
        return false;
      }
    },

    linearCombination(terms: readonly CombineTerm[]) {
      const result = combine(
        terms.map(({ signature, coefficient }) => ({
          inner: own(signature, BlstSignature, 'signature').inner,
          coefficient,
        })),
      );
      return result && new BlstSignature(result.bytes, result.inner);
    },

    combinePoints(terms: readonly PointTerm[]) {
      const result = combine(
        terms.map(({ point, coefficient }) => ({
          inner: own(point, BlstSignaturePoint, 'signature point').inner,
          coefficient,
        })),
      );
      return result && new BlstSignaturePoint(result.bytes, result.inner);
    },
  };
}
