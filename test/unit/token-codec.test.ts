/**
 * Admission token decoding: every way bytes can be wrong has its own code,
 * and nothing but the one canonical encoding decodes.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { loadBackend } from '../../src/crypto/load.js';
import { combinePartials } from '../../src/crypto/threshold.js';
import { concatBytes, u16be, u64be } from '../../src/common/bytes.js';
import {
  decodeToken,
  decodeTokenText,
  encodeToken,
  tokenToText,
  checkToken,
  type AdmissionToken,
} from '../../src/token/admission-token.js';
import { makeGrant, type Grant } from '../../src/token/grant.js';
import { dealCluster, type DealtCluster } from '../support/dealt-cluster.js';
import { codeOf } from '../support/error-code.js';

const backend = loadBackend();
let dealt: DealtCluster;
let grant: Grant;
let token: AdmissionToken;

/** Token bytes with arbitrary fields, bypassing the encoder's checks. */
function rawToken(fields: {
  version?: number;
  epoch?: bigint;
  resource?: Uint8Array;
  resourceLength?: number;
  signature?: Uint8Array;
}): Uint8Array {
  const resource = fields.resource ?? new TextEncoder().encode(grant.resource);
  return concatBytes(
    Uint8Array.of(fields.version ?? 1),
    grant.clusterId,
    u64be(fields.epoch ?? grant.epoch),
    u16be(fields.resourceLength ?? resource.length),
    resource,
    grant.holder,
    fields.signature ?? token.signature.bytes,
  );
}

beforeAll(() => {
  dealt = dealCluster(4, backend);
  grant = makeGrant({
    clusterId: dealt.cluster.id,
    resource: 'orders/42',
    epoch: 7n,
    holder: new Uint8Array(32).fill(9),
  });
  const partials = [1, 2, 3].map((index) => ({ index, signature: dealt.partial(index, grant) }));
  token = encodeToken(grant, combinePartials(backend, 4, partials)!);
});

describe('admission token codec', () => {
  it('round-trips binary and text forms', () => {
    const decoded = decodeToken(token.bytes, backend);
    expect(decoded.bytes).toEqual(token.bytes);
    expect(decoded.grant).toEqual(grant);
    expect(decodeTokenText(tokenToText(token), backend).bytes).toEqual(token.bytes);
    expect(checkToken(tokenToText(token), dealt.cluster).ok).toBe(true);
  });

  it('refuses an unknown version with UNKNOWN_VERSION', () => {
    expect(codeOf(() => decodeToken(rawToken({ version: 2 }), backend))).toBe('UNKNOWN_VERSION');
    expect(codeOf(() => decodeToken(rawToken({ version: 0 }), backend))).toBe('UNKNOWN_VERSION');
  });

  it('refuses trailing bytes with TRAILING_BYTES', () => {
    expect(codeOf(() => decodeToken(concatBytes(token.bytes, Uint8Array.of(0)), backend))).toBe('TRAILING_BYTES');
  });

  it('refuses wrong lengths with BAD_LENGTH', () => {
    expect(codeOf(() => decodeToken(new Uint8Array(0), backend))).toBe('BAD_LENGTH');
    expect(codeOf(() => decodeToken(token.bytes.subarray(0, token.bytes.length - 1), backend))).toBe('BAD_LENGTH');
    expect(codeOf(() => decodeToken(token.bytes.subarray(0, 20), backend))).toBe('BAD_LENGTH');
    // A declared resource length longer than what follows.
    expect(codeOf(() => decodeToken(rawToken({ resourceLength: 200 }), backend))).toBe('BAD_LENGTH');
  });

  it('refuses epoch 0 and epochs >= 2^63 with EPOCH_OUT_OF_RANGE', () => {
    expect(codeOf(() => decodeToken(rawToken({ epoch: 0n }), backend))).toBe('EPOCH_OUT_OF_RANGE');
    expect(codeOf(() => decodeToken(rawToken({ epoch: 1n << 63n }), backend))).toBe('EPOCH_OUT_OF_RANGE');
    expect(codeOf(() => decodeToken(rawToken({ epoch: (1n << 64n) - 1n }), backend))).toBe('EPOCH_OUT_OF_RANGE');
    expect(codeOf(() => makeGrant({ ...grant, epoch: 0n }))).toBe('EPOCH_OUT_OF_RANGE');
  });

  it('refuses an empty resource with RESOURCE_EMPTY and an over-long one with RESOURCE_TOO_LONG', () => {
    expect(codeOf(() => decodeToken(rawToken({ resource: new Uint8Array(0) }), backend))).toBe('RESOURCE_EMPTY');
    // The length field is read before the bytes behind it: 257 is refused however many follow...
    expect(
      codeOf(() => decodeToken(rawToken({ resourceLength: 257, resource: new Uint8Array(12).fill(0x61) }), backend)),
    ).toBe('RESOURCE_TOO_LONG');
    // ... except that a token longer than the longest one there can be (427 bytes) is refused before any field is
    // read (docs/protocol.md, "Token": the order of checks), as the guard's verifier always did.
    expect(codeOf(() => decodeToken(rawToken({ resource: new Uint8Array(257).fill(0x61) }), backend))).toBe(
      'BAD_LENGTH',
    );
    expect(codeOf(() => makeGrant({ ...grant, resource: '' }))).toBe('RESOURCE_EMPTY');
    expect(codeOf(() => makeGrant({ ...grant, resource: 'é'.repeat(129) }))).toBe('RESOURCE_TOO_LONG');
    expect(codeOf(() => makeGrant({ ...grant, resource: 'é'.repeat(128) }))).toBeUndefined();
  });

  it('refuses invalid UTF-8 with RESOURCE_NOT_UTF8', () => {
    expect(codeOf(() => decodeToken(rawToken({ resource: Uint8Array.of(0x61, 0xff, 0x62) }), backend))).toBe(
      'RESOURCE_NOT_UTF8',
    );
    // An overlong encoding of "/" and a lone surrogate encoded as UTF-8 are both ill-formed.
    expect(codeOf(() => decodeToken(rawToken({ resource: Uint8Array.of(0xc0, 0xaf) }), backend))).toBe(
      'RESOURCE_NOT_UTF8',
    );
    expect(codeOf(() => decodeToken(rawToken({ resource: Uint8Array.of(0xed, 0xa0, 0x80) }), backend))).toBe(
      'RESOURCE_NOT_UTF8',
    );
    expect(codeOf(() => makeGrant({ ...grant, resource: 'a\ud800' }))).toBe('RESOURCE_NOT_UTF8');
  });

  it('refuses bad signature points with their point codes', () => {
    const identity = new Uint8Array(96);
    identity[0] = 0xc0;
    expect(codeOf(() => decodeToken(rawToken({ signature: identity }), backend))).toBe('POINT_IDENTITY');
    const uncompressed = token.signature.bytes.slice();
    uncompressed[0]! &= 0x7f;
    expect(codeOf(() => decodeToken(rawToken({ signature: uncompressed }), backend))).toBe('POINT_NOT_CANONICAL');
  });

  it('refuses text that is not canonical base64url with BAD_ENCODING', () => {
    const text = tokenToText(token);
    expect(codeOf(() => decodeTokenText(text + '=', backend))).toBe('BAD_ENCODING');
    expect(codeOf(() => decodeTokenText(text.replace(/.$/, '+'), backend))).toBe('BAD_ENCODING');
    expect(codeOf(() => decodeTokenText(text + 'A', backend))).toBe('BAD_ENCODING');
  });

  it('reports a token from another cluster as wrong_cluster and a forged one as bad_signature', () => {
    const other = dealCluster(4, backend);
    expect(checkToken(token.bytes, other.cluster)).toMatchObject({ ok: false, reason: 'wrong_cluster' });
    const forged = encodeToken({ ...grant, epoch: 8n }, token.signature);
    expect(checkToken(forged.bytes, dealt.cluster)).toMatchObject({ ok: false, reason: 'bad_signature' });
    expect(checkToken(concatBytes(token.bytes, Uint8Array.of(1)), dealt.cluster)).toMatchObject({
      ok: false,
      reason: 'malformed',
      code: 'TRAILING_BYTES',
    });
  });
});
