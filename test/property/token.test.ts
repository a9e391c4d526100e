/**
 * S5: a token binds every field of the grant and the cluster id; changing any
 * bit makes it undecodable or invalid. The codec round-trips every grant.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { loadBackend } from '../../src/crypto/load.js';
import { combinePartials } from '../../src/crypto/threshold.js';
import {
  checkToken,
  decodeToken,
  decodeTokenText,
  encodeToken,
  tokenToText,
  type AdmissionToken,
} from '../../src/token/admission-token.js';
import { makeGrant } from '../../src/token/grant.js';
import { dealCluster, type DealtCluster } from '../support/dealt-cluster.js';

const backend = loadBackend();
let dealt: DealtCluster;

/** Resource names of 1..256 UTF-8 bytes, from any Unicode scalar values. */
const resourceName = fc.string({ unit: 'grapheme', minLength: 1, maxLength: 80 }).filter((s) => {
  const length = new TextEncoder().encode(s).length;
  return length >= 1 && length <= 256;
});
const grantFields = fc.record({
  resource: resourceName,
  epoch: fc.bigInt({ min: 1n, max: (1n << 63n) - 1n }),
  holder: fc.uint8Array({ minLength: 32, maxLength: 32 }),
});

function sign(fields: { resource: string; epoch: bigint; holder: Uint8Array }): AdmissionToken {
  const grant = makeGrant({ clusterId: dealt.cluster.id, ...fields });
  const partials = [2, 3, 4].map((index) => ({ index, signature: dealt.partial(index, grant) }));
  return encodeToken(grant, combinePartials(backend, 4, partials)!);
}

beforeAll(() => {
  dealt = dealCluster(4, backend);
});

describe('S5 unforgeability: token binding', () => {
  it('encode/decode round-trips in binary and text form', () => {
    fc.assert(
      fc.property(grantFields, (fields) => {
        const token = sign(fields);
        const decoded = decodeToken(token.bytes, backend);
        expect(decoded.grant.resource).toBe(fields.resource);
        expect(decoded.grant.epoch).toBe(fields.epoch);
        expect(decoded.grant.holder).toEqual(fields.holder);
        expect(decoded.bytes).toEqual(token.bytes);
        expect(decodeTokenText(tokenToText(token), backend).bytes).toEqual(token.bytes);
        expect(checkToken(token.bytes, dealt.cluster).ok).toBe(true);
      }),
      { numRuns: 50 },
    );
  });

  it('flipping any bit makes decoding or verification fail', () => {
    const token = sign({ resource: 'ledger/eu-west', epoch: 41n, holder: new Uint8Array(32).fill(3) });
    fc.assert(
      fc.property(fc.integer({ min: 0, max: token.bytes.length * 8 - 1 }), (bit) => {
        const tampered = token.bytes.slice();
        tampered[bit >> 3]! ^= 1 << (bit & 7);
        expect(checkToken(tampered, dealt.cluster).ok).toBe(false);
      }),
      { numRuns: 300 },
    );
  });
});
