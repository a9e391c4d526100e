/**
 * The guard's pure parts: the fence decision, the replay window, the proof
 * transcript, the cached verifier, and that none of it reads a clock.
 */
import { afterEach, describe, expect, test, vi } from 'vitest';
import { sha256 } from '@noble/hashes/sha2.js';
import { fromBase64Url, toBase64Url } from '../../src/common/bytes.js';
import { isQuorumFenceError } from '../../src/common/errors.js';
import { GuardCore } from '../../src/guard/core.js';
import { decideFence, type Barrier } from '../../src/guard/fence.js';
import { parseGuardLogEntry } from '../../src/guard/log.js';
import {
  REPLAY_WINDOW,
  admitCounter,
  bodyDigest,
  openReplayWindow,
  requestTranscript,
  signRequest,
  verifyRequestProof,
  type RequestFields,
} from '../../src/guard/proof.js';
import { MAX_TOKEN_TEXT_LENGTH, TokenVerifier } from '../../src/guard/verifier.js';
import { makeHolder, makeTokenFactory } from '../support/token-factory.js';

const factory = makeTokenFactory();

function fenced(epoch: bigint, holderSeed = 1) {
  const token = factory.issue({ resource: 'r', epoch, holder: makeHolder(new Uint8Array(32).fill(holderSeed)) });
  return { epoch, digest: sha256(token.bytes), bytes: token.bytes };
}

describe('S4 fencing: the barrier decision', () => {
  test('the first token sets the barrier', () => {
    const d = decideFence(undefined, fenced(5n));
    expect(d).toMatchObject({ ok: true, raised: true, barrier: { epoch: 5n, replay: null } });
  });

  test('a higher epoch raises it, a lower one is stale with the barrier', () => {
    const first = decideFence(undefined, fenced(5n));
    if (!first.ok) throw new Error('unreachable');
    const higher = decideFence(first.barrier, fenced(9n, 2));
    expect(higher).toMatchObject({ ok: true, raised: true, barrier: { epoch: 9n } });
    expect(decideFence(first.barrier, fenced(4n, 2))).toEqual({ ok: false, reason: 'stale', barrier: 5n });
  });

  test('the same token at the barrier is accepted without raising it', () => {
    const token = fenced(5n);
    const first = decideFence(undefined, token);
    if (!first.ok) throw new Error('unreachable');
    const again = decideFence(first.barrier, token);
    expect(again).toMatchObject({ ok: true, raised: false });
    if (again.ok) expect(again.barrier).toBe(first.barrier);
  });

  test('a different token at the barrier epoch is a conflict carrying the first token as evidence', () => {
    const first = decideFence(undefined, fenced(5n, 1));
    if (!first.ok) throw new Error('unreachable');
    const other = fenced(5n, 2);
    const d = decideFence(first.barrier, other);
    expect(d).toMatchObject({ ok: false, reason: 'conflict', barrier: 5n });
    if (!d.ok && d.reason === 'conflict') expect(d.barrierToken).toEqual(fenced(5n, 1).bytes);
  });

  test('proof counters: a new token opens a window, the same counter again is replayed', () => {
    const token = fenced(5n);
    const first = decideFence(undefined, token, 10n);
    if (!first.ok) throw new Error('unreachable');
    expect(first.barrier.replay).toEqual({ high: 10n, seen: 1n });
    expect(decideFence(first.barrier, token, 10n)).toMatchObject({ ok: false, reason: 'replayed', barrier: 5n });
    const next = decideFence(first.barrier, token, 11n);
    expect(next).toMatchObject({ ok: true, raised: false, barrier: { replay: { high: 11n, seen: 3n } } });
  });

  test('a higher token resets the window: its counters start afresh', () => {
    const first = decideFence(undefined, fenced(5n), 100n) as Extract<ReturnType<typeof decideFence>, { ok: true }>;
    const raised = decideFence(first.barrier, fenced(6n, 2), 1n);
    expect(raised).toMatchObject({ ok: true, raised: true, barrier: { epoch: 6n, replay: { high: 1n, seen: 1n } } });
  });
});

describe('proof of possession: the replay window', () => {
  test('accepts out-of-order counters within the window once each', () => {
    let window = openReplayWindow(100n);
    for (const counter of [98n, 99n, 50n + REPLAY_WINDOW]) {
      const r = admitCounter(window, counter);
      expect(r.ok).toBe(true);
      if (r.ok) window = r.window;
    }
    for (const counter of [98n, 99n, 100n]) expect(admitCounter(window, counter).ok).toBe(false);
  });

  test('refuses counters that fell out of the window', () => {
    const window = openReplayWindow(1000n);
    expect(admitCounter(window, 1000n - REPLAY_WINDOW).ok).toBe(false);
    expect(admitCounter(window, 1000n - REPLAY_WINDOW + 1n).ok).toBe(true);
  });

  test('a jump beyond the window forgets the old bitmap', () => {
    const r = admitCounter(openReplayWindow(5n), 5n + 10n * REPLAY_WINDOW);
    expect(r).toEqual({ ok: true, window: { high: 5n + 10n * REPLAY_WINDOW, seen: 1n } });
  });
});

describe('proof of possession: the transcript', () => {
  const holder = makeHolder();
  const fields: RequestFields = {
    audience: 'kv-1',
    method: 'PUT',
    resource: 'r',
    key: 'k',
    bodyDigest: bodyDigest(new TextEncoder().encode('value')),
    tokenDigest: sha256(new Uint8Array([1])),
    counter: 7n,
  };

  test('a holder signature verifies, and changing any field breaks it', () => {
    const proof = signRequest(holder, fields);
    expect(verifyRequestProof(holder.publicKey, fields, proof.signature)).toBe(true);
    const changes: Partial<RequestFields>[] = [
      { audience: 'kv-2' },
      { method: 'DELETE' },
      { resource: 'r2' },
      { key: 'k2' },
      { bodyDigest: bodyDigest(new Uint8Array()) },
      { tokenDigest: sha256(new Uint8Array([2])) },
      { counter: 8n },
    ];
    for (const change of changes)
      expect(verifyRequestProof(holder.publicKey, { ...fields, ...change }, proof.signature)).toBe(false);
  });

  test('another key does not verify, and garbage keys or signatures return false', () => {
    const proof = signRequest(holder, fields);
    expect(verifyRequestProof(makeHolder().publicKey, fields, proof.signature)).toBe(false);
    expect(verifyRequestProof(new Uint8Array(32).fill(0xff), fields, proof.signature)).toBe(false);
    expect(verifyRequestProof(holder.publicKey, fields, proof.signature.subarray(0, 63))).toBe(false);
  });

  test('fields are length-prefixed: moving bytes between fields changes the transcript', () => {
    const a = requestTranscript({ ...fields, resource: 'ab', key: 'c' });
    const b = requestTranscript({ ...fields, resource: 'a', key: 'bc' });
    expect(a).not.toEqual(b);
  });

  test('a counter outside 1 .. 2^63-1 is refused with INVALID_ARGUMENT', () => {
    for (const counter of [0n, 1n << 63n]) {
      let error: unknown;
      try {
        requestTranscript({ ...fields, counter });
      } catch (e) {
        error = e;
      }
      expect(isQuorumFenceError(error, 'INVALID_ARGUMENT')).toBe(true);
    }
  });
});

describe('token verifier cache', () => {
  test('the second check of a token is a cache hit and costs no pairing', () => {
    const verifier = new TokenVerifier(factory.cluster);
    const text = factory.issueText({ resource: 'r', epoch: 1 });
    const verify = vi.spyOn(factory.cluster.backend, 'verify');
    try {
      expect(verifier.verify(text)).toMatchObject({ ok: true, cached: false });
      expect(verifier.verify(text)).toMatchObject({ ok: true, cached: true });
      expect(verifier.verify(fromBase64Url(text, 't'))).toMatchObject({ ok: true, cached: true });
      expect(verify).toHaveBeenCalledTimes(1);
    } finally {
      verify.mockRestore();
    }
  });

  test('failures are not cached and a tampered token never hits the entry of the genuine one', () => {
    const verifier = new TokenVerifier(factory.cluster);
    const token = factory.issue({ resource: 'r', epoch: 2 });
    expect(verifier.verify(token.bytes).ok).toBe(true);
    const tampered = token.bytes.slice();
    tampered[40]! ^= 1; // inside the epoch
    expect(verifier.verify(tampered)).toMatchObject({ ok: false, reason: 'bad_token' });
    expect(verifier.verify(tampered)).toMatchObject({ ok: false, reason: 'bad_token' });
    expect(verifier.cacheEntries).toBe(1);
  });

  test('the cache is bounded, evicting the least recently used', () => {
    const verifier = new TokenVerifier(factory.cluster, { cacheSize: 2 });
    const [a, b, c] = [3, 4, 5].map((epoch) => factory.issueText({ resource: 'r', epoch }));
    verifier.verify(a);
    verifier.verify(b);
    verifier.verify(a); // a is now the most recent
    verifier.verify(c); // evicts b
    expect(verifier.cacheEntries).toBe(2);
    expect(verifier.verify(a)).toMatchObject({ cached: true });
    expect(verifier.verify(b)).toMatchObject({ cached: false });
  });

  test('every way a token can be wrong is a value with a reason and, when malformed, the decoder code', () => {
    const verifier = new TokenVerifier(factory.cluster);
    const other = makeTokenFactory();
    const token = factory.issue({ resource: 'r', epoch: 6 });
    expect(verifier.verify(undefined)).toMatchObject({ ok: false, reason: 'missing_token' });
    expect(verifier.verify('')).toMatchObject({ ok: false, reason: 'missing_token' });
    expect(verifier.verify('not base64!')).toMatchObject({ ok: false, reason: 'malformed', code: 'BAD_ENCODING' });
    expect(verifier.verify('A'.repeat(MAX_TOKEN_TEXT_LENGTH + 1))).toMatchObject({
      ok: false,
      reason: 'malformed',
      code: 'BAD_LENGTH',
    });
    expect(verifier.verify(toBase64Url(token.bytes.subarray(0, token.bytes.length - 1)))).toMatchObject({
      reason: 'malformed',
      code: 'BAD_LENGTH',
    });
    const badVersion = token.bytes.slice();
    badVersion[0] = 2;
    expect(verifier.verify(badVersion)).toMatchObject({ reason: 'malformed', code: 'UNKNOWN_VERSION' });
    expect(verifier.verify(other.issueText({ resource: 'r', epoch: 6 }))).toMatchObject({
      ok: false,
      reason: 'wrong_cluster',
    });
    // Fewer than t shares: a forgery attempt.
    expect(verifier.verify(factory.issueWithSigners({ resource: 'r', epoch: 6 }, [1, 2]).bytes)).toMatchObject({
      ok: false,
      reason: 'bad_token',
    });
  });
});

describe('S6 no clocks at the guard', () => {
  afterEach(() => vi.restoreAllMocks());

  test('admitting and deciding read no clock', async () => {
    const core = new GuardCore(factory.cluster);
    const holder = makeHolder();
    const token = factory.issue({ resource: 'r', epoch: 8, holder });
    const fields = {
      audience: '',
      method: 'PUT',
      resource: 'r',
      key: 'k',
      bodyDigest: bodyDigest(new Uint8Array()),
      tokenDigest: sha256(token.bytes),
      counter: 1n,
    };
    const proof = signRequest(holder, fields);
    const trap = () => {
      throw new Error('the guard read a clock');
    };
    vi.spyOn(Date, 'now').mockImplementation(trap);
    vi.spyOn(performance, 'now').mockImplementation(trap);
    vi.spyOn(process, 'hrtime').mockImplementation(trap as never);
    const admission = await core.admit({
      token: token.bytes,
      resource: 'r',
      key: 'k',
      proof: { method: 'PUT', bodyDigest: fields.bodyDigest, counter: 1n, signature: proof.signature },
    });
    expect(admission.ok).toBe(true);
    if (!admission.ok) return;
    const decision = core.decide(admission, undefined as Barrier | undefined);
    expect(decision).toMatchObject({ ok: true, raised: true });
  });
});

describe('guard log entries', () => {
  const entry = {
    seq: 1,
    op: 'put',
    resource: 'r',
    key: 'k',
    accepted: true,
    outcome: 'accepted',
    epoch: '5',
    holder: 'ab'.repeat(32),
    tokenDigest: 'cd'.repeat(32),
    token: 'AQID',
    barrierBefore: null,
    barrierAfter: '5',
    version: 1,
    conflictingToken: null,
    errorCode: null,
  };

  test('a well-formed entry parses to itself', () => {
    expect(parseGuardLogEntry(entry)).toEqual(entry);
  });

  test.each([
    ['seq', { seq: 0 }],
    ['outcome', { outcome: 'maybe' }],
    ['accepted', { accepted: false }],
    ['epoch', { epoch: '-1' }],
    ['holder', { holder: 'xyz' }],
    ['version', { version: -1 }],
  ])('a bad "%s" is refused with INVALID_ARGUMENT naming the field', (field, change) => {
    let error: unknown;
    try {
      parseGuardLogEntry({ ...entry, ...change });
    } catch (e) {
      error = e;
    }
    expect(isQuorumFenceError(error, 'INVALID_ARGUMENT')).toBe(true);
    expect((error as { details: { field: string } }).details.field).toBe(field);
  });
});
