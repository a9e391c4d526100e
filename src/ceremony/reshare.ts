/**
 * The resharing dealing rule (Desmedt–Jajodia redistribution with Feldman
 * commitments): each old member deals a polynomial whose constant term is its
 * current share sᵢ; its constant commitment must equal sᵢ·G1, which everyone
 * knows from the old cluster description (Δ_old times the published scaled
 * public share). A new member j interpolates its new share from the first
 * t_old qualified deals: s'ⱼ = Σ λᵢ·fᵢ(j), with λᵢ the Lagrange coefficients
 * at zero over the old indices. Since Σ λᵢ·sᵢ = s, the new sharing has the
 * same secret, so the same group key; the new commitments are Σ λᵢ·Cᵢ,ₖ.
 *
 * The state machine, packets, echo, complaints and confirmation are the
 * ceremony's. Dealer numbers are proposal indices and must equal the dealer's
 * index in the old cluster (a continuing member keeps its index).
 */
import { bls12_381 } from '@noble/curves/bls12-381.js';
import { QuorumFenceError } from '../common/errors.js';
import { combineCoefficients, delta, invert, mod } from '../crypto/threshold.js';
import type { DealingRule } from './dealing.js';
import { randomPolynomial, type G1Point } from './vss.js';

const G1 = bls12_381.G1.Point;

export interface OldSharing {
  /** n and t of the cluster being reshared. */
  readonly n: number;
  readonly t: number;
  /** The old group key, compressed G1. */
  readonly groupPublicKey: Uint8Array;
  /** The Δ_old-scaled public key share of each old replica, by old index (1-based), compressed G1. */
  readonly scaledPublicShares: ReadonlyMap<number, Uint8Array>;
}

/** An old member's current (unscaled) share from its key file's scaled form: sᵢ = (sᵢ·Δ⁻¹)·Δ. */
export function unscaledShare(scaledShare: bigint, oldN: number): bigint {
  return mod(scaledShare * delta(oldN));
}

/** sᵢ·G1 for old replica i, from its published Δ-scaled public share. Public values only. */
export function unscaledPublicShare(old: OldSharing, index: number): G1Point | null {
  const bytes = old.scaledPublicShares.get(index);
  if (!bytes) return null;
  return G1.fromBytes(bytes).multiplyUnsafe(delta(old.n));
}

/** λᵢ(0) mod r over `indices` (old numbering), in the order given: the Δ·λ integers of threshold.ts, divided by Δ. */
export function lagrangeAtZero(oldN: number, indices: readonly number[]): bigint[] {
  const deltaInverse = invert(delta(oldN));
  return combineCoefficients(oldN, indices).map((c) => mod(c * deltaInverse));
}

/**
 * The rule for one member of a reshare.
 * @param dealers old indices that deal (every old member still present; at least t_old).
 * @param currentShare this member's unscaled current share, when it deals.
 * @throws QuorumFenceError INVALID_ARGUMENT when fewer than t_old dealers are named, a dealer is not an old
 *   replica, or a dealer has no current share to deal.
 */
export function resharing(old: OldSharing, dealers: readonly number[], currentShare?: bigint): DealingRule {
  const sorted = [...new Set(dealers)].sort((a, b) => a - b);
  if (sorted.length < old.t) {
    throw new QuorumFenceError(
      'INVALID_ARGUMENT',
      `a reshare needs at least t_old = ${old.t} old members dealing, got ${sorted.length}`,
    );
  }
  for (const d of sorted) {
    if (!old.scaledPublicShares.has(d)) {
      throw new QuorumFenceError('INVALID_ARGUMENT', `dealer ${d} is not a replica of the old cluster`);
    }
  }
  return {
    dealers: sorted,
    minimumQualified: old.t,
    polynomial: (self, t, random) => {
      if (currentShare === undefined) {
        throw new QuorumFenceError('INVALID_ARGUMENT', `member ${self} deals but has no current share`);
      }
      return randomPolynomial(t, random, currentShare);
    },
    acceptsCommitments: (dealer, commitments) => {
      const expected = unscaledPublicShare(old, dealer);
      return expected !== null && commitments[0] !== undefined && commitments[0].equals(expected);
    },
    combine: (qualified) => {
      // Any t_old verified deals interpolate to the same sharing; the first
      // t_old in dealer order is a choice every honest member makes alike.
      const used = [...qualified].sort((a, b) => a.dealer - b.dealer).slice(0, old.t);
      const lambdas = lagrangeAtZero(
        old.n,
        used.map((q) => q.dealer),
      );
      const share = used.reduce((sum, q, k) => mod(sum + lambdas[k]! * q.share), 0n);
      const t = used[0]!.commitments.length;
      const commitments = Array.from({ length: t }, (_, c) =>
        used.reduce((sum, q, k) => sum.add(q.commitments[c]!.multiplyUnsafe(lambdas[k]!)), G1.ZERO),
      );
      return { share, commitments };
    },
  };
}
