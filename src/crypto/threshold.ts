/**
 * The scalar side of threshold BLS: Shamir dealing with Feldman commitments,
 * share checks, and the integer combining coefficients.
 *
 * Δ-scaling (Shoup): replica i signs with sᵢ·Δ⁻¹ where Δ = N!. For any signer
 * set S, Δ·λᵢ (λ the Lagrange coefficient at zero) is an integer, and
 * Σ (Δ·λᵢ)·(sᵢ·Δ⁻¹)·H = Σ λᵢ·sᵢ·H = s·H. So combining t partials needs only
 * small integer multiples of points, which blst does with point additions.
 */
import { BoundedMap } from '../common/bounded-map.js';
import { bls12_381 } from '@noble/curves/bls12-381.js';
import { QuorumFenceError } from '../common/errors.js';
import { bigIntToBytes, bytesToBigInt } from '../common/bytes.js';
import type { BlsBackend, Signature, SignaturePoint } from './backend.js';
import type { RandomSource } from './random.js';

/** The order r of the BLS12-381 subgroups (the scalar field modulus). */
export const SCALAR_ORDER = 0x73eda753299d7d483339d80809a1d80553bda402fffe5bfeffffffff00000001n;

type G1Point = InstanceType<typeof bls12_381.G1.Point>;
const G1 = bls12_381.G1.Point;

export function mod(a: bigint, m = SCALAR_ORDER): bigint {
  const r = a % m;
  return r < 0n ? r + m : r;
}

/** a⁻¹ mod r by Fermat (r is prime). Shared with the key ceremony. */
export function invert(a: bigint): bigint {
  let result = 1n;
  let base = mod(a);
  let exponent = SCALAR_ORDER - 2n;
  while (exponent > 0n) {
    if (exponent & 1n) result = (result * base) % SCALAR_ORDER;
    base = (base * base) % SCALAR_ORDER;
    exponent >>= 1n;
  }
  return result;
}

/** Δ = N! for a cluster of N replicas. */
export function delta(n: number): bigint {
  let result = 1n;
  for (let i = 2n; i <= BigInt(n); i++) result *= i;
  return result;
}

/**
 * Integer coefficients Δ·λᵢ(0) for the signer indices, in the order given.
 * @throws QuorumFenceError INVALID_ARGUMENT on duplicate or out-of-range indices.
 */
export function combineCoefficients(n: number, signers: readonly number[]): bigint[] {
  const seen = new Set<number>();
  for (const index of signers) {
    if (!Number.isInteger(index) || index < 1 || index > n || seen.has(index)) {
      throw new QuorumFenceError('INVALID_ARGUMENT', `signer indices must be distinct integers in 1..${n}`);
    }
    seen.add(index);
  }
  const scale = delta(n);
  return signers.map((i) => {
    let numerator = scale;
    let denominator = 1n;
    for (const j of signers) {
      if (j === i) continue;
      numerator *= BigInt(j);
      denominator *= BigInt(j - i);
    }
    // Shoup's lemma: the denominator always divides Δ·∏j, so this is exact.
    return numerator / denominator;
  });
}

/** Coefficient sets by signer set; bounded because C(31, 21) sets exist and peers choose which we see. */
const COEFFICIENT_CACHE_LIMIT = 256;
const coefficientCache = new BoundedMap<string, bigint[]>(COEFFICIENT_CACHE_LIMIT);

function cachedCoefficients(n: number, signers: readonly number[]): bigint[] {
  const key = `${n}:${signers.join(',')}`;
  let coefficients = coefficientCache.get(key);
  if (!coefficients) {
    coefficients = combineCoefficients(n, signers);
    coefficientCache.set(key, coefficients);
  }
  return coefficients;
}

export interface IndexedPartial {
  /** Replica index, 1..n. */
  readonly index: number;
  readonly signature: Signature;
}

/**
 * Combines partial signatures into the group signature. Does not verify
 * anything: the caller verifies the result once against the group key.
 * Returns null when the combination is the identity.
 * @throws QuorumFenceError INVALID_ARGUMENT on duplicate or out-of-range indices.
 */
export function combinePartials(backend: BlsBackend, n: number, partials: readonly IndexedPartial[]): Signature | null {
  const terms = withCoefficients(n, partials);
  return backend.linearCombination(
    terms.map(({ partial, coefficient }) => ({ signature: partial.signature, coefficient })),
  );
}

export interface IndexedPoint {
  /** Replica index, 1..n. */
  readonly index: number;
  readonly point: SignaturePoint;
}

/**
 * combinePartials over partials not checked for the subgroup (a client's, see partial-collector.ts): the result is
 * a point too, to be checked with backend.checkSignature before it is verified.
 * @throws QuorumFenceError INVALID_ARGUMENT on duplicate or out-of-range indices.
 */
export function combinePartialPoints(
  backend: BlsBackend,
  n: number,
  partials: readonly IndexedPoint[],
): SignaturePoint | null {
  const terms = withCoefficients(n, partials);
  return backend.combinePoints(terms.map(({ partial, coefficient }) => ({ point: partial.point, coefficient })));
}

/** Each partial with its Lagrange coefficient (Δ-scaled) for this signer set, in index order. */
function withCoefficients<P extends { readonly index: number }>(
  n: number,
  partials: readonly P[],
): { partial: P; coefficient: bigint }[] {
  const sorted = [...partials].sort((a, b) => a.index - b.index);
  const coefficients = cachedCoefficients(
    n,
    sorted.map((p) => p.index),
  );
  return sorted.map((partial, k) => ({ partial, coefficient: coefficients[k]! }));
}

/** A uniformly random nonzero scalar: 64 bytes reduced mod r, so the bias is below 2^-250. */
export function randomScalar(random: RandomSource): bigint {
  for (;;) {
    const scalar = mod(bytesToBigInt(random(64)));
    if (scalar !== 0n) return scalar;
  }
}

export interface DealtShare {
  readonly index: number;
  /** sᵢ·Δ⁻¹ mod r, 32 bytes big-endian: what the replica signs with. */
  readonly scaledSecretShare: Uint8Array;
  /** (sᵢ·Δ⁻¹)·G1, compressed: what verifies the replica's partials. */
  readonly publicKeyShare: Uint8Array;
}

export interface DealtKey {
  readonly n: number;
  readonly t: number;
  /** Compressed G1 points aₖ·G1 for k = 0..t-1; commitments[0] is the group public key. */
  readonly commitments: Uint8Array[];
  readonly shares: DealtShare[];
}

/**
 * Dealer key generation: a fresh secret polynomial of degree t-1, its Feldman
 * commitments, and every replica's Δ-scaled share. The polynomial (and so the
 * group secret) lives only inside this call; its coefficients are overwritten
 * before return. (JS cannot wipe a bigint's memory; dropping every reference
 * is the most it can do.)
 */
export function dealKey(n: number, t: number, random: RandomSource): DealtKey {
  const coefficients: bigint[] = [];
  for (let k = 0; k < t; k++) coefficients.push(randomScalar(random));
  try {
    const commitments = coefficients.map((a) => G1.BASE.multiply(a).toBytes(true));
    const deltaInverse = invert(delta(n));
    const shares: DealtShare[] = [];
    for (let i = 1; i <= n; i++) {
      // Horner: f(i) = a₀ + i(a₁ + i(a₂ + ...)).
      let value = 0n;
      for (let k = t - 1; k >= 0; k--) value = mod(value * BigInt(i) + coefficients[k]!);
      const scaled = mod(value * deltaInverse);
      if (scaled === 0n) throw new QuorumFenceError('INTERNAL', 'dealt a zero share; run key generation again');
      shares.push({
        index: i,
        scaledSecretShare: bigIntToBytes(scaled, 32),
        publicKeyShare: G1.BASE.multiply(scaled).toBytes(true),
      });
    }
    return { n, t, commitments, shares };
  } finally {
    coefficients.fill(0n);
  }
}

/**
 * Feldman check of published scaled key shares: Δ·PKᵢ = Σₖ iᵏ·Cₖ for each i.
 * Points are compressed G1 bytes that already passed decoding; commitments
 * are decoded once for all shares.
 * @returns the indices (1-based) whose share does not match.
 */
export function sharesNotMatchingCommitments(
  n: number,
  publicKeyShares: readonly Uint8Array[],
  commitments: readonly Uint8Array[],
): number[] {
  const points = commitments.map((c) => G1.fromBytes(c));
  const scale = delta(n);
  const mismatched: number[] = [];
  publicKeyShares.forEach((share, position) => {
    const index = BigInt(position + 1);
    // Horner over the commitments: Σₖ iᵏ·Cₖ = C₀ + i(C₁ + i(C₂ + ...)).
    let expected: G1Point = G1.ZERO;
    for (let k = points.length - 1; k >= 0; k--) {
      expected = (expected.is0() ? expected : expected.multiplyUnsafe(index)).add(points[k]!);
    }
    if (!G1.fromBytes(share).multiplyUnsafe(scale).equals(expected)) mismatched.push(position + 1);
  });
  return mismatched;
}

/**
 * A secret scalar from its 32-byte big-endian encoding, checked to be in 1 .. r-1.
 * @throws QuorumFenceError BAD_LENGTH, BAD_KEY_FILE
 */
export function secretScalar(bytes: Uint8Array): bigint {
  if (!(bytes instanceof Uint8Array) || bytes.length !== 32) {
    throw new QuorumFenceError('BAD_LENGTH', '"secretKey" expected 32 bytes');
  }
  const scalar = bytesToBigInt(bytes);
  if (scalar === 0n || scalar >= SCALAR_ORDER)
    throw new QuorumFenceError('BAD_KEY_FILE', '"secretKey" must be in 1 .. r-1');
  return scalar;
}

/** (scaled share)·G1 for a secret scalar given as 32 bytes; used to check a key file against its public share. */
export function publicKeyShareOf(scaledSecretShare: Uint8Array): Uint8Array {
  return G1.BASE.multiply(secretScalar(scaledSecretShare)).toBytes(true);
}
