/**
 * The reference backend: @noble/curves, pure JS. Slow (tens of ms per
 * pairing) but dependency-free and auditable; the native backend must match it
 * byte for byte.
 */
import { bls12_381 } from '@noble/curves/bls12-381.js';
import { QuorumFenceError } from '../common/errors.js';
import {
  SIGNATURE_DST,
  type BlsBackend,
  type CombineTerm,
  type PointTerm,
  type PublicKey,
  type SecretKey,
  type Signature,
  type SignaturePoint,
} from './backend.js';
import { copyBytes } from '../common/bytes.js';
import { checkCompressedPoint } from './point-encoding.js';
import { SCALAR_ORDER, secretScalar } from './threshold.js';

const long = bls12_381.longSignatures;
type G1Point = ReturnType<typeof long.getPublicKey>;
type G2Point = ReturnType<typeof long.hash>;

class NoblePublicKey implements PublicKey {
  readonly backend = 'noble' as const;
  constructor(
    readonly bytes: Uint8Array,
    readonly point: G1Point,
  ) {}
}

class NobleSignature implements Signature {
  readonly backend = 'noble' as const;
  readonly inSubgroup = true as const;
  constructor(
    readonly bytes: Uint8Array,
    readonly point: G2Point,
  ) {}
}

/** noble decodes a point with its subgroup check included, so a point here is in the subgroup already. */
class NobleSignaturePoint implements SignaturePoint {
  readonly backend = 'noble' as const;
  readonly inSubgroup = false as const;
  constructor(readonly signature: NobleSignature) {}
  get bytes(): Uint8Array {
    return this.signature.bytes;
  }
}

class NobleSecretKey implements SecretKey {
  readonly backend = 'noble' as const;
  constructor(readonly scalarBytes: Uint8Array) {}
}

function own<T>(value: unknown, type: abstract new (...args: never[]) => T, what: string): T {
  if (!(value instanceof type)) {
    throw new QuorumFenceError('INVALID_ARGUMENT', `${what} was not made by the noble backend`);
  }
  return value;
}

/** Maps noble's decode failures (after our own encoding checks passed) to curve or subgroup codes. */
function decodeFailure(error: unknown, field: string): QuorumFenceError {
  const message = error instanceof Error ? error.message : String(error);
  if (message.includes('subgroup')) {
    return new QuorumFenceError('POINT_NOT_IN_SUBGROUP', `"${field}" is not in the prime-order subgroup`, { field });
  }
  return new QuorumFenceError('POINT_NOT_ON_CURVE', `"${field}" is not a point on the curve`, { field });
}

function signatureFromPoint(point: G2Point): NobleSignature {
  return new NobleSignature(long.Signature.toBytes(point), point);
}

function decodeSignature(bytes: Uint8Array, field = 'signature'): NobleSignature {
  checkCompressedPoint(bytes, 96, field);
  let point: G2Point;
  try {
    point = long.Signature.fromBytes(bytes);
  } catch (error) {
    throw decodeFailure(error, field);
  }
  return new NobleSignature(copyBytes(bytes), point);
}

export function createNobleBackend(): BlsBackend {
  const verify = (publicKey: PublicKey, message: Uint8Array, signature: Signature): boolean => {
    const pk = own(publicKey, NoblePublicKey, 'public key');
    const sig = own(signature, NobleSignature, 'signature');
    try {
      return long.verify(sig.point, long.hash(message, SIGNATURE_DST), pk.point);
    } catch {
      return false;
    }
  };

  return {
    name: 'noble',

    decodePublicKey(bytes, field = 'publicKey') {
      checkCompressedPoint(bytes, 48, field);
      let point: G1Point;
      try {
        point = bls12_381.G1.Point.fromBytes(bytes);
      } catch (error) {
        throw decodeFailure(error, field);
      }
      return new NoblePublicKey(copyBytes(bytes), point);
    },

    decodeSignature,

    secretKeyFromBytes(bytes) {
      secretScalar(bytes);
      return new NobleSecretKey(copyBytes(bytes));
    },

    publicKeyOf(secretKey) {
      const point = long.getPublicKey(own(secretKey, NobleSecretKey, 'secret key').scalarBytes);
      return new NoblePublicKey(point.toBytes(true), point);
    },

    sign(secretKey, message) {
      const key = own(secretKey, NobleSecretKey, 'secret key');
      return signatureFromPoint(long.sign(long.hash(message, SIGNATURE_DST), key.scalarBytes));
    },

    verify,

    verifyAll(sets) {
      // The reference backend checks one at a time: simplest to trust, and it is the slow path anyway.
      return sets.length > 0 && sets.every((set) => verify(set.publicKey, set.message, set.signature));
    },

    decodeSignaturePoint(bytes, field) {
      return new NobleSignaturePoint(decodeSignature(bytes, field));
    },

    checkSignature(point) {
      return own(point, NobleSignaturePoint, 'signature point').signature;
    },

    combinePoints(terms: readonly PointTerm[]) {
      const sum = combine(
        terms.map(({ point, coefficient }) => ({
          signature: own(point, NobleSignaturePoint, 'signature point').signature,
          coefficient,
        })),
      );
      return sum && new NobleSignaturePoint(sum);
    },

    linearCombination: combine,
  };
}

/** Σ coefficientᵢ·signatureᵢ; null for the identity. */
function combine(terms: readonly CombineTerm[]): NobleSignature | null {
  let sum = bls12_381.G2.Point.ZERO;
  for (const { signature, coefficient } of terms) {
    const point = own(signature, NobleSignature, 'signature').point;
    const magnitude = (coefficient < 0n ? -coefficient : coefficient) % SCALAR_ORDER;
    if (magnitude === 0n) continue;
    // multiplyUnsafe: the coefficients and partials are public, so constant time buys nothing here.
    const scaled = point.multiplyUnsafe(magnitude);
    sum = sum.add(coefficient < 0n ? scaled.negate() : scaled);
  }
  return sum.is0() ? null : signatureFromPoint(sum);
}
