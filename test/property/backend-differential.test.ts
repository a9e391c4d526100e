/**
 * The two backends are interchangeable: over random keys and grants, noble
 * and blst give byte-identical partials and combined signatures, and agree on
 * what verifies.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { loadBackend } from '../../src/crypto/load.js';
import { combinePartials, dealKey } from '../../src/crypto/threshold.js';
import { seededRandom } from '../../src/crypto/random.js';
import { grantMessage, makeGrant } from '../../src/token/grant.js';

const noble = loadBackend('noble');
const blst = loadBackend('blst');

describe('backend differential: noble and blst agree byte for byte', () => {
  it('partials and combined signatures are identical', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.string({ minLength: 1, maxLength: 40 }),
        fc.bigInt({ min: 1n, max: (1n << 63n) - 1n }),
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.shuffledSubarray([1, 2, 3, 4], { minLength: 3, maxLength: 3 }),
        (seed, resource, epoch, holder, signers) => {
          const key = dealKey(4, 3, seededRandom(seed));
          const grant = makeGrant({ clusterId: new Uint8Array(32).fill(1), resource, epoch, holder });
          const message = grantMessage(grant);
          const results = [noble, blst].map((backend) => {
            const partials = signers.map((index) => ({
              index,
              signature: backend.sign(backend.secretKeyFromBytes(key.shares[index - 1]!.scaledSecretShare), message),
            }));
            return {
              partials: partials.map((p) => p.signature.bytes),
              combined: combinePartials(backend, 4, partials)!.bytes,
            };
          });
          expect(results[0]).toEqual(results[1]);
          // Each backend accepts the other's bytes.
          const groupKey = blst.decodePublicKey(key.commitments[0]!);
          expect(blst.verify(groupKey, message, blst.decodeSignature(results[0]!.combined))).toBe(true);
        },
      ),
      { numRuns: 15 }, // noble signs at ~30 ms each; 15 runs keep this test under ten seconds
    );
  });

  it('noble verifies what blst combines, and refuses it for another message', () => {
    const key = dealKey(4, 3, seededRandom(new Uint8Array(32).fill(5)));
    const grant = makeGrant({ clusterId: new Uint8Array(32), resource: 'r', epoch: 1n, holder: new Uint8Array(32) });
    const partials = [1, 2, 4].map((index) => ({
      index,
      signature: blst.sign(blst.secretKeyFromBytes(key.shares[index - 1]!.scaledSecretShare), grantMessage(grant)),
    }));
    const combined = noble.decodeSignature(combinePartials(blst, 4, partials)!.bytes);
    const groupKey = noble.decodePublicKey(key.commitments[0]!);
    expect(noble.verify(groupKey, grantMessage(grant), combined)).toBe(true);
    expect(noble.verify(groupKey, grantMessage({ ...grant, epoch: 2n }), combined)).toBe(false);
  });
});
