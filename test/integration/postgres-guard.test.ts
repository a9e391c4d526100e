/**
 * The PostgreSQL guard store against a real server (test/support/postgres.ts
 * starts it and makes a fresh database for this file): S4 fencing with
 * concurrent connections racing on the same rows, refusals that change
 * nothing, the conflict evidence, rollback of failed mutations, and the
 * replay window kept in the barrier row.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import fc from 'fast-check';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { toHex } from '../../src/common/bytes.js';
import { isQuorumFenceError } from '../../src/common/errors.js';
import type { GuardResult } from '../../src/guard/core.js';
import { PostgresGuard } from '../../src/guard/postgres-guard.js';
import { bodyDigest, signRequest } from '../../src/guard/proof.js';
import { tokenToText } from '../../src/token/admission-token.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { makeHolder, makeTokenFactory } from '../support/token-factory.js';

const factory = makeTokenFactory();
const holders = Array.from({ length: 4 }, (_, i) => makeHolder(new Uint8Array(32).fill(i + 1)));
/** Enough connections that most attempts of a run are in flight at once. */
const CONNECTIONS = 16;

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

function upsert(resource: string, key: string, value: string) {
  return (tx: { query: (text: string, values?: unknown[]) => Promise<unknown> }) =>
    tx.query(
      'INSERT INTO kv (resource, key, value) VALUES ($1, $2, $3) ON CONFLICT (resource, key) DO UPDATE SET value = EXCLUDED.value',
      [resource, key, value],
    );
}

async function stored(resource: string): Promise<Map<string, string>> {
  const rows = (
    await pool.query<{ key: string; value: string }>('SELECT key, value FROM kv WHERE resource = $1', [resource])
  ).rows;
  return new Map(rows.map((r) => [r.key, r.value]));
}

describe('S4 fencing (PostgreSQL, concurrent connections)', () => {
  let run = 0;

  test('racing writes: accepted epochs never go down and the table holds exactly the accepted writes in decision order', async () => {
    const attempt = fc.record({
      resource: fc.integer({ min: 0, max: 2 }),
      epoch: fc.integer({ min: 1, max: 8 }),
      holder: fc.integer({ min: 0, max: holders.length - 1 }),
      key: fc.constantFrom('x', 'y'),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(attempt, { minLength: 2, maxLength: 24 }), async (attempts) => {
        run++;
        // Fresh resource names per run: each run starts with no barriers.
        const name = (r: number) => `run${run}/res${r}`;
        const results = await Promise.all(
          attempts.map((a, i) => {
            const token = factory.issue({ resource: name(a.resource), epoch: a.epoch, holder: holders[a.holder]! });
            return guard
              .write(
                { token: token.bytes, resource: name(a.resource), key: a.key, op: 'put' },
                upsert(name(a.resource), a.key, `v${i}`),
              )
              .then((r) => ({ r, a, i, digest: toHex(sha256(token.bytes)) }));
          }),
        );

        const log = await guard.readLog({ after: Math.min(...results.map((x) => x.r.seq)) - 1, limit: 100_000 });
        const bySeq = new Map(log.map((e) => [e.seq, e]));
        for (let r = 0; r <= 2; r++) {
          const mine = results.filter((x) => x.a.resource === r).sort((p, q) => p.r.seq - q.r.seq);
          const expected = new Map<string, string>();
          let barrier = 0n;
          const tokenAt = new Map<bigint, string>();
          for (const { r: result, a, i, digest } of mine) {
            const epoch = BigInt(a.epoch);
            const entry = bySeq.get(result.seq)!;
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
          expect((await guard.barrier(name(r)))?.epoch).toBe(mine.some((x) => x.r.ok) ? barrier : undefined);
        }
      }),
    );
  });
});

describe('PostgreSQL guard: refusals change nothing but the log', () => {
  test('malformed, forged, wrong-cluster and wrong-resource tokens are refused and logged', async () => {
    const other = makeTokenFactory();
    const token = factory.issue({ resource: 'refusals', epoch: 3 });
    const attempts: [string | Uint8Array | undefined, string][] = [
      [undefined, 'missing_token'],
      [token.bytes.subarray(0, 50), 'malformed'],
      [factory.issueWithSigners({ resource: 'refusals', epoch: 3 }, [1, 4]).bytes, 'bad_token'],
      [other.issue({ resource: 'refusals', epoch: 3 }).bytes, 'wrong_cluster'],
      [factory.issue({ resource: 'elsewhere', epoch: 3 }).bytes, 'wrong_resource'],
    ];
    for (const [input, reason] of attempts) {
      const r = await guard.write({ token: input, resource: 'refusals', key: 'k' }, upsert('refusals', 'k', 'never'));
      expect(r).toMatchObject({ ok: false, reason });
      const [entry] = await guard.readLog({ after: r.seq - 1, limit: 1 });
      expect(entry).toMatchObject({ seq: r.seq, outcome: reason, accepted: false, resource: 'refusals' });
    }
    expect(await stored('refusals')).toEqual(new Map());
    expect(await guard.barrier('refusals')).toBeUndefined();
  });

  test('a conflict keeps both tokens in the log and leaves the data of the first', async () => {
    const first = factory.issue({ resource: 'conflict', epoch: 5, holder: holders[0]! });
    const second = factory.issue({ resource: 'conflict', epoch: 5, holder: holders[1]! });
    expect(
      (await guard.write({ token: first.bytes, resource: 'conflict', key: 'k' }, upsert('conflict', 'k', 'first'))).ok,
    ).toBe(true);
    const r = await guard.write(
      { token: second.bytes, resource: 'conflict', key: 'k' },
      upsert('conflict', 'k', 'second'),
    );
    expect(r).toMatchObject({ ok: false, reason: 'conflict', barrier: 5n });
    const [entry] = await guard.readLog({ after: r.seq - 1, limit: 1 });
    expect(entry).toMatchObject({
      outcome: 'conflict',
      token: tokenToText(second),
      conflictingToken: tokenToText(first),
    });
    expect(await stored('conflict')).toEqual(new Map([['k', 'first']]));
  });

  test('a mutation whose SQL fails is rolled back, logged as aborted, and its error rethrown', async () => {
    const token = factory.issue({ resource: 'aborts', epoch: 2 });
    let error: unknown;
    try {
      await guard.write({ token: token.bytes, resource: 'aborts', key: 'k' }, async (tx) => {
        await upsert('aborts', 'k', 'half')(tx);
        await tx.query('SELECT * FROM no_such_table');
      });
    } catch (e) {
      error = e;
    }
    expect((error as { code?: string }).code).toBe('42P01'); // undefined_table, from PostgreSQL itself
    expect(await stored('aborts')).toEqual(new Map());
    expect(await guard.barrier('aborts')).toBeUndefined();
    const log = await guard.readLog({ limit: 100_000 });
    expect(log.filter((e) => e.resource === 'aborts')).toMatchObject([{ outcome: 'aborted', barrierBefore: null }]);
    // The pool is still healthy afterwards.
    expect(
      (await guard.write({ token: token.bytes, resource: 'aborts', key: 'k' }, upsert('aborts', 'k', 'whole'))).ok,
    ).toBe(true);
  });

  test('a mutation that refuses (compare-and-set) rolls back its SQL and raises no barrier', async () => {
    const token = factory.issue({ resource: 'cas', epoch: 4 });
    const r: GuardResult<unknown> = await guard.write({ token: token.bytes, resource: 'cas', key: 'k' }, async (tx) => {
      await upsert('cas', 'k', 'tentative')(tx);
      const updated = await tx.query(
        "UPDATE kv SET value = 'x' WHERE resource = 'cas' AND key = 'k' AND value = 'expected'",
      );
      return updated.rowCount === 0 ? tx.refuse('version_mismatch', 'value changed') : 'done';
    });
    expect(r).toMatchObject({ ok: false, reason: 'version_mismatch', message: 'value changed' });
    expect(await stored('cas')).toEqual(new Map());
    expect(await guard.barrier('cas')).toBeUndefined();
  });

  test('the replay window lives in the barrier row: a replayed request is refused', async () => {
    const holder = holders[2]!;
    const token = factory.issue({ resource: 'pop', epoch: 1, holder });
    const signed = (counter: bigint) => {
      const digest = bodyDigest(new Uint8Array());
      const proof = signRequest(holder, {
        audience: '',
        method: 'PUT',
        resource: 'pop',
        key: 'k',
        bodyDigest: digest,
        tokenDigest: sha256(token.bytes),
        counter,
      });
      return guard.write(
        {
          token: token.bytes,
          resource: 'pop',
          key: 'k',
          proof: { method: 'PUT', bodyDigest: digest, counter, signature: proof.signature },
        },
        upsert('pop', 'k', `c${counter}`),
      );
    };
    expect((await signed(1n)).ok).toBe(true);
    expect((await signed(3n)).ok).toBe(true);
    expect(await signed(1n)).toMatchObject({ ok: false, reason: 'replayed' });
    expect((await signed(2n)).ok).toBe(true);
    expect(await stored('pop')).toEqual(new Map([['k', 'c2']]));
    const stranger = makeHolder();
    const digest = bodyDigest(new Uint8Array());
    const forged = signRequest(stranger, {
      audience: '',
      method: 'PUT',
      resource: 'pop',
      key: 'k',
      bodyDigest: digest,
      tokenDigest: sha256(token.bytes),
      counter: 9n,
    });
    const r = await guard.write({
      token: token.bytes,
      resource: 'pop',
      key: 'k',
      proof: { method: 'PUT', bodyDigest: digest, counter: 9n, signature: forged.signature },
    });
    expect(r).toMatchObject({ ok: false, reason: 'bad_proof' });
  });

  test('names outside the name contract (U+0000, which PostgreSQL cannot store, and every control character) are refused up front with NAME_CONTROL_CHARACTER', async () => {
    const token = factory.issue({ resource: 'nul', epoch: 1 });
    await expect(guard.write({ token: token.bytes, resource: 'nul\u0000name' })).rejects.toSatisfy((e: unknown) =>
      isQuorumFenceError(e, 'NAME_CONTROL_CHARACTER'),
    );
    await expect(guard.write({ token: token.bytes, resource: 'nul', key: 'a\u0000' })).rejects.toSatisfy((e: unknown) =>
      isQuorumFenceError(e, 'NAME_CONTROL_CHARACTER'),
    );
    await expect(guard.write({ token: token.bytes, resource: 'nul', key: 'tab\tkey' })).rejects.toSatisfy(
      (e: unknown) => isQuorumFenceError(e, 'NAME_CONTROL_CHARACTER'),
    );
  });

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
