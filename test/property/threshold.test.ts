/**
 * S5 unforgeability and S1's cryptographic half: any t distinct partials make
 * the one group signature, fewer make nothing that verifies, and a partial
 * verifies only under its own share and grant.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { loadBackend } from '../../src/crypto/load.js';
import { combineCoefficients, combinePartials, SCALAR_ORDER } from '../../src/crypto/threshold.js';
import { bigIntToBytes, bytesToBigInt } from '../../src/common/bytes.js';
import { grantMessage, makeGrant, type Grant } from '../../src/token/grant.js';
import { dealCluster } from '../support/dealt-cluster.js';

const backend = loadBackend('blst');

const sizes = fc.constantFrom(4, 7, 10);
const grantFields = fc.record({
  resource: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 60 }),
  epoch: fc.bigInt({ min: 1n, max: (1n << 63n) - 1n }),
  holder: fc.uint8Array({ minLength: 32, maxLength: 32 }),
});

function signerSet(n: number, size: number) {
  return fc.shuffledSubarray(
    Array.from({ length: n }, (_, k) => k + 1),
    { minLength: size, maxLength: size },
  );
}

describe('S5 unforgeability: threshold combining', () => {
  it('any t distinct partials combine to the same signature, which verifies and equals the undivided key signature', () => {
    fc.assert(
      fc.property(
        sizes.chain((n) =>
          fc.tuple(fc.constant(n), grantFields, signerSet(n, (2 * n + 1) / 3), signerSet(n, (2 * n + 1) / 3)),
        ),
        ([n, fields, setA, setB]) => {
          const dealt = dealCluster(n, backend);
          const grant = makeGrant({ clusterId: dealt.cluster.id, ...fields });
          const combine = (set: number[]) =>
            combinePartials(
              backend,
              n,
              set.map((index) => ({ index, signature: dealt.partial(index, grant) })),
            )!;
          const a = combine(setA);
          const b = combine(setB);
          expect(a.bytes).toEqual(b.bytes);
          expect(backend.verify(dealt.cluster.groupPublicKey, grantMessage(grant), a)).toBe(true);

          // The undivided secret, interpolated from the scaled shares: s = Σ (Δλᵢ)·(sᵢ/Δ).
          const coefficients = combineCoefficients(n, setA);
          let secret = 0n;
          setA.forEach((index, k) => {
            secret += coefficients[k]! * bytesToBigInt(dealt.key.shares[index - 1]!.scaledSecretShare);
          });
          secret = ((secret % SCALAR_ORDER) + SCALAR_ORDER) % SCALAR_ORDER;
          const undivided = backend.sign(backend.secretKeyFromBytes(bigIntToBytes(secret, 32)), grantMessage(grant));
          expect(a.bytes).toEqual(undivided.bytes);
        },
      ),
      { numRuns: 30 }, // each run deals a fresh cluster (tens of ms of pure-JS G1 work)
    );
  });

  it('t - 1 partials never combine to a signature that verifies', () => {
    fc.assert(
      fc.property(
        sizes.chain((n) => fc.tuple(fc.constant(n), grantFields, signerSet(n, (2 * n + 1) / 3 - 1))),
        ([n, fields, set]) => {
          const dealt = dealCluster(n, backend);
          const grant = makeGrant({ clusterId: dealt.cluster.id, ...fields });
          const combined = combinePartials(
            backend,
            n,
            set.map((index) => ({ index, signature: dealt.partial(index, grant) })),
          );
          expect(combined !== null && backend.verify(dealt.cluster.groupPublicKey, grantMessage(grant), combined)).toBe(
            false,
          );
        },
      ),
      { numRuns: 30 },
    );
  });

  it('a partial verifies only under its own key share and over its own grant', () => {
    const dealt = dealCluster(7, backend);
    fc.assert(
      fc.property(
        grantFields,
        grantFields,
        fc.integer({ min: 1, max: 7 }),
        fc.integer({ min: 1, max: 7 }),
        (fieldsA, fieldsB, signer, other) => {
          const a: Grant = makeGrant({ clusterId: dealt.cluster.id, ...fieldsA });
          const b: Grant = makeGrant({ clusterId: dealt.cluster.id, ...fieldsB });
          const partial = dealt.partial(signer, a);
          const share = (i: number) => dealt.cluster.replicas[i - 1]!.publicKeyShare;
          expect(backend.verify(share(signer), grantMessage(a), partial)).toBe(true);
          expect(backend.verify(share(other), grantMessage(a), partial)).toBe(other === signer);
          const sameGrant = Buffer.from(grantMessage(a)).equals(Buffer.from(grantMessage(b)));
          expect(backend.verify(share(signer), grantMessage(b), partial)).toBe(sameGrant);
        },
      ),
    );
  });

  it('a mix of partials over two grants never verifies for either', () => {
    const dealt = dealCluster(4, backend);
    fc.assert(
      fc.property(
        grantFields,
        grantFields,
        signerSet(4, 3),
        fc.integer({ min: 0, max: 2 }),
        (fieldsA, fieldsB, set, odd) => {
          fc.pre(fieldsA.epoch !== fieldsB.epoch);
          const a = makeGrant({ clusterId: dealt.cluster.id, ...fieldsA });
          const b = makeGrant({ clusterId: dealt.cluster.id, ...fieldsB });
          const partials = set.map((index, k) => ({ index, signature: dealt.partial(index, k === odd ? b : a) }));
          const combined = combinePartials(backend, 4, partials);
          for (const grant of [a, b]) {
            expect(
              combined !== null && backend.verify(dealt.cluster.groupPublicKey, grantMessage(grant), combined),
            ).toBe(false);
          }
        },
      ),
    );
  });
});
