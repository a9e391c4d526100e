/**
 * What only the PostgreSQL guard's single-statement form has (one round trip
 * when the guard knows the barrier, the fall back to the transaction when the
 * barrier moved under it, the statement's own rows, its argument checks), and
 * the bound on the refused entries its log keeps. A real server
 * (test/support/postgres.ts), a fresh database for this file.
 * postgres-guard.test.ts runs the shared rules against both forms.
 */
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { isQuorumFenceError } from '../../src/common/errors.js';
import { DEFAULT_MAX_REFUSED_LOG_ENTRIES, PostgresGuard } from '../../src/guard/postgres.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { makeHolder, makeTokenFactory } from '../support/token-factory.js';
import { lacks, needs } from '../support/system-tools.js';

const factory = makeTokenFactory();
const holders = Array.from({ length: 2 }, (_, i) => makeHolder(new Uint8Array(32).fill(i + 1)));
const UPSERT =
  'INSERT INTO kv (resource, key, value) VALUES ($1, $2, $3) ON CONFLICT (resource, key) DO UPDATE SET value = EXCLUDED.value';

describe.skipIf(lacks('postgresql'))(
  `PostgreSQL guard, statement form and log retention ${needs('postgresql')}`,
  () => {
    let db: TestDatabase;
    let pool: pg.Pool;
    let guard: PostgresGuard;

    beforeAll(async () => {
      db = createTestDatabase('guard_statement');
      pool = db.pool(8);
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

    const rejectsWith = (code: string) => (e: unknown) => isQuorumFenceError(e, code as never);

    describe('single-statement form', () => {
      test('once the guard knows the barrier, a write is one statement and returns its RETURNING rows', async () => {
        const token = factory.issue({ resource: 'one', epoch: 1 });
        const request = { token: token.bytes, resource: 'one', key: 'k' };
        const statement = {
          text: `${UPSERT} RETURNING key, length(value) AS size;`,
          values: ['one', 'k', 'four'],
          returning: true,
        };
        const first = await guard.writeStatement<{ key: string; size: number }>(request, statement);
        expect(first).toMatchObject({ ok: true, raised: true, result: { rows: [{ key: 'k', size: 4 }] } });
        const before = guard.forms;
        const second = await guard.writeStatement<{ key: string; size: number }>(request, {
          ...statement,
          values: ['one', 'k', 'seven'],
        });
        expect(second).toMatchObject({
          ok: true,
          raised: false,
          barrier: 1n,
          result: { rows: [{ key: 'k', size: 5 }] },
        });
        expect(guard.forms).toEqual({ statement: before.statement + 1, transaction: before.transaction });
        const [entry] = await guard.readLog({ after: second.seq! - 1, limit: 1 });
        expect(entry).toMatchObject({ seq: second.seq, outcome: 'accepted', epoch: '1', barrierBefore: '1' });
        // Unprepared (text built per call) takes the same path.
        const third = await guard.writeStatement(request, {
          text: `UPDATE kv SET value = 'literal' WHERE resource = 'one' AND key = 'k'`,
          prepare: false,
        });
        expect(third).toMatchObject({ ok: true, result: { rows: [] } });
        expect(guard.forms.statement).toBe(before.statement + 2);
        expect((await pool.query('SELECT value FROM kv WHERE resource = $1', ['one'])).rows).toEqual([
          { value: 'literal' },
        ]);
      });

      test('when another guard moved the barrier, the statement aborts whole and the transaction form decides: stale refused, newer accepted', async () => {
        const resource = 'moved';
        const other = await PostgresGuard.open(pool, factory.cluster);
        const write = (g: PostgresGuard, epoch: number, value: string) =>
          g.writeStatement(
            { token: factory.issue({ resource, epoch }).bytes, resource, key: 'k' },
            { text: UPSERT, values: [resource, 'k', value] },
          );
        try {
          expect((await write(guard, 2, 'a')).ok).toBe(true); // this guard now believes the barrier is 2
          expect((await write(other, 4, 'b')).ok).toBe(true);
          const before = guard.forms;
          // Decided "accept" against the remembered barrier 2; the barrier row says 4: falls back, refused stale.
          expect(await write(guard, 3, 'stale')).toMatchObject({ ok: false, reason: 'stale', barrier: 4n });
          expect(guard.forms.transaction).toBe(before.transaction + 1);
          expect((await pool.query('SELECT value FROM kv WHERE resource = $1', [resource])).rows).toEqual([
            { value: 'b' },
          ]);
          expect(await write(guard, 5, 'c')).toMatchObject({ ok: true, barrier: 5n });
          expect((await guard.barrier(resource))?.epoch).toBe(5n);
        } finally {
          await other.close();
        }
      });

      test('requireRow: a statement that changes no row is refused with version_mismatch and applies nothing', async () => {
        const token = factory.issue({ resource: 'cas', epoch: 1 });
        const request = { token: token.bytes, resource: 'cas', key: 'k' };
        expect((await guard.writeStatement(request, { text: UPSERT, values: ['cas', 'k', 'v1'] })).ok).toBe(true);
        const cas = (expected: string, next: string) =>
          guard.writeStatement(request, {
            text: 'UPDATE kv SET value = $3 WHERE resource = $1 AND key = $2 AND value = $4 RETURNING value',
            values: ['cas', 'k', next, expected],
            returning: true,
            requireRow: true,
          });
        expect(await cas('v0', 'lost')).toMatchObject({ ok: false, reason: 'version_mismatch', barrier: 1n });
        expect(await cas('v1', 'v2')).toMatchObject({ ok: true, result: { rows: [{ value: 'v2' }] } });
        // A guard that has not seen the resource takes the transaction form: the same refusal.
        const cold = await PostgresGuard.open(pool, factory.cluster);
        try {
          const before = cold.forms;
          const r = await cold.writeStatement(request, {
            text: 'UPDATE kv SET value = $3 WHERE resource = $1 AND key = $2 AND value = $4 RETURNING value',
            values: ['cas', 'k', 'lost', 'v1'],
            returning: true,
            requireRow: true,
          });
          expect(r).toMatchObject({ ok: false, reason: 'version_mismatch', barrier: 1n });
          expect(cold.forms).toEqual({ statement: before.statement, transaction: before.transaction + 1 });
        } finally {
          await cold.close();
        }
        expect((await pool.query('SELECT value FROM kv WHERE resource = $1', ['cas'])).rows).toEqual([{ value: 'v2' }]);
      });

      test('a malformed statement is refused with INVALID_ARGUMENT before any SQL runs, and a closed guard with CLOSED', async () => {
        const token = factory.issue({ resource: 'shape', epoch: 1 });
        const request = { token: token.bytes, resource: 'shape' };
        const seqBefore = (await guard.readLog({ limit: 100_000 })).length;
        await expect(guard.writeStatement(request, { text: '  ;  ' })).rejects.toSatisfy(
          rejectsWith('INVALID_ARGUMENT'),
        );
        await expect(guard.writeStatement(request, { text: 42 as unknown as string })).rejects.toSatisfy(
          rejectsWith('INVALID_ARGUMENT'),
        );
        await expect(
          guard.writeStatement(request, { text: UPSERT, values: 'x' as unknown as unknown[] }),
        ).rejects.toSatisfy(rejectsWith('INVALID_ARGUMENT'));
        await expect(guard.writeStatement(request, { text: UPSERT, requireRow: true })).rejects.toSatisfy(
          rejectsWith('INVALID_ARGUMENT'),
        );
        expect((await guard.readLog({ limit: 100_000 })).length).toBe(seqBefore);
        const closed = await PostgresGuard.open(pool, factory.cluster);
        await closed.close();
        await expect(closed.writeStatement(request, { text: UPSERT, values: ['shape', 'k', 'v'] })).rejects.toSatisfy(
          rejectsWith('CLOSED'),
        );
      });
    });

    describe('log retention (maxRefusedLogEntries)', () => {
      test('refused entries past the bound are dropped oldest first, even when refusals race; accepted and conflict entries stay', async () => {
        const bounded = await PostgresGuard.open(pool, factory.cluster, {
          tablePrefix: 'bounded_',
          maxRefusedLogEntries: 5,
          maxLogPage: 100_000,
        });
        try {
          const resource = 'retention';
          const first = factory.issue({ resource, epoch: 2, holder: holders[0]! });
          const rival = factory.issue({ resource, epoch: 2, holder: holders[1]! });
          const upsert = (token: Uint8Array | undefined, value: string) =>
            bounded.writeStatement({ token, resource, key: 'k' }, { text: UPSERT, values: [resource, 'k', value] });
          const stale = () => factory.issue({ resource, epoch: 1 }).bytes;
          expect((await upsert(first.bytes, 'a')).ok).toBe(true);
          for (let i = 0; i < 4; i++) expect(await upsert(stale(), 'x')).toMatchObject({ reason: 'stale' });
          expect(await upsert(rival.bytes, 'x')).toMatchObject({ reason: 'conflict' });
          expect(await upsert(stale(), 'x')).toMatchObject({ reason: 'stale' });
          // Refusals at admission are never logged, so they neither count nor push anything out.
          expect(await upsert(undefined, 'x')).toMatchObject({ reason: 'missing_token', seq: null });
          const raced = await Promise.all(Array.from({ length: 12 }, () => upsert(stale(), 'x')));
          expect(raced.every((r) => !r.ok && r.reason === 'stale')).toBe(true);
          expect((await upsert(first.bytes, 'b')).ok).toBe(true);

          const log = await bounded.readLog();
          const refusedSeqs = [...raced.map((r) => r.seq!)].sort((a, b) => a - b).slice(-5);
          expect(log.filter((e) => !e.accepted && e.outcome !== 'conflict').map((e) => e.seq)).toEqual(refusedSeqs);
          expect(log.map((e) => e.outcome).filter((o) => o === 'accepted' || o === 'conflict')).toEqual([
            'accepted',
            'conflict',
            'accepted',
          ]);
          expect(await bounded.logRetention()).toEqual({
            refusedKept: 5,
            refusedDropped: 4 + 1 + 12 - 5,
            maxRefused: 5,
          });
        } finally {
          await bounded.close();
        }
      });

      test('the bound defaults to DEFAULT_MAX_REFUSED_LOG_ENTRIES, as with LMDB, and a bound below 1 is refused with INVALID_ARGUMENT', async () => {
        expect((await guard.logRetention()).maxRefused).toBe(DEFAULT_MAX_REFUSED_LOG_ENTRIES);
        expect(DEFAULT_MAX_REFUSED_LOG_ENTRIES).toBe(50_000);
        await expect(PostgresGuard.open(pool, factory.cluster, { maxRefusedLogEntries: 0 })).rejects.toSatisfy(
          rejectsWith('INVALID_ARGUMENT'),
        );
      });
    });
  },
);
