/**
 * What a deal contributes and how qualified deals combine: the one part of the
 * ceremony that differs between a fresh key (joint Feldman: random constant
 * terms, sum of the deals) and a reshare (constant term = the dealer's current
 * share, its constant commitment checked against the dealer's known public
 * share, Lagrange interpolation over t_old qualified deals). The state machine,
 * packets, echo, complaints, justifications and confirmation are shared.
 */
import { bls12_381 } from '@noble/curves/bls12-381.js';
import type { RandomSource } from '../crypto/random.js';
import { randomPolynomial, sumCommitments, sumScalars, type G1Point, type Polynomial } from './vss.js';

export interface DealingRule {
  /** Members that deal; a fresh key: all of them. */
  readonly dealers: readonly number[];
  /** Fewest qualified deals the result needs. */
  readonly minimumQualified: number;
  /** This member's polynomial (degree t-1 of the new sharing). */
  polynomial(self: number, t: number, random: RandomSource): Polynomial;
  /** A check beyond Feldman's on a dealer's commitments; a reshare checks C₀ against the dealer's public share. */
  acceptsCommitments(dealer: number, commitments: readonly G1Point[]): boolean;
  /** This member's new share and the group commitments from the qualified deals (ascending dealer order). */
  combine(qualified: readonly { dealer: number; share: bigint; commitments: readonly G1Point[] }[]): {
    share: bigint;
    commitments: G1Point[];
  };
}

/** Joint-Feldman key generation: every member deals a random secret; the key is their sum over the qualified set. */
export function jointFeldman(n: number, t: number): DealingRule {
  return {
    dealers: Array.from({ length: n }, (_, k) => k + 1),
    // Fewer than t deals would still hide the secret if one is honest, but t
    // keeps the rule simple: n - f ≥ t honest dealers always qualify.
    minimumQualified: t,
    polynomial: (_self, degreePlusOne, random) => randomPolynomial(degreePlusOne, random),
    acceptsCommitments: () => true,
    combine: (qualified) => ({
      share: sumScalars(qualified.map((q) => q.share)),
      commitments: sumCommitments(qualified.map((q) => q.commitments)),
    }),
  };
}

/** The group key of a set of commitment vectors: Σ C₀ (used by tests to check the sum rule). */
export function groupKeyOf(vectors: readonly (readonly G1Point[])[]): Uint8Array {
  return vectors.reduce((sum, v) => sum.add(v[0]!), bls12_381.G1.Point.ZERO).toBytes(true);
}
