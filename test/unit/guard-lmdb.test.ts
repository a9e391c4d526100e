/**
 * The LMDB guard store on real files: decisions, atomicity of refusals and
 * failed mutations, compare-and-set, proof of possession, the conflict alarm,
 * the log, and the store's identity checks.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sha256 } from '@noble/hashes/sha2.js';
import { pino } from 'pino';
import { afterAll, afterEach, beforeEach, describe, expect, test } from 'vitest';
import { isQuorumFenceError } from '../../src/common/errors.js';
import { LmdbGuard, type LmdbGuardOptions } from '../../src/guard/lmdb-guard.js';
import { GuardMetrics } from '../../src/guard/metrics.js';
import { bodyDigest, signRequest } from '../../src/guard/proof.js';
import { tokenToText, type AdmissionToken } from '../../src/token/admission-token.js';
import { makeHolder, makeTokenFactory, type TestHolder } from '../support/token-factory.js';

const factory = makeTokenFactory();
const bytes = (text: string) => new TextEncoder().encode(text);
const text = (value: Uint8Array | undefined) => (value === undefined ? undefined : new TextDecoder().decode(value));

const dirs: string[] = [];
let guard: LmdbGuard;

async function openGuard(
  options: LmdbGuardOptions = {},
  dir = mkdtempSync(join(tmpdir(), 'qf-guard-')),
): Promise<LmdbGuard> {
  dirs.push(dir);
  return LmdbGuard.open(dir, factory.cluster, options);
}

function put(
  g: LmdbGuard,
  token: string | Uint8Array | undefined,
  resource: string,
  key: string,
  value: string,
  extra: object = {},
) {
  return g.write({ token, resource, op: 'put', key, ...extra }, (tx) => {
    tx.put(key, bytes(value));
  });
}

afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describe('S4 fencing: LMDB store decisions', () => {
  beforeEach(async () => {
    guard = await openGuard();
  });
  afterEach(async () => {
    await guard.close();
  });

  test('accepts, raises the barrier, refuses a stale epoch with the barrier, and keeps the data', async () => {
    const r1 = await put(guard, factory.issueText({ resource: 'r', epoch: 5 }), 'r', 'k', 'five');
    expect(r1).toMatchObject({ ok: true, seq: 1, epoch: 5n, barrier: 5n, raised: true, version: 1 });
    const r2 = await put(guard, factory.issueText({ resource: 'r', epoch: 4 }), 'r', 'k', 'four');
    expect(r2).toMatchObject({ ok: false, reason: 'stale', seq: 2, barrier: 5n });
    expect(text(guard.read('r', 'k')?.value)).toBe('five');
    expect(guard.barrier('r')?.epoch).toBe(5n);
    const r3 = await put(guard, factory.issueText({ resource: 'r', epoch: 5 }), 'r', 'k', 'five again');
    expect(r3).toMatchObject({ ok: true, raised: false, version: 3 });
    expect(guard.read('r', 'k')).toMatchObject({ version: 3 });
  });

  test('barriers are per resource', async () => {
    expect((await put(guard, factory.issueText({ resource: 'a', epoch: 9 }), 'a', 'k', 'x')).ok).toBe(true);
    expect((await put(guard, factory.issueText({ resource: 'b', epoch: 1 }), 'b', 'k', 'y')).ok).toBe(true);
    expect(guard.resources()).toEqual(['a', 'b']);
  });

  test('a token for another resource is refused as wrong_resource and changes nothing', async () => {
    const r = await put(guard, factory.issueText({ resource: 'other', epoch: 3 }), 'r', 'k', 'x');
    expect(r).toMatchObject({ ok: false, reason: 'wrong_resource', seq: null, barrier: null });
    expect(guard.read('r', 'k')).toBeUndefined();
    expect(guard.barrier('r')).toBeUndefined();
    expect(guard.barrier('other')).toBeUndefined();
    expect(guard.lastSeq()).toBe(0);
  });

  test('missing, malformed and forged tokens are refused with their reason, and nothing is written (not even the log)', async () => {
    const token = factory.issue({ resource: 'r', epoch: 3 });
    const truncated = token.bytes.subarray(0, token.bytes.length - 10);
    const results = [
      await put(guard, undefined, 'r', 'k', 'x'),
      await put(guard, 'A!!', 'r', 'k', 'x'),
      await put(guard, truncated, 'r', 'k', 'x'),
      await put(guard, factory.issueWithSigners({ resource: 'r', epoch: 3 }, [2, 3]).bytes, 'r', 'k', 'x'),
    ];
    expect(results.map((r) => (r.ok ? 'ok' : r.reason))).toEqual([
      'missing_token',
      'malformed',
      'malformed',
      'bad_token',
    ]);
    expect(results.map((r) => (r.ok ? null : r.errorCode))).toEqual([null, 'BAD_ENCODING', 'BAD_LENGTH', null]);
    expect(results.every((r) => !r.ok && r.seq === null && r.barrier === null)).toBe(true);
    expect(guard.read('r', 'k')).toBeUndefined();
    expect(guard.barrier('r')).toBeUndefined();
    // Anyone can send these: they cost no transaction, so the log and its sequence stay as they were.
    expect(guard.readLog()).toEqual([]);
    expect(guard.lastSeq()).toBe(0);
    expect(guard.logRetention()).toMatchObject({ refusedKept: 0, refusedDropped: 0 });
  });

  test('accepted entries carry the token so a checker can verify it again', async () => {
    const token = factory.issue({ resource: 'r', epoch: 3 });
    await put(guard, tokenToText(token), 'r', 'k', 'x');
    const [entry] = guard.readLog();
    expect(entry).toMatchObject({
      seq: 1,
      op: 'put',
      resource: 'r',
      key: 'k',
      accepted: true,
      outcome: 'accepted',
      epoch: '3',
      token: tokenToText(token),
      tokenDigest: Buffer.from(sha256(token.bytes)).toString('hex'),
      barrierBefore: null,
      barrierAfter: '3',
      version: 1,
    });
  });

  test('a mutation that throws is logged as aborted, applies nothing, and its error reaches the caller', async () => {
    await put(guard, factory.issueText({ resource: 'r', epoch: 1 }), 'r', 'k', 'one');
    const boom = new Error('boom');
    await expect(
      guard.write({ token: factory.issueText({ resource: 'r', epoch: 2 }), resource: 'r', key: 'k' }, (tx) => {
        tx.put('k', bytes('two'));
        tx.put('k2', bytes('two'));
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(text(guard.read('r', 'k')?.value)).toBe('one');
    expect(guard.read('r', 'k2')).toBeUndefined();
    expect(guard.barrier('r')?.epoch).toBe(1n);
    expect(guard.readLog({ after: 1 })).toMatchObject([
      { seq: 2, outcome: 'aborted', barrierBefore: '1', barrierAfter: '1' },
    ]);
  });

  test('an asynchronous mutation is refused: it would run outside the transaction', async () => {
    await expect(
      guard.write({ token: factory.issueText({ resource: 'r', epoch: 1 }), resource: 'r' }, async (tx) => {
        tx.put('k', bytes('x'));
      }),
    ).rejects.toSatisfy((e: unknown) => isQuorumFenceError(e, 'INVALID_ARGUMENT'));
    expect(guard.read('r', 'k')).toBeUndefined();
  });

  test('the mutation sees its own writes and only its resource', async () => {
    await put(guard, factory.issueText({ resource: 'a', epoch: 1 }), 'a', 'k', 'in a');
    const r = await guard.write({ token: factory.issueText({ resource: 'b', epoch: 1 }), resource: 'b' }, (tx) => {
      const before = tx.get('k');
      tx.put('k', bytes('in b'));
      const after = tx.get('k');
      tx.remove('k');
      return { before, after: text(after?.value), gone: tx.get('k') };
    });
    expect(r).toMatchObject({ ok: true, result: { before: undefined, after: 'in b', gone: undefined } });
    expect(text(guard.read('a', 'k')?.value)).toBe('in a');
    expect(guard.entries('b')).toEqual([]);
  });

  test('compare-and-set: a failed ifVersion is refused and changes nothing; versions never repeat after a delete', async () => {
    const token = factory.issueText({ resource: 'r', epoch: 1 });
    expect(await put(guard, token, 'r', 'k', 'a', { ifVersion: { key: 'k', version: 0 } })).toMatchObject({
      ok: true,
      version: 1,
    });
    expect(await put(guard, token, 'r', 'k', 'b', { ifVersion: { key: 'k', version: 0 } })).toMatchObject({
      ok: false,
      reason: 'version_mismatch',
    });
    expect(await put(guard, token, 'r', 'k', 'c', { ifVersion: { key: 'k', version: 1 } })).toMatchObject({
      ok: true,
      version: 3,
    });
    await guard.write({ token, resource: 'r', op: 'delete', key: 'k' }, (tx) => tx.remove('k'));
    const again = await put(guard, token, 'r', 'k', 'd', { ifVersion: { key: 'k', version: 0 } });
    expect(again).toMatchObject({ ok: true, version: 5 });
    expect(await put(guard, token, 'r', 'k', 'e', { ifVersion: { key: 'k', version: 1 } })).toMatchObject({
      ok: false,
      reason: 'version_mismatch',
    });
    expect(text(guard.read('r', 'k')?.value)).toBe('d');
  });

  test('a mutation may refuse on a precondition of its own', async () => {
    const r = await guard.write({ token: factory.issueText({ resource: 'r', epoch: 4 }), resource: 'r' }, (tx) => {
      tx.put('k', bytes('x'));
      return tx.refuse('version_mismatch', 'not today');
    });
    expect(r).toMatchObject({ ok: false, reason: 'version_mismatch', message: 'not today' });
    expect(guard.read('r', 'k')).toBeUndefined();
    expect(guard.barrier('r')).toBeUndefined();
  });

  test('readLog pages in order without gaps', async () => {
    const token = factory.issueText({ resource: 'r', epoch: 1 });
    await Promise.all(Array.from({ length: 25 }, (_, i) => put(guard, token, 'r', `k${i}`, 'v')));
    const seqs: number[] = [];
    for (let after = 0; ;) {
      const page = guard.readLog({ after, limit: 10 });
      if (page.length === 0) break;
      seqs.push(...page.map((e) => e.seq));
      after = page.at(-1)!.seq;
    }
    expect(seqs).toEqual(Array.from({ length: 25 }, (_, i) => i + 1));
    expect(guard.lastSeq()).toBe(25);
  });

  test('bad request shapes throw INVALID_ARGUMENT or a resource code before anything is logged', async () => {
    const token = factory.issueText({ resource: 'r', epoch: 1 });
    const attempts: [unknown, string][] = [
      [{ token, resource: '' }, 'RESOURCE_EMPTY'],
      [{ token, resource: 'x'.repeat(257) }, 'RESOURCE_TOO_LONG'],
      [{ token, resource: 'r', key: 'k'.repeat(513) }, 'INVALID_ARGUMENT'],
      [{ token, resource: 'r', op: '' }, 'INVALID_ARGUMENT'],
      [{ token: 42, resource: 'r' }, 'INVALID_ARGUMENT'],
      [{ token, resource: 'r', ifVersion: { key: 'k', version: -1 } }, 'INVALID_ARGUMENT'],
    ];
    for (const [request, code] of attempts) {
      await expect(guard.write(request as never)).rejects.toSatisfy((e: unknown) =>
        isQuorumFenceError(e, code as never),
      );
    }
    expect(guard.lastSeq()).toBe(0);
  });

  test('a closed store refuses writes with CLOSED', async () => {
    await guard.close();
    await expect(put(guard, factory.issueText({ resource: 'r', epoch: 1 }), 'r', 'k', 'x')).rejects.toSatisfy(
      (e: unknown) => isQuorumFenceError(e, 'CLOSED'),
    );
  });
});

describe('S1 uniqueness violated upstream: the conflict alarm', () => {
  test('a second token at the barrier epoch is refused, both tokens are kept, metric and error log raised', async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const metrics = new GuardMetrics({ cluster: factory.cluster.idHex });
    const g = await openGuard({ observer: metrics, logger });
    try {
      const first = factory.issue({ resource: 'r', epoch: 7, holder: makeHolder() });
      const second = factory.issue({ resource: 'r', epoch: 7, holder: makeHolder() });
      expect((await put(g, first.bytes, 'r', 'k', 'first')).ok).toBe(true);
      const r = await put(g, second.bytes, 'r', 'k', 'second');
      expect(r).toMatchObject({ ok: false, reason: 'conflict', barrier: 7n });
      expect(text(g.read('r', 'k')?.value)).toBe('first');
      const [, entry] = g.readLog();
      expect(entry).toMatchObject({
        outcome: 'conflict',
        token: tokenToText(second),
        conflictingToken: tokenToText(first),
      });
      expect(lines.find((l) => l.level === 50)).toMatchObject({
        resource: 'r',
        epoch: '7',
        conflictingToken: tokenToText(first),
      });
      const text_ = await metrics.registry.metrics();
      expect(text_).toMatch(/quorumfence_guard_conflicts_total\{resource="r",cluster="[0-9a-f]+"\} 1/);
      expect(text_).toMatch(/quorumfence_guard_attempts_total\{op="put",outcome="conflict",cluster="[0-9a-f]+"\} 1/);
    } finally {
      await g.close();
    }
  });
});

describe('proof of possession (LMDB store)', () => {
  const holder: TestHolder = makeHolder();
  const stranger: TestHolder = makeHolder();
  let token: AdmissionToken;

  beforeEach(async () => {
    guard = await openGuard({ requireProof: true, audience: 'kv-test' });
    token = factory.issue({ resource: 'r', epoch: 3, holder });
  });
  afterEach(async () => {
    await guard.close();
  });

  function signedPut(signer: TestHolder, counter: bigint, value = 'v', key = 'k') {
    const body = bytes(value);
    const digest = bodyDigest(body);
    const proof = signRequest(signer, {
      audience: 'kv-test',
      method: 'PUT',
      resource: 'r',
      key,
      bodyDigest: digest,
      tokenDigest: sha256(token.bytes),
      counter,
    });
    return guard.write(
      {
        token: token.bytes,
        resource: 'r',
        key,
        op: 'put',
        proof: { method: 'PUT', bodyDigest: digest, counter, signature: proof.signature },
      },
      (tx) => tx.put(key, body),
    );
  }

  test('a request signed by the holder is accepted; without a proof it is refused', async () => {
    expect(await signedPut(holder, 1n)).toMatchObject({ ok: true });
    expect(await put(guard, token.bytes, 'r', 'k', 'x')).toMatchObject({ ok: false, reason: 'proof_required' });
  });

  test('a replayed request is refused as replayed and changes nothing', async () => {
    expect(await signedPut(holder, 1n, 'first')).toMatchObject({ ok: true });
    expect(await signedPut(holder, 2n, 'second')).toMatchObject({ ok: true });
    expect(await signedPut(holder, 1n, 'first')).toMatchObject({ ok: false, reason: 'replayed', barrier: 3n });
    expect(text(guard.read('r', 'k')?.value)).toBe('second');
  });

  test("the token presented with another key's signature is refused as bad_proof", async () => {
    expect(await signedPut(stranger, 1n)).toMatchObject({ ok: false, reason: 'bad_proof' });
    expect(guard.read('r', 'k')).toBeUndefined();
    expect(guard.barrier('r')).toBeUndefined();
  });

  test('a signature over another body does not pass', async () => {
    const digest = bodyDigest(bytes('signed body'));
    const proof = signRequest(holder, {
      audience: 'kv-test',
      method: 'PUT',
      resource: 'r',
      key: 'k',
      bodyDigest: digest,
      tokenDigest: sha256(token.bytes),
      counter: 1n,
    });
    const r = await guard.write(
      {
        token: token.bytes,
        resource: 'r',
        key: 'k',
        proof: { method: 'PUT', bodyDigest: bodyDigest(bytes('other body')), counter: 1n, signature: proof.signature },
      },
      (tx) => tx.put('k', bytes('other body')),
    );
    expect(r).toMatchObject({ ok: false, reason: 'bad_proof' });
  });

  test('the replay window survives a restart (it is stored with the barrier)', async () => {
    const dir = dirs.at(-1)!;
    expect(await signedPut(holder, 5n)).toMatchObject({ ok: true });
    await guard.close();
    guard = await openGuard({ requireProof: true, audience: 'kv-test' }, dir);
    expect(await signedPut(holder, 5n)).toMatchObject({ ok: false, reason: 'replayed' });
    expect(await signedPut(holder, 4n)).toMatchObject({ ok: true });
  });
});

describe('store identity', () => {
  test('a store opened with another cluster is refused with CLUSTER_MISMATCH', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'qf-guard-'));
    dirs.push(dir);
    const g = await LmdbGuard.open(dir, factory.cluster);
    await g.close();
    const other = makeTokenFactory();
    await expect(LmdbGuard.open(dir, other.cluster)).rejects.toSatisfy((e: unknown) =>
      isQuorumFenceError(e, 'CLUSTER_MISMATCH'),
    );
    const again = await LmdbGuard.open(dir, factory.cluster);
    await again.close();
  });

  test('data and barrier survive a close and reopen', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'qf-guard-'));
    dirs.push(dir);
    let g = await LmdbGuard.open(dir, factory.cluster);
    await put(g, factory.issueText({ resource: 'r', epoch: 12 }), 'r', 'k', 'kept');
    await g.close();
    g = await LmdbGuard.open(dir, factory.cluster);
    try {
      expect(text(g.read('r', 'k')?.value)).toBe('kept');
      expect(g.barrier('r')?.epoch).toBe(12n);
      expect(await put(g, factory.issueText({ resource: 'r', epoch: 11 }), 'r', 'k', 'x')).toMatchObject({
        ok: false,
        reason: 'stale',
        seq: 2,
      });
    } finally {
      await g.close();
    }
  });
});
