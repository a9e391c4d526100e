/**
 * Batched pairing checks: `verifyAll` on both backends (a batch with one bad
 * signature fails, and two bad signatures that cancel in a plain sum are
 * caught: the per-set random weights are what makes batching sound), the
 * batcher's grouping and its fallback to single checks, and a guard whose
 * concurrent writes bring fresh tokens, one of them forged: the real crypto
 * and a real LMDB store throughout.
 */
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import type * as blstNative from '@chainsafe/blst';
import type { BlsBackend, Signature, VerificationSet } from '../../src/crypto/backend.js';
import { loadBackend } from '../../src/crypto/load.js';
import { MAX_VERIFY_BATCH, VerifyBatcher, verifyBatcherFor } from '../../src/crypto/verify-batch.js';
import { LmdbGuard } from '../../src/guard/lmdb-guard.js';
import { encodeToken, tokenToText } from '../../src/token/admission-token.js';
import { makeTokenFactory } from '../support/token-factory.js';

const native = createRequire(import.meta.url)('@chainsafe/blst') as typeof blstNative;
const blst = loadBackend('blst');
const message = (k: number) => new TextEncoder().encode(`grant ${k}`);

function signedSets(backend: BlsBackend, count: number): VerificationSet[] {
  const secretKey = backend.secretKeyFromBytes(new Uint8Array(32).fill(7));
  const publicKey = backend.publicKeyOf(secretKey);
  return Array.from({ length: count }, (_, k) => ({
    publicKey,
    message: message(k),
    signature: backend.sign(secretKey, message(k)),
  }));
}

/** σ1 + D and σ2 − D for a point D nobody signed: each invalid, their sum the sum of two valid signatures. */
function cancellingPair(backend: BlsBackend, sets: readonly VerificationSet[]): [Signature, Signature] {
  const noise = backend.sign(backend.secretKeyFromBytes(new Uint8Array(32).fill(9)), message(99));
  const plus = backend.linearCombination([
    { signature: sets[0]!.signature, coefficient: 1n },
    { signature: noise, coefficient: 1n },
  ])!;
  const minus = backend.linearCombination([
    { signature: sets[1]!.signature, coefficient: 1n },
    { signature: noise, coefficient: -1n },
  ])!;
  return [plus, minus];
}

describe.each([
  ['blst', 4],
  ['noble', 2],
] as const)('verifyAll (%s)', (name, count) => {
  const backend = loadBackend(name);
  const sets = signedSets(backend, count);

  test('true when every set verifies, false for one bad signature or an empty list', () => {
    expect(backend.verifyAll(sets)).toBe(true);
    const wrongMessage = { ...sets[1]!, message: message(50) };
    expect(backend.verifyAll([sets[0]!, wrongMessage, ...sets.slice(2)])).toBe(false);
    expect(backend.verifyAll([])).toBe(false);
  });

  test('two bad signatures that cancel in a sum are refused', () => {
    const [plus, minus] = cancellingPair(backend, sets);
    const forged = [
      { ...sets[0]!, signature: plus },
      { ...sets[1]!, signature: minus },
    ];
    expect(backend.verify(forged[0]!.publicKey, forged[0]!.message, plus)).toBe(false);
    expect(backend.verify(forged[1]!.publicKey, forged[1]!.message, minus)).toBe(false);
    expect(backend.verifyAll(forged)).toBe(false);
  });
});

test('the cancelling pair is one an unweighted batch check would accept (why each set gets a random weight)', () => {
  const sets = signedSets(blst, 2);
  const [plus, minus] = cancellingPair(blst, sets);
  const sum = native.aggregateSignatures(
    [native.Signature.fromBytes(plus.bytes, true), native.Signature.fromBytes(minus.bytes, true)],
    true,
  );
  const publicKey = native.PublicKey.fromBytes(sets[0]!.publicKey.bytes, true);
  expect(native.aggregateVerify([sets[0]!.message, sets[1]!.message], [publicKey, publicKey], sum)).toBe(true);
});

describe('VerifyBatcher', () => {
  const sets = signedSets(blst, 2 * MAX_VERIFY_BATCH + 1);

  test('checks asked in one turn run as batches of at most MAX_VERIFY_BATCH, each with its own answer', async () => {
    const batcher = new VerifyBatcher(blst);
    const bad = 5;
    const answers = await Promise.all(
      sets.map((set, k) => batcher.verify(set.publicKey, k === bad ? message(1000) : set.message, set.signature)),
    );
    expect(answers).toEqual(sets.map((_, k) => k !== bad));
    expect(batcher.checks).toBe(sets.length);
    expect(batcher.batches).toBe(Math.ceil(sets.length / MAX_VERIFY_BATCH));
  });

  test('a long queue is worked off one batch per turn of the event loop', async () => {
    const batcher = new VerifyBatcher(blst);
    const answers = sets.map((set) => batcher.verify(set.publicKey, set.message, set.signature));
    await answers[0];
    // The first batch has answered; the rest waits for the next turns, so I/O can be served in between.
    expect([batcher.batches, batcher.checks]).toEqual([1, MAX_VERIFY_BATCH]);
    expect(await Promise.all(answers)).toEqual(sets.map(() => true));
    expect(batcher.batches).toBe(Math.ceil(sets.length / MAX_VERIFY_BATCH));
  });

  test('a check asked alone is answered alone, in the same turn of the event loop', async () => {
    const batcher = new VerifyBatcher(blst);
    expect(await batcher.verify(sets[0]!.publicKey, sets[0]!.message, sets[0]!.signature)).toBe(true);
    expect(await batcher.verify(sets[0]!.publicKey, message(1000), sets[0]!.signature)).toBe(false);
    expect([batcher.batches, batcher.checks]).toEqual([2, 2]);
  });

  test('a backend whose batch check throws falls back to single checks', async () => {
    const broken: BlsBackend = {
      ...blst,
      verifyAll: () => {
        throw new Error('batch check unavailable');
      },
    };
    const batcher = new VerifyBatcher(broken);
    const answers = await Promise.all([
      batcher.verify(sets[0]!.publicKey, sets[0]!.message, sets[0]!.signature),
      batcher.verify(sets[1]!.publicKey, message(1000), sets[1]!.signature),
    ]);
    expect(answers).toEqual([true, false]);
  });
});

describe('a guard batches the pairings of concurrent fresh tokens', () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  test('every valid token is accepted and the forged one refused as bad_token, in fewer batches than checks', async () => {
    const factory = makeTokenFactory({ backend: blst });
    const dir = mkdtempSync(join(tmpdir(), 'qf-guard-batch-'));
    dirs.push(dir);
    const guard = await LmdbGuard.open(dir, factory.cluster);
    try {
      const tokens = Array.from({ length: 6 }, (_, k) => factory.issueText({ resource: `batch/${k}`, epoch: 1 }));
      // Replica 1's partial alone, as if combined: a well-formed token whose signature is not the group's.
      const lone = factory.issueWithSigners({ resource: 'batch/forged', epoch: 1 }, [1]);
      const forged = tokenToText(encodeToken(lone.grant, lone.signature));
      const shared = verifyBatcherFor(blst);
      const before = { batches: shared.batches, checks: shared.checks };
      const results = await Promise.all(
        [...tokens, forged].map((token, k) =>
          guard.write({ token, resource: k < tokens.length ? `batch/${k}` : 'batch/forged', op: 'put', key: 'k' }),
        ),
      );
      expect(results.map((r) => (r.ok ? 'accepted' : r.reason))).toEqual([
        ...tokens.map(() => 'accepted'),
        'bad_token',
      ]);
      const checks = shared.checks - before.checks;
      expect(checks).toBe(tokens.length + 1);
      expect(shared.batches - before.batches).toBeLessThan(checks);
    } finally {
      await guard.close();
    }
  });
});
