/**
 * Issue 30, finding 7: no acknowledged write is lost at the PostgreSQL guard, whatever form each writer uses and
 * however its statement reads the rows it writes. A single statement in autocommit reads with the snapshot taken
 * when it started; when it met the barrier row locked by an earlier holder's write and went on after that write
 * committed, without the barrier having changed, its reads missed that write: holder A (epoch 1) adds 1 in a slow
 * statement, holder B (epoch 2) starts 0.2 s later from another guard with `v = (SELECT v ...) + 10`; both were
 * accepted and the row ended at 10. A real server (test/support/postgres.ts), a fresh database for this file.
 */
import fc from 'fast-check';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { GuardResult } from '../../src/guard/core.js';
import { PostgresGuard } from '../../src/guard/postgres-guard.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { makeHolder, makeTokenFactory } from '../support/token-factory.js';
import { lacks, needs } from '../support/system-tools.js';

const factory = makeTokenFactory();
const holders = Array.from({ length: 3 }, (_, i) => makeHolder(new Uint8Array(32).fill(i + 1)));
/** Guards sharing the database, as application servers do; each remembers barriers on its own. */
const GUARDS = 3;

describe.skipIf(lacks('postgresql'))(`PostgreSQL guard, lost writes ${needs('postgresql')}`, () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  let guards: PostgresGuard[];

  beforeAll(async () => {
    db = createTestDatabase('guard_lost_write');
    pool = db.pool(24);
    guards = [];
    for (let g = 0; g < GUARDS; g++)
      guards.push(await PostgresGuard.open(pool, factory.cluster, { maxLogPage: 100_000 }));
    await pool.query('CREATE TABLE counter (resource text PRIMARY KEY, v bigint NOT NULL)');
  });

  afterAll(async () => {
    for (const guard of guards ?? []) await guard.close();
    await pool?.end();
    await db?.drop();
  });

  /** Adds `add` to the resource's counter by reading it in a subquery, after sleeping `sleepSeconds` (under the lock). */
  const READ_THEN_ADD = `UPDATE counter SET v = (SELECT c.v FROM counter c WHERE c.resource = $1) + $2
  WHERE resource = $1 AND (SELECT true FROM pg_sleep($3::float8))`;
  /** The textbook increment: PostgreSQL re-reads the row it updates, so only the barrier decides this one. */
  const INCREMENT = `UPDATE counter SET v = v + $2 WHERE resource = $1 AND (SELECT true FROM pg_sleep($3::float8))`;

  function singleStatement(
    guard: PostgresGuard,
    token: Uint8Array,
    resource: string,
    text: string,
    add: number,
    sleepSeconds: number,
  ): Promise<GuardResult<unknown>> {
    return guard.writeStatement({ token, resource, op: 'add' }, { text, values: [resource, add, sleepSeconds] });
  }

  /** The same addition in the transaction form: read under the barrier's lock, then write. */
  function transaction(guard: PostgresGuard, token: Uint8Array, resource: string, add: number, sleepSeconds: number) {
    return guard.write({ token, resource, op: 'add' }, async (tx) => {
      const read = await tx.query<{ v: string }>('SELECT v FROM counter WHERE resource = $1', [resource]);
      await tx.query('SELECT pg_sleep($1::float8)', [sleepSeconds]);
      await tx.query('UPDATE counter SET v = $2 WHERE resource = $1', [
        resource,
        BigInt(read.rows[0]!.v) + BigInt(add),
      ]);
    });
  }

  async function counter(resource: string): Promise<bigint> {
    const rows = (await pool.query<{ v: string }>('SELECT v FROM counter WHERE resource = $1', [resource])).rows;
    return BigInt(rows[0]!.v);
  }

  /** The row at 0, and every guard knowing the resource's barrier (epoch 1), so each can decide in one statement. */
  async function seed(resource: string): Promise<void> {
    await pool.query('INSERT INTO counter (resource, v) VALUES ($1, 0)', [resource]);
    const token = factory.issue({ resource, epoch: 1, holder: holders[0]! }).bytes;
    for (const guard of guards) expect((await singleStatement(guard, token, resource, INCREMENT, 0, 0)).ok).toBe(true);
  }

  describe('no acknowledged write is lost at the PostgreSQL guard (issue 30, finding 7)', () => {
    test("the finding: A's slow v + 1 at epoch 1, then B's (SELECT v) + 10 at epoch 2 from another guard 0.2 s later: 11, not 10", async () => {
      const resource = 'finding-7';
      await seed(resource);
      const a = factory.issue({ resource, epoch: 1, holder: holders[0]! }).bytes;
      const b = factory.issue({ resource, epoch: 2, holder: holders[1]! }).bytes;
      const slow = singleStatement(guards[0]!, a, resource, INCREMENT, 1, 1);
      await new Promise((resolve) => setTimeout(resolve, 200));
      const later = singleStatement(guards[1]!, b, resource, READ_THEN_ADD, 10, 0);
      const [first, second] = await Promise.all([slow, later]);
      expect(first).toMatchObject({ ok: true, epoch: 1n });
      expect(second).toMatchObject({ ok: true, epoch: 2n });
      expect(await counter(resource)).toBe(11n);
    });

    test('concurrent holders at increasing epochs, through several guards and both forms, with statements that read the row: the counter is the sum of the accepted additions, and no accepted epoch goes below the barrier', async () => {
      let run = 0;
      const attempt = fc.record({
        guard: fc.integer({ min: 0, max: GUARDS - 1 }),
        epoch: fc.integer({ min: 1, max: 6 }),
        holder: fc.integer({ min: 0, max: holders.length - 1 }),
        text: fc.constantFrom(READ_THEN_ADD, INCREMENT, 'transaction'),
        add: fc.integer({ min: 1, max: 1_000 }),
        // Most writes are quick; some hold the barrier's lock long enough for others to queue behind them.
        sleepMs: fc.oneof(fc.constant(0), fc.constant(0), fc.integer({ min: 1, max: 40 })),
        delayMs: fc.integer({ min: 0, max: 30 }),
      });
      const statementsBefore = guards.reduce((sum, guard) => sum + guard.forms.statement, 0);
      await fc.assert(
        fc.asyncProperty(fc.array(attempt, { minLength: 2, maxLength: 12 }), async (attempts) => {
          const resource = `run-${++run}`;
          await seed(resource);
          const results = await Promise.all(
            attempts.map(async (a) => {
              await new Promise((resolve) => setTimeout(resolve, a.delayMs));
              const token = factory.issue({ resource, epoch: a.epoch, holder: holders[a.holder]! }).bytes;
              const guard = guards[a.guard]!;
              const result =
                a.text === 'transaction'
                  ? await transaction(guard, token, resource, a.add, a.sleepMs / 1000)
                  : await singleStatement(guard, token, resource, a.text, a.add, a.sleepMs / 1000);
              return { a, result };
            }),
          );
          const accepted = results.filter((x) => x.result.ok);
          // Every acknowledged addition is in the counter, once: the seed's three additions were 0.
          expect(await counter(resource)).toBe(accepted.reduce((sum, x) => sum + BigInt(x.a.add), 0n));
          for (const { result } of results) if (!result.ok) expect(['stale', 'conflict']).toContain(result.reason);
          // No stale write: in decision order (seq, within one resource), accepted epochs never go down.
          const log = (await guards[0]!.readLog()).filter((e) => e.resource === resource && e.accepted);
          const epochs = log.map((e) => BigInt(e.epoch!));
          expect(epochs).toEqual([...epochs].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0)));
          expect(log).toHaveLength(accepted.length + GUARDS);
        }),
        { numRuns: 30 },
      );
      // The property is about the single statement only if that form actually held for some of the writes.
      expect(guards.reduce((sum, guard) => sum + guard.forms.statement, 0)).toBeGreaterThan(statementsBefore);
    });

    test('tables of format v1 (no count of writes) are upgraded in place when a guard opens them, and fence as before', async () => {
      const tablePrefix = 'older_';
      const first = await PostgresGuard.open(pool, factory.cluster, { tablePrefix });
      const resource = 'upgraded';
      await pool.query('INSERT INTO counter (resource, v) VALUES ($1, 0)', [resource]);
      const one = factory.issue({ resource, epoch: 1 }).bytes;
      expect((await singleStatement(first, one, resource, INCREMENT, 1, 0)).ok).toBe(true);
      await first.close();
      // What a v1 guard left: no writes column, the v1 format.
      await pool.query(`ALTER TABLE ${tablePrefix}barrier DROP COLUMN writes`);
      await pool.query(`UPDATE ${tablePrefix}meta SET value = 'quorumfence/guard-postgres/v1' WHERE key = 'format'`);

      const [a, b] = [
        await PostgresGuard.open(pool, factory.cluster, { tablePrefix }),
        await PostgresGuard.open(pool, factory.cluster, { tablePrefix }),
      ];
      try {
        const format = await pool.query(`SELECT value FROM ${tablePrefix}meta WHERE key = 'format'`);
        expect(format.rows).toEqual([{ value: 'quorumfence/guard-postgres/v2' }]);
        expect((await pool.query(`SELECT writes FROM ${tablePrefix}barrier`)).rows).toEqual([{ writes: '0' }]);
        for (const guard of [a, b])
          expect((await singleStatement(guard, one, resource, INCREMENT, 1, 0)).ok).toBe(true);
        const slow = singleStatement(a, one, resource, INCREMENT, 1, 0.5);
        await new Promise((resolve) => setTimeout(resolve, 100));
        const two = factory.issue({ resource, epoch: 2 }).bytes;
        expect(await singleStatement(b, two, resource, READ_THEN_ADD, 10, 0)).toMatchObject({ ok: true });
        expect(await slow).toMatchObject({ ok: true });
        expect(await singleStatement(a, one, resource, INCREMENT, 1, 0)).toMatchObject({ ok: false, reason: 'stale' });
        expect(await counter(resource)).toBe(14n);
      } finally {
        await a.close();
        await b.close();
      }
    });
  });
});
