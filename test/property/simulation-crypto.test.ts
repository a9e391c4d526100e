/**
 * The simulator's stand-in cryptography (src/simulation/crypto.ts) keeps the interface the cores rely on: a token
 * combines (with the project's own threshold code) from any t distinct valid partials of one grant and from no
 * fewer, a partial verifies only under the share of the replica that made it, a tampered encoding is refused with
 * its code, and the token checker the history checker uses accepts its tokens and refuses a changed byte.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { combinePartials } from '../../src/crypto/threshold.js';
import { dealRunKeys } from '../../src/simulation/crypto.js';
import { checkToken, encodeToken, tokenToText } from '../../src/token/admission-token.js';
import { grantMessage } from '../../src/token/grant.js';
import { codeOf } from '../support/error-code.js';

const sizes = fc.constantFrom(4, 7, 10);

function keysOf(n: number, seed: number) {
  return dealRunKeys('sim', n, seed, (run) => run());
}

describe('simulated threshold signatures', () => {
  it('any t distinct partials of one grant make a token that verifies; t-1 never do', () => {
    fc.assert(
      fc.property(sizes, fc.integer({ min: 0, max: 2 ** 31 }), fc.integer({ min: 1, max: 1_000 }), (n, seed, epoch) => {
        const { cluster, secretKeys } = keysOf(n, seed);
        const backend = cluster.backend;
        const grant = {
          clusterId: cluster.id,
          resource: 'orders',
          epoch: BigInt(epoch),
          holder: new Uint8Array(32).fill(3),
        };
        const message = grantMessage(grant);
        const signers = [...Array(n).keys()].map((k) => k + 1).sort((a, b) => ((a * seed) % 7) - ((b * seed) % 7));
        const partials = signers.map((index) => ({ index, signature: backend.sign(secretKeys[index - 1]!, message) }));
        const full = combinePartials(backend, n, partials.slice(0, cluster.t))!;
        expect(backend.verify(cluster.groupPublicKey, message, full)).toBe(true);
        const short = combinePartials(backend, n, partials.slice(0, cluster.t - 1));
        expect(short !== null && backend.verify(cluster.groupPublicKey, message, short)).toBe(false);
        const token = encodeToken(grant, full);
        expect(checkToken(tokenToText(token), cluster).ok).toBe(true);
        const changed = new Uint8Array(token.bytes);
        changed[changed.length - 1]! ^= 1;
        expect(checkToken(Buffer.from(changed).toString('base64url'), cluster).ok).toBe(false);
      }),
      { numRuns: 60 },
    );
  });

  it("a partial verifies under its own replica's share only", () => {
    const { cluster, secretKeys } = keysOf(7, 42);
    const message = new TextEncoder().encode('a grant');
    const partial = cluster.backend.sign(secretKeys[2]!, message);
    const verifies = cluster.replicas.map((r) => cluster.backend.verify(r.publicKeyShare, message, partial));
    expect(verifies).toEqual([false, false, true, false, false, false, false]);
  });

  it('refuses encodings that are not its own, with their codes', () => {
    const { cluster, secretKeys } = keysOf(4, 1);
    const backend = cluster.backend;
    const good = backend.sign(secretKeys[0]!, new Uint8Array([1])).bytes;
    const wrongTag = new Uint8Array(good);
    wrongTag[0] = 0;
    expect(codeOf(() => backend.decodeSignature(wrongTag))).toBe('POINT_NOT_CANONICAL');
    expect(codeOf(() => backend.decodeSignature(good.subarray(1)))).toBe('BAD_LENGTH');
    const zero = new Uint8Array(good);
    zero.fill(0, 64);
    expect(codeOf(() => backend.decodeSignature(zero))).toBe('POINT_IDENTITY');
    expect(codeOf(() => backend.decodeSignature(good))).toBeUndefined();
  });
});
