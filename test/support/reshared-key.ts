/**
 * A new sharing of a dealt key's secret, as a reshare ceremony computes it but done in one place (tests
 * only: it reconstructs the secret). The group key is the same; the shares, n and t are new.
 */
import { bls12_381 } from '@noble/curves/bls12-381.js';
import { lagrangeAtZero, unscaledShare } from '../../src/ceremony/reshare.js';
import { bigIntToBytes, bytesToBigInt } from '../../src/common/bytes.js';
import type { RandomSource } from '../../src/crypto/random.js';
import { delta, invert, mod, randomScalar, type DealtKey } from '../../src/crypto/threshold.js';

const G1 = bls12_381.G1.Point;

/** A new sharing of the same secret for `newN` members (what a reshare ceremony computes, done in one place). */
export function reshareByHand(old: DealtKey, newN: number, random: RandomSource): DealtKey {
  const signers = Array.from({ length: old.t }, (_, k) => k + 1);
  const lambdas = lagrangeAtZero(old.n, signers);
  const secret = signers.reduce(
    (sum, index, k) =>
      mod(sum + lambdas[k]! * unscaledShare(bytesToBigInt(old.shares[index - 1]!.scaledSecretShare), old.n)),
    0n,
  );
  const t = 2 * ((newN - 1) / 3) + 1;
  const coefficients = [secret, ...Array.from({ length: t - 1 }, () => randomScalar(random))];
  const deltaInverse = invert(delta(newN));
  const shares = Array.from({ length: newN }, (_, k) => {
    let value = 0n;
    for (let c = t - 1; c >= 0; c--) value = mod(value * BigInt(k + 1) + coefficients[c]!);
    const scaled = mod(value * deltaInverse);
    return {
      index: k + 1,
      scaledSecretShare: bigIntToBytes(scaled, 32),
      publicKeyShare: G1.BASE.multiply(scaled).toBytes(true),
    };
  });
  return { n: newN, t, commitments: coefficients.map((a) => G1.BASE.multiply(a).toBytes(true)), shares };
}
