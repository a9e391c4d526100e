/**
 * Issue 16, finding 1: the LMDB guard keyed its tables with lmdb-js's
 * default key encoding (not one-to-one for strings holding U+0000..U+0004)
 * and joined (resource, key) with a 0x00 byte, so one resource could write
 * another's data and raise its barrier. Now: store keys are length-prefixed
 * UTF-8 parts (storeKey, injective for any strings), and the name contract
 * (no U+0000..U+001F, no U+007F in resource names and guard keys) is checked
 * by one function everywhere a name enters.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { decodeStoreKey, storeKey, toHex } from '../../src/common/bytes.js';
import { checkNameCharacters, decodeResource, expectGuardKey, expectResource } from '../../src/common/check.js';
import { precheck, type PolicyConfig } from '../../src/replica/policy.js';
import { LmdbGuard } from '../../src/guard/lmdb-guard.js';
import { PostgresGuard } from '../../src/guard/postgres-guard.js';
import { checkToken, decodeToken } from '../../src/token/admission-token.js';
import { codeOf } from '../support/error-code.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { makeTokenFactory } from '../support/token-factory.js';
import { lacks, needs } from '../support/system-tools.js';

const factory = makeTokenFactory();
const utf8 = new TextEncoder();
const dirs: string[] = [];

afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

async function openLmdb(): Promise<LmdbGuard> {
  const dir = mkdtempSync(join(tmpdir(), 'qf-finding1-'));
  dirs.push(dir);
  return LmdbGuard.open(dir, factory.cluster);
}

function violatesContract(name: string): boolean {
  return codeOf(() => checkNameCharacters(name, 'name')) !== undefined;
}

/**
 * Characters that broke the old encoding (NUL, U+0001..U+0004), the rest of
 * the control range, and ordinary ones that make long shared prefixes.
 */
const character = fc.oneof(
  { weight: 1, arbitrary: fc.constantFrom('\u0000', '\u0001', '\u0002', '\u0003', '\u0004', '\u001f', '\u007f') },
  { weight: 8, arbitrary: fc.constantFrom('P', 'z', '/', ' ', 'é', '\u0080', '\uffff', '😀') },
);
const shortText = fc.array(character, { minLength: 0, maxLength: 6 }).map((chars) => chars.join(''));
/** Names built around one long shared prefix, so pairs differ only near a boundary. */
const name = fc
  .tuple(fc.constantFrom('', 'orders', 'P'.repeat(60)), shortText, fc.constantFrom('', '\u0000', 'z', '\u0004\u0000'))
  .map(([prefix, middle, suffix]) => prefix + middle + suffix)
  .filter((text) => text.length > 0 && utf8.encode(text).length <= 256);
const pairs = fc.uniqueArray(fc.tuple(name, name), {
  minLength: 2,
  maxLength: 5,
  selector: ([resource, key]) => JSON.stringify([resource, key]),
});

describe('finding 1: cross-resource aliasing in the LMDB guard', () => {
  test('the two aliasing attacks from the report are refused before anything is stored', async () => {
    const guard = await openLmdb();
    try {
      const nulResource = '\u0000'.repeat(32);
      const otherResource = '\u0004\u0000'.repeat(32);
      const victimKey = 'P'.repeat(60) + '\u0000z';
      const attackerResource = 'orders\u0000' + 'P'.repeat(60) + '\u0004';
      const token = factory.issueText({ resource: 'orders', epoch: 1 });
      for (const [resource, key] of [
        [nulResource, 'k'],
        [otherResource, 'k'],
        ['orders', victimKey],
        [attackerResource, 'z'],
      ] as const) {
        await expect(guard.write({ token, resource, key, op: 'put' })).rejects.toMatchObject({
          code: 'NAME_CONTROL_CHARACTER',
        });
      }
      expect(guard.lastSeq()).toBe(0);
      expect(guard.resources()).toEqual([]);
    } finally {
      await guard.close();
    }
  });

  test('storeKey is injective for any strings, control characters included, and decodes back', () => {
    const parts = fc.array(fc.oneof(shortText, name, fc.string({ unit: 'binary' })), { minLength: 1, maxLength: 3 });
    fc.assert(
      fc.property(parts, parts, (a, b) => {
        const wellFormed = [...a, ...b].every((part) => part.isWellFormed());
        fc.pre(wellFormed);
        expect(decodeStoreKey(storeKey(...a))).toEqual(a);
        const same = toHex(storeKey(...a)) === toHex(storeKey(...b));
        expect(same).toBe(JSON.stringify(a) === JSON.stringify(b));
      }),
    );
  });

  test('LMDB: distinct (resource, key) pairs never share storage; names outside the contract change nothing', async () => {
    const guard = await openLmdb();
    let epoch = 0;
    // The model, across runs (the store is shared by every run): what each pair must hold.
    const written = new Map<string, { resource: string; key: string; value: string; epoch: bigint }>();
    try {
      await fc.assert(
        fc.asyncProperty(pairs, async (list) => {
          for (const [resource, key] of list) {
            epoch++;
            const value = `${epoch}`;
            if (violatesContract(resource) || violatesContract(key)) {
              const seqBefore = guard.lastSeq();
              const token = factory.issueText({ resource: 'orders', epoch });
              await expect(
                guard.write({ token, resource, key, op: 'put' }, (tx) => tx.put(key, utf8.encode(value))),
              ).rejects.toMatchObject({ code: 'NAME_CONTROL_CHARACTER' });
              expect(guard.lastSeq()).toBe(seqBefore);
              continue;
            }
            const token = factory.issueText({ resource, epoch });
            const result = await guard.write({ token, resource, key, op: 'put' }, (tx) =>
              tx.put(key, utf8.encode(value)),
            );
            expect(result.ok).toBe(true);
            written.set(JSON.stringify([resource, key]), { resource, key, value, epoch: BigInt(epoch) });
          }
          const highest = new Map<string, bigint>();
          for (const w of written.values()) {
            expect(new TextDecoder().decode(guard.read(w.resource, w.key)?.value)).toBe(w.value);
            highest.set(w.resource, w.epoch > (highest.get(w.resource) ?? 0n) ? w.epoch : highest.get(w.resource)!);
          }
          for (const [resource, barrier] of highest) expect(guard.barrier(resource)?.epoch).toBe(barrier);
          for (const resource of highest.keys()) {
            const own = [...written.values()].filter((w) => w.resource === resource).map((w) => w.key);
            expect(
              guard
                .entries(resource)
                .map((e) => e.key)
                .sort(),
            ).toEqual([...new Set(own)].sort());
          }
        }),
        { numRuns: 40 }, // each run signs up to five fresh tokens
      );
    } finally {
      await guard.close();
    }
  });

  describe.skipIf(lacks('postgresql'))(`PostgreSQL ${needs('postgresql')}`, () => {
    let db: TestDatabase;
    let pool: pg.Pool;
    let guard: PostgresGuard;
    beforeAll(async () => {
      db = createTestDatabase('finding1');
      pool = db.pool(4);
      guard = await PostgresGuard.open(pool, factory.cluster);
      await pool.query(
        'CREATE TABLE kv (resource text NOT NULL, key text NOT NULL, value text NOT NULL, PRIMARY KEY (resource, key))',
      );
    });
    afterAll(async () => {
      await guard?.close();
      await pool?.end();
      await db?.drop();
    });

    test('distinct (resource, key) pairs never share storage; names outside the contract change nothing', async () => {
      let epoch = 0;
      const countRows = async (table: string) =>
        Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM ${table}`)).rows[0]!.n);
      const written = new Map<string, { resource: string; key: string; value: string; epoch: bigint }>();
      await fc.assert(
        fc.asyncProperty(pairs, async (list) => {
          for (const [resource, key] of list) {
            epoch++;
            const value = `${epoch}`;
            const mutation = (tx: { query: (text: string, values?: unknown[]) => Promise<unknown> }) =>
              tx.query(
                'INSERT INTO kv VALUES ($1, $2, $3) ON CONFLICT (resource, key) DO UPDATE SET value = EXCLUDED.value',
                [resource, key, value],
              );
            if (violatesContract(resource) || violatesContract(key)) {
              const [logBefore, rowsBefore] = [await countRows('quorumfence_guard_log'), await countRows('kv')];
              const token = factory.issueText({ resource: 'orders', epoch });
              await expect(guard.write({ token, resource, key, op: 'put' }, mutation)).rejects.toMatchObject({
                code: 'NAME_CONTROL_CHARACTER',
              });
              expect([await countRows('quorumfence_guard_log'), await countRows('kv')]).toEqual([
                logBefore,
                rowsBefore,
              ]);
              continue;
            }
            const result = await guard.write(
              { token: factory.issueText({ resource, epoch }), resource, key, op: 'put' },
              mutation,
            );
            expect(result.ok).toBe(true);
            written.set(JSON.stringify([resource, key]), { resource, key, value, epoch: BigInt(epoch) });
          }
          const highest = new Map<string, bigint>();
          for (const w of written.values()) {
            const row = await pool.query<{ value: string }>('SELECT value FROM kv WHERE resource = $1 AND key = $2', [
              w.resource,
              w.key,
            ]);
            expect(row.rows.map((r) => r.value)).toEqual([w.value]);
            highest.set(w.resource, w.epoch > (highest.get(w.resource) ?? 0n) ? w.epoch : highest.get(w.resource)!);
          }
          for (const [resource, barrier] of highest) expect((await guard.barrier(resource))?.epoch).toBe(barrier);
        }),
        { numRuns: 25 },
      );
    });
  });

  test('one rule everywhere a name enters: checks, token decoder, replica policy', () => {
    for (const bad of ['\u0000', 'a\u0001b', 'tab\there', 'x\u001f', 'del\u007f']) {
      expect(codeOf(() => expectResource(bad))).toBe('NAME_CONTROL_CHARACTER');
      expect(codeOf(() => decodeResource(utf8.encode(bad)))).toBe('NAME_CONTROL_CHARACTER');
      expect(codeOf(() => expectGuardKey(bad, 512))).toBe('NAME_CONTROL_CHARACTER');
      expect(codeOf(() => factory.issue({ resource: bad, epoch: 1 }))).toBe('NAME_CONTROL_CHARACTER');
    }
    // The known-answer vectors follow the rule, so they still hold (crypto-known-answer.test.ts checks the bytes).
    const vectors = JSON.parse(readFileSync('test/fixtures/known-answer-v1.json', 'utf8')) as {
      grant: { resource: string };
    };
    expect(codeOf(() => expectResource(vectors.grant.resource))).toBeUndefined();
    // Allowed: space, C1 controls (ordinary two-byte UTF-8), and everything else well-formed.
    for (const good of [' ', 'a b', '\u0080\u009f', 'é/😀', '~']) {
      expect(codeOf(() => expectResource(good))).toBeUndefined();
      expect(codeOf(() => expectGuardKey(good, 512))).toBeUndefined();
    }
    // A token whose resource bytes hold NUL (signature aside) is refused by the one decoder.
    const token = factory.issue({ resource: 'abcd', epoch: 1 });
    const tampered = token.bytes.slice();
    tampered[1 + 32 + 8 + 2] = 0x00;
    expect(codeOf(() => decodeToken(tampered, factory.cluster.backend))).toBe('NAME_CONTROL_CHARACTER');
    expect(checkToken(tampered, factory.cluster)).toMatchObject({ ok: false, code: 'NAME_CONTROL_CHARACTER' });
    // The replica refuses the request with `invalid`, before access rules and the record.
    const config: PolicyConfig = {
      clusterId: factory.cluster.id,
      minTtlMs: 100,
      maxTtlMs: 60_000,
      freeEpochStep: 64n,
      maxEpochStep: 1_000_000n,
      faultTolerance: 1,
      access: { defaultPrefixes: [''], holders: new Map() },
    };
    const decision = precheck(
      { type: 'acquire', id: 1, resource: 'orders\u0000x', epoch: 1n, ttlMs: 1000 },
      new Uint8Array(32),
      config,
    );
    expect(decision).toMatchObject({ action: 'reply', outcome: { status: 'invalid' } });
    expect(JSON.stringify(decision)).toContain('control characters');
  });
});
