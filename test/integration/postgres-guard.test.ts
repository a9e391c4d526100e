/**
 * The PostgreSQL guard store against a real server (test/support/postgres.ts
 * starts it and makes a fresh database for this file): S4 fencing with
 * concurrent connections racing on the same rows, refusals that change
 * nothing, the conflict evidence, rollback of failed mutations, and the
 * replay window kept in the barrier row. Every test runs against both forms
 * of write (the transaction, `write`, and the single statement,
 * `writeStatement`), and the racing property also mixes the two on one
 * resource. postgres-guard-statement.test.ts covers what only the single
 * statement has, and the log's retention.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import fc from 'fast-check';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { toHex } from '../../src/common/bytes.js';
import { isQuorumFenceError } from '../../src/common/errors.js';
import type { GuardRequest, GuardResult } from '../../src/guard/core.js';
import { PostgresGuard } from '../../src/guard/postgres-guard.js';
import { bodyDigest, signRequest } from '../../src/guard/proof.js';
import { tokenToText } from '../../src/token/admission-token.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { makeHolder, makeTokenFactory } from '../support/token-factory.js';
import { lacks, needs } from '../support/system-tools.js';

const factory = makeTokenFactory();
const holders = Array.from({ length: 4 }, (_, i) => makeHolder(new Uint8Array(32).fill(i + 1)));
/** Enough connections that most attempts of a run are in flight at once. */
const CONNECTIONS = 16;

describe.skipIf(lacks('postgresql'))(`PostgreSQL guard ${needs('postgresql')}`, () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let guard: PostgresGuard;

  beforeAll(async () => {
    db = createTestDatabase('guard');
    pool = db.pool(CONNECTIONS);
    // Tests read the whole log in one page.
    guard = await PostgresGuard.open(pool, factory.cluster, { maxLogPage: 100_000 });
    await pool.query(
      'CREATE TABLE kv (resource text NOT NULL, key text NOT NULL, value text NOT NULL, PRIMARY KEY (resource, key))',
    );
  });

  afterAll(async () => {
    await guard?.close();
    await pool?.end();
    await db?.drop();
  });

  const UPSERT =
    'INSERT INTO kv (resource, key, value) VALUES ($1, $2, $3) ON CONFLICT (resource, key) DO UPDATE SET value = EXCLUDED.value';

  function upsert(resource: string, key: string, value: string) {
    return (tx: { query: (text: string, values?: unknown[]) => Promise<unknown> }) =>
      tx.query(UPSERT, [resource, key, value]);
  }

  type Form = 'transaction' | 'statement';
  const FORMS: readonly Form[] = ['transaction', 'statement'];

  /** One upsert through the guard, in the given form. */
  function guardedUpsert(form: Form, request: GuardRequest, value: string): Promise<GuardResult<unknown>> {
    const key = request.key ?? 'k';
    return form === 'transaction'
      ? guard.write(request, upsert(request.resource, key, value))
      : guard.writeStatement(request, { text: UPSERT, values: [request.resource, key, value] });
  }

  async function stored(resource: string): Promise<Map<string, string>> {
    const rows = (
      await pool.query<{ key: string; value: string }>('SELECT key, value FROM kv WHERE resource = $1', [resource])
    ).rows;
    return new Map(rows.map((r) => [r.key, r.value]));
  }

  describe.each(['transaction', 'statement', 'mixed'] as const)(
    'S4 fencing (PostgreSQL, concurrent connections, %s form)',
    (mode) => {
      let run = 0;

      test('racing writes: accepted epochs never go down and the table holds exactly the accepted writes in decision order', async () => {
        const attempt = fc.record({
          resource: fc.integer({ min: 0, max: 2 }),
          epoch: fc.integer({ min: 1, max: 8 }),
          holder: fc.integer({ min: 0, max: holders.length - 1 }),
          key: fc.constantFrom('x', 'y'),
          statement: fc.boolean(),
        });
        const statementsBefore = guard.forms.statement;
        await fc.assert(
          fc.asyncProperty(fc.array(attempt, { minLength: 2, maxLength: 24 }), async (attempts) => {
            run++;
            // Fresh resource names per run; each starts with an accepted epoch-1 write by holder 0 (the
            // seed), so the single-statement form knows the barrier and races on it from the first attempt.
            const name = (r: number) => `${mode}/run${run}/res${r}`;
            const seed = (r: number) => factory.issue({ resource: name(r), epoch: 1, holder: holders[0]! });
            for (let r = 0; r <= 2; r++) {
              const seeded = await guardedUpsert(
                'transaction',
                { token: seed(r).bytes, resource: name(r), key: 'seed' },
                'seed',
              );
              expect(seeded.ok).toBe(true);
            }
            const results = await Promise.all(
              attempts.map((a, i) => {
                const token = factory.issue({ resource: name(a.resource), epoch: a.epoch, holder: holders[a.holder]! });
                const form: Form = mode === 'mixed' ? (a.statement ? 'statement' : 'transaction') : mode;
                return guardedUpsert(
                  form,
                  { token: token.bytes, resource: name(a.resource), key: a.key, op: 'put' },
                  `v${i}`,
                ).then((r) => ({ r, a, i, digest: toHex(sha256(token.bytes)) }));
              }),
            );

            // Every attempt here has a valid token, so every one was logged.
            const log = await guard.readLog({ after: Math.min(...results.map((x) => x.r.seq!)) - 1, limit: 100_000 });
            const bySeq = new Map(log.map((e) => [e.seq, e]));
            for (let r = 0; r <= 2; r++) {
              const mine = results.filter((x) => x.a.resource === r).sort((p, q) => p.r.seq! - q.r.seq!);
              const expected = new Map<string, string>([['seed', 'seed']]);
              let barrier = 1n;
              const tokenAt = new Map<bigint, string>([[1n, toHex(sha256(seed(r).bytes))]]);
              for (const { r: result, a, i, digest } of mine) {
                const epoch = BigInt(a.epoch);
                const entry = bySeq.get(result.seq!)!;
                expect(entry).toMatchObject({
                  resource: name(r),
                  epoch: String(a.epoch),
                  tokenDigest: digest,
                  outcome: result.ok ? 'accepted' : result.reason,
                });
                // Replaying the decisions in seq order must give the same verdicts.
                if (result.ok) {
                  expect(epoch).toBeGreaterThanOrEqual(barrier);
                  expect(tokenAt.get(epoch) ?? digest).toBe(digest);
                  tokenAt.set(epoch, digest);
                  barrier = epoch;
                  expected.set(a.key, `v${i}`);
                } else if (result.reason === 'stale') {
                  expect(epoch).toBeLessThan(barrier);
                } else {
                  expect(result.reason).toBe('conflict');
                  expect(epoch).toBe(barrier);
                  expect(tokenAt.get(epoch)).not.toBe(digest);
                }
              }
              expect(await stored(name(r))).toEqual(expected);
              expect((await guard.barrier(name(r)))?.epoch).toBe(barrier);
            }
          }),
          // Each run races up to 24 writes over 16 connections against the real server; 40 runs per form keep
          // the three forms under a minute together on a loaded two-core machine.
          { numRuns: 40 },
        );
        // The property is only about the single statement if that form actually held for some writes.
        if (mode !== 'transaction') expect(guard.forms.statement).toBeGreaterThan(statementsBefore);
      });
    },
  );

  describe.each(FORMS)('PostgreSQL guard (%s form): refusals change nothing but the log', (form) => {
    const res = (name: string) => `${form}/${name}`;

    test('missing, malformed, forged, wrong-cluster and wrong-resource tokens are refused at admission: answered, never logged', async () => {
      const other = makeTokenFactory();
      const resource = res('refusals');
      const token = factory.issue({ resource, epoch: 3 });
      const attempts: [string | Uint8Array | undefined, string][] = [
        [undefined, 'missing_token'],
        [token.bytes.subarray(0, 50), 'malformed'],
        [factory.issueWithSigners({ resource, epoch: 3 }, [1, 4]).bytes, 'bad_token'],
        [other.issue({ resource, epoch: 3 }).bytes, 'wrong_cluster'],
        [factory.issue({ resource: 'elsewhere', epoch: 3 }).bytes, 'wrong_resource'],
      ];
      for (const [input, reason] of attempts) {
        const r = await guardedUpsert(form, { token: input, resource, key: 'k' }, 'never');
        // Decided without the tables, so nothing was written (docs/security.md, "The guard log").
        expect(r).toMatchObject({ ok: false, reason, seq: null, barrier: null });
      }
      expect((await guard.readLog()).filter((entry) => entry.resource === resource)).toEqual([]);
      expect(await stored(resource)).toEqual(new Map());
      expect(await guard.barrier(resource)).toBeUndefined();
    });

    test('a stale epoch is refused with the barrier it met, and its write never lands', async () => {
      const resource = res('stale');
      const newer = factory.issue({ resource, epoch: 7 });
      const older = factory.issue({ resource, epoch: 6 });
      expect((await guardedUpsert(form, { token: newer.bytes, resource, key: 'k' }, 'new')).ok).toBe(true);
      // Twice: the second time the single-statement form knows the barrier and decides from it.
      expect((await guardedUpsert(form, { token: newer.bytes, resource, key: 'k' }, 'newer')).ok).toBe(true);
      const r = await guardedUpsert(form, { token: older.bytes, resource, key: 'k' }, 'old');
      expect(r).toMatchObject({ ok: false, reason: 'stale', barrier: 7n });
      expect(await stored(resource)).toEqual(new Map([['k', 'newer']]));
    });

    test('a conflict keeps both tokens in the log and leaves the data of the first', async () => {
      const resource = res('conflict');
      const first = factory.issue({ resource, epoch: 5, holder: holders[0]! });
      const second = factory.issue({ resource, epoch: 5, holder: holders[1]! });
      expect((await guardedUpsert(form, { token: first.bytes, resource, key: 'k' }, 'first')).ok).toBe(true);
      const r = await guardedUpsert(form, { token: second.bytes, resource, key: 'k' }, 'second');
      expect(r).toMatchObject({ ok: false, reason: 'conflict', barrier: 5n });
      const [entry] = await guard.readLog({ after: r.seq! - 1, limit: 1 });
      expect(entry).toMatchObject({
        outcome: 'conflict',
        token: tokenToText(second),
        conflictingToken: tokenToText(first),
      });
      expect(await stored(resource)).toEqual(new Map([['k', 'first']]));
    });

    test('a write whose SQL fails is rolled back whole (barrier included), logged as aborted, and its error rethrown', async () => {
      const resource = res('aborts');
      const before = factory.issue({ resource, epoch: 2 });
      const token = factory.issue({ resource, epoch: 3 });
      expect((await guardedUpsert(form, { token: before.bytes, resource, key: 'k' }, 'first')).ok).toBe(true);
      const statementsBefore = guard.forms.statement;
      let error: unknown;
      try {
        if (form === 'transaction') {
          await guard.write({ token: token.bytes, resource, key: 'k' }, async (tx) => {
            await upsert(resource, 'k', 'half')(tx);
            await tx.query('SELECT * FROM no_such_table');
          });
        } else {
          // Fails as it executes, after the guard's own CTEs: a NULL key breaks kv's primary key.
          await guard.writeStatement(
            { token: token.bytes, resource, key: 'k' },
            { text: "INSERT INTO kv (resource, key, value) VALUES ($1, NULL, 'half')", values: [resource] },
          );
        }
      } catch (e) {
        error = e;
      }
      // undefined_table or not_null_violation, from PostgreSQL itself
      expect((error as { code?: string }).code).toBe(form === 'transaction' ? '42P01' : '23502');
      if (form === 'statement') expect(guard.forms.statement).toBe(statementsBefore + 1);
      expect(await stored(resource)).toEqual(new Map([['k', 'first']]));
      expect((await guard.barrier(resource))?.epoch).toBe(2n);
      const log = await guard.readLog({ limit: 100_000 });
      expect(log.filter((e) => e.resource === resource).map((e) => [e.outcome, e.barrierBefore])).toEqual([
        ['accepted', null],
        ['aborted', '2'],
      ]);
      // The pool is still healthy afterwards, and the barrier moves on.
      expect((await guardedUpsert(form, { token: token.bytes, resource, key: 'k' }, 'whole')).ok).toBe(true);
      expect((await guard.barrier(resource))?.epoch).toBe(3n);
    });

    test('a write that refuses (compare-and-set) rolls back its SQL and raises no barrier', async () => {
      const resource = res('cas');
      const before = factory.issue({ resource, epoch: 3 });
      const token = factory.issue({ resource, epoch: 4 });
      expect((await guardedUpsert(form, { token: before.bytes, resource, key: 'k' }, 'current')).ok).toBe(true);
      const cas = "UPDATE kv SET value = 'x' WHERE resource = $1 AND key = 'k' AND value = 'expected' RETURNING key";
      const r: GuardResult<unknown> =
        form === 'transaction'
          ? await guard.write({ token: token.bytes, resource, key: 'k' }, async (tx) => {
              await upsert(resource, 'k2', 'tentative')(tx);
              const updated = await tx.query(cas, [resource]);
              return updated.rowCount === 0 ? tx.refuse('version_mismatch', 'value changed') : 'done';
            })
          : await guard.writeStatement(
              { token: token.bytes, resource, key: 'k' },
              { text: cas, values: [resource], returning: true, requireRow: true },
            );
      expect(r).toMatchObject({ ok: false, reason: 'version_mismatch', barrier: 3n });
      const [entry] = await guard.readLog({ after: r.seq! - 1, limit: 1 });
      expect(entry).toMatchObject({ outcome: 'version_mismatch', epoch: '4', barrierBefore: '3', barrierAfter: '3' });
      expect(await stored(resource)).toEqual(new Map([['k', 'current']]));
      expect((await guard.barrier(resource))?.epoch).toBe(3n);
    });

    test('the replay window lives in the barrier row: a replayed request is refused', async () => {
      const holder = holders[2]!;
      const resource = res('pop');
      const token = factory.issue({ resource, epoch: 1, holder });
      const digest = bodyDigest(new Uint8Array());
      const proofFor = (signer: typeof holder, counter: bigint) => ({
        method: 'PUT',
        bodyDigest: digest,
        counter,
        signature: signRequest(signer, {
          audience: '',
          method: 'PUT',
          resource,
          key: 'k',
          bodyDigest: digest,
          tokenDigest: sha256(token.bytes),
          counter,
        }).signature,
      });
      const signed = (counter: bigint, signer = holder) =>
        guardedUpsert(
          form,
          { token: token.bytes, resource, key: 'k', proof: proofFor(signer, counter) },
          `c${counter}`,
        );
      expect((await signed(1n)).ok).toBe(true);
      expect((await signed(3n)).ok).toBe(true);
      expect(await signed(1n)).toMatchObject({ ok: false, reason: 'replayed' });
      expect(await signed(3n)).toMatchObject({ ok: false, reason: 'replayed' });
      expect((await signed(2n)).ok).toBe(true);
      expect(await stored(resource)).toEqual(new Map([['k', 'c2']]));
      expect(await signed(9n, makeHolder())).toMatchObject({ ok: false, reason: 'bad_proof' });
      expect((await guard.barrier(resource))?.replay?.high).toBe(3n);
    });

    test('names outside the name contract (U+0000, which PostgreSQL cannot store, and every control character) are refused up front with NAME_CONTROL_CHARACTER', async () => {
      const token = factory.issue({ resource: 'nul', epoch: 1 });
      const nameError = (e: unknown) => isQuorumFenceError(e, 'NAME_CONTROL_CHARACTER');
      await expect(guardedUpsert(form, { token: token.bytes, resource: 'nul\u0000name' }, 'v')).rejects.toSatisfy(
        nameError,
      );
      await expect(guardedUpsert(form, { token: token.bytes, resource: 'nul', key: 'a\u0000' }, 'v')).rejects.toSatisfy(
        nameError,
      );
      await expect(
        guardedUpsert(form, { token: token.bytes, resource: 'nul', key: 'tab\tkey' }, 'v'),
      ).rejects.toSatisfy(nameError);
    });
  });

  describe('PostgreSQL guard tables', () => {
    test('the tables refuse another cluster with CLUSTER_MISMATCH', async () => {
      const other = makeTokenFactory();
      await expect(PostgresGuard.open(pool, other.cluster)).rejects.toSatisfy((e: unknown) =>
        isQuorumFenceError(e, 'CLUSTER_MISMATCH'),
      );
      // A second guard of the same cluster on the same tables is fine (several app servers, one database).
      const again = await PostgresGuard.open(pool, factory.cluster);
      await again.close();
    });
  });
});
