/**
 * Feldman verifiable secret sharing over the BLS12-381 scalar field, with
 * commitments in G1 (the group of the min-pk public keys): what one dealer of
 * the ceremony deals, how a recipient checks its share, and how the qualified
 * deals add up to the cluster key. The Δ-scaling of the output is the same as
 * the dealer's in src/crypto/threshold.ts, so a ceremony produces exactly the
 * files `keygen` produces.
 */
import { bls12_381 } from '@noble/curves/bls12-381.js';
import { QuorumFenceError } from '../common/errors.js';
import { bigIntToBytes, bytesToBigInt } from '../common/bytes.js';
import { checkCompressedPoint } from '../crypto/point-encoding.js';
import type { RandomSource } from '../crypto/random.js';
import { SCALAR_ORDER, delta, invert, mod, randomScalar } from '../crypto/threshold.js';

const G1 = bls12_381.G1.Point;
export type G1Point = InstanceType<typeof G1>;

/** Coefficients a₀..a_{t-1} of a secret polynomial; a₀ is the dealt secret. */
export type Polynomial = bigint[];

/**
 * A fresh polynomial of degree t-1. `constant` fixes a₀ (a reshare deals its
 * current share); otherwise a₀ is random too.
 */
export function randomPolynomial(t: number, random: RandomSource, constant?: bigint): Polynomial {
  const coefficients: Polynomial = [];
  for (let k = 0; k < t; k++)
    coefficients.push(k === 0 && constant !== undefined ? mod(constant) : randomScalar(random));
  return coefficients;
}

/** f(x) mod r by Horner. */
export function evaluate(polynomial: Polynomial, x: number): bigint {
  let value = 0n;
  for (let k = polynomial.length - 1; k >= 0; k--) value = mod(value * BigInt(x) + polynomial[k]!);
  return value;
}

/** Feldman commitments aₖ·G1, compressed. */
export function commit(polynomial: Polynomial): Uint8Array[] {
  return polynomial.map((a) => G1.BASE.multiply(a).toBytes(true));
}

/**
 * Decodes commitments sent by a peer: exactly t canonical, on-curve,
 * in-subgroup, non-identity G1 points.
 * @throws QuorumFenceError BAD_LENGTH and the point codes of checkCompressedPoint
 */
export function decodeCommitments(bytes: readonly Uint8Array[], t: number): G1Point[] {
  if (bytes.length !== t) {
    throw new QuorumFenceError('BAD_LENGTH', `"commitments" expected ${t} points, got ${bytes.length}`);
  }
  return bytes.map((b, k) => {
    checkCompressedPoint(b, 48, `commitments[${k}]`);
    let point: G1Point;
    try {
      point = G1.fromBytes(b);
    } catch {
      throw new QuorumFenceError('POINT_NOT_ON_CURVE', `"commitments[${k}]" is not a point of G1`);
    }
    if (point.is0()) throw new QuorumFenceError('POINT_IDENTITY', `"commitments[${k}]" is the identity`);
    if (!point.isTorsionFree())
      throw new QuorumFenceError('POINT_NOT_IN_SUBGROUP', `"commitments[${k}]" is outside the subgroup`);
    return point;
  });
}

/** Σₖ xᵏ·Cₖ: the commitment to f(x). Public values only, so variable-time multiplication is fine. */
export function commitmentAt(commitments: readonly G1Point[], x: number): G1Point {
  let expected: G1Point = G1.ZERO;
  for (let k = commitments.length - 1; k >= 0; k--) {
    expected = (expected.is0() ? expected : expected.multiplyUnsafe(BigInt(x))).add(commitments[k]!);
  }
  return expected;
}

/** The Feldman check: share·G1 = Σₖ indexᵏ·Cₖ. A zero or out-of-range share never matches. */
export function shareMatchesCommitments(share: bigint, index: number, commitments: readonly G1Point[]): boolean {
  if (share <= 0n || share >= SCALAR_ORDER) return false;
  return G1.BASE.multiply(share).equals(commitmentAt(commitments, index));
}

/** Coefficient-wise sum of several commitment vectors (all of length t). */
export function sumCommitments(vectors: readonly (readonly G1Point[])[]): G1Point[] {
  const t = vectors[0]!.length;
  return Array.from({ length: t }, (_, k) => vectors.reduce((sum, v) => sum.add(v[k]!), G1.ZERO));
}

/** Σ of scalars mod r. */
export function sumScalars(values: readonly bigint[]): bigint {
  return values.reduce((sum, v) => mod(sum + v), 0n);
}

/** The scaled form the replica key file holds: x·Δ⁻¹ mod r, 32 bytes. */
export function scaledShareBytes(share: bigint, n: number): Uint8Array {
  return bigIntToBytes(mod(share * invert(delta(n))), 32);
}

/** The Δ-scaled public key share of replica `index`: Δ⁻¹·Σₖ indexᵏ·Cₖ, compressed. */
export function scaledPublicShare(commitments: readonly G1Point[], index: number, n: number): Uint8Array {
  return commitmentAt(commitments, index)
    .multiply(invert(delta(n)))
    .toBytes(true);
}

/** A scalar from its 32-byte big-endian form; null unless it is in 1 .. r-1. */
export function scalarFromBytes(bytes: Uint8Array): bigint | null {
  if (bytes.length !== 32) return null;
  const value = bytesToBigInt(bytes);
  return value > 0n && value < SCALAR_ORDER ? value : null;
}

export function scalarToBytes(value: bigint): Uint8Array {
  return bigIntToBytes(value, 32);
}

export function pointBytes(point: G1Point): Uint8Array {
  return point.toBytes(true);
}
