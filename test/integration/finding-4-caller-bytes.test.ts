/**
 * Issue 16, finding 4: `checkCompressedPoint` copied with `bytes.slice()`,
 * which on a Node Buffer is a view, then cleared flag bits in the caller's
 * token: every entry point refused a valid token given as a Buffer
 * (POINT_NOT_ON_CURVE) and corrupted the caller's bytes. Every public entry
 * point is run here with a Uint8Array, a Buffer, and views at a non-zero
 * offset into a larger buffer; the caller's whole backing memory must be
 * unchanged afterwards, and nothing the library keeps may alias it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { identityFromSecretKey } from '../../src/client/identity.js';
import { loadBackend } from '../../src/crypto/load.js';
import { LmdbGuard } from '../../src/guard/lmdb-guard.js';
import { PostgresGuard } from '../../src/guard/postgres-guard.js';
import { TokenVerifier } from '../../src/guard/verifier.js';
import { checkToken, decodeToken, tokenToText, verifyToken } from '../../src/token/admission-token.js';
import { runCli } from '../support/cli.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres.js';
import { makeTokenFactory } from '../support/token-factory.js';
import { lacks, needs } from '../support/system-tools.js';

const factory = makeTokenFactory();
const dirs: string[] = [];

interface Shape {
  readonly name: string;
  /** The caller's bytes holding `token`, and the whole memory they live in. */
  make(token: Uint8Array): { bytes: Uint8Array; memory: Uint8Array };
}

const shapes: readonly Shape[] = [
  {
    name: 'Uint8Array',
    make: (token) => {
      const bytes = new Uint8Array(token);
      return { bytes, memory: bytes };
    },
  },
  {
    name: 'Buffer',
    make: (token) => {
      const bytes = Buffer.from(token);
      return { bytes, memory: new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength) };
    },
  },
  {
    name: 'Uint8Array view at offset 7',
    make: (token) => {
      const memory = new Uint8Array(token.length + 20).fill(0xa5);
      memory.set(token, 7);
      return { bytes: memory.subarray(7, 7 + token.length), memory };
    },
  },
  {
    name: 'Buffer view at offset 13',
    make: (token) => {
      const whole = Buffer.alloc(token.length + 29, 0x5a);
      whole.set(token, 13);
      return { bytes: whole.subarray(13, 13 + token.length), memory: whole };
    },
  },
];

let epoch = 0;
/** A fresh token (new epoch, so no cache can hide anything) in the caller's shape, and a snapshot of its memory. */
function fresh(shape: Shape, resource = 'finding4') {
  const token = factory.issue({ resource, epoch: ++epoch });
  const { bytes, memory } = shape.make(token.bytes);
  return { token, bytes, memory, before: plain(memory) };
}

/** Byte contents as a plain Uint8Array, so a Buffer and a Uint8Array with the same bytes compare equal. */
function plain(bytes: Uint8Array | undefined): Uint8Array | undefined {
  return bytes && Uint8Array.from(bytes);
}

afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describe('finding 4: caller bytes (Buffer, Uint8Array, offset views) are accepted and never modified', () => {
  test.each(shapes)('decodeToken, verifyToken and checkToken with a $name, on both BLS backends', (shape) => {
    for (const backend of [loadBackend('noble'), factory.cluster.backend]) {
      const { token, bytes, memory, before } = fresh(shape);
      const decoded = decodeToken(bytes, backend);
      expect(plain(memory)).toEqual(before);
      if (backend === factory.cluster.backend) expect(verifyToken(decoded, factory.cluster).ok).toBe(true);
      expect(checkToken(bytes, factory.cluster).ok).toBe(true);
      expect(plain(memory)).toEqual(before);
      // Nothing decoded shares the caller's memory: scribbling on it changes no field.
      memory.fill(0xff);
      expect(plain(decoded.bytes)).toEqual(plain(token.bytes));
      expect(plain(decoded.grant.holder)).toEqual(plain(token.grant.holder));
      expect(plain(decoded.grant.clusterId)).toEqual(plain(token.grant.clusterId));
      expect(plain(decoded.signature.bytes)).toEqual(plain(token.signature.bytes));
    }
  });

  test.each(shapes)('TokenVerifier with a $name (a cache miss, then a hit)', (shape) => {
    const verifier = new TokenVerifier(factory.cluster);
    const { token, bytes, memory, before } = fresh(shape);
    const first = verifier.verify(bytes);
    expect(first).toMatchObject({ ok: true, cached: false });
    expect(plain(memory)).toEqual(before);
    memory.fill(0);
    const again = verifier.verify(token.bytes);
    expect(again).toMatchObject({ ok: true, cached: true });
    if (again.ok) expect(plain(again.token.bytes)).toEqual(plain(token.bytes));
  });

  test.each(shapes)('LmdbGuard.write with a $name token', async (shape) => {
    const dir = mkdtempSync(join(tmpdir(), 'qf-finding4-'));
    dirs.push(dir);
    const guard = await LmdbGuard.open(dir, factory.cluster);
    try {
      const { token, bytes, memory, before } = fresh(shape);
      const value = Buffer.from('value held by the caller');
      const valueBefore = Uint8Array.from(value);
      const result = await guard.write({ token: bytes, resource: 'finding4', key: 'k', op: 'put' }, (tx) =>
        tx.put('k', value),
      );
      expect(result).toMatchObject({ ok: true });
      expect(plain(memory)).toEqual(before);
      expect(Uint8Array.from(value)).toEqual(valueBefore);
      // The stored barrier token and value are copies, not views on the caller's memory.
      memory.fill(0);
      value.fill(0);
      expect(plain(guard.barrier('finding4')?.token)).toEqual(plain(token.bytes));
      expect(Uint8Array.from(guard.read('finding4', 'k')!.value)).toEqual(valueBefore);
    } finally {
      await guard.close();
    }
  });

  describe.skipIf(lacks('postgresql'))(`PostgreSQL ${needs('postgresql')}`, () => {
    let db: TestDatabase;
    let pool: pg.Pool;
    let guard: PostgresGuard;
    beforeAll(async () => {
      db = createTestDatabase('finding4');
      pool = db.pool(2);
      guard = await PostgresGuard.open(pool, factory.cluster);
    });
    afterAll(async () => {
      await guard?.close();
      await pool?.end();
      await db?.drop();
    });

    test.each(shapes)('PostgresGuard.write with a $name token', async (shape) => {
      const { token, bytes, memory, before } = fresh(shape, 'finding4-pg');
      const result = await guard.write({ token: bytes, resource: 'finding4-pg', op: 'put' });
      expect(result).toMatchObject({ ok: true });
      expect(plain(memory)).toEqual(before);
      memory.fill(0);
      expect(plain((await guard.barrier('finding4-pg'))?.token)).toEqual(plain(token.bytes));
    });
  });

  test('the same class elsewhere: an identity made from a Buffer secret keeps its own copy', () => {
    const secret = Buffer.alloc(32, 7);
    const identity = identityFromSecretKey(secret);
    const message = new TextEncoder().encode('challenge');
    const signature = identity.sign(message);
    secret.fill(0); // the caller wipes its buffer, as it should
    expect(plain(identity.sign(message))).toEqual(plain(signature));
  });

  test('the CLI verify path accepts the token made from a Buffer, from argv and stdin', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'qf-finding4-cli-'));
    dirs.push(dir);
    const clusterFile = factory.writeClusterFile(dir);
    const { token, bytes, memory, before } = fresh(shapes[3]!);
    const text = tokenToText(decodeToken(bytes, factory.cluster.backend));
    expect(plain(memory)).toEqual(before);
    expect(text).toBe(tokenToText(token));
    const fromArgv = await runCli(['verify', text, '--cluster', clusterFile, '--json']);
    expect(fromArgv.code).toBe(0);
    expect(JSON.parse(fromArgv.stdout)).toMatchObject({ valid: true, resource: 'finding4' });
    const fromStdin = await runCli(['verify', '-', '--cluster', clusterFile], { input: text + '\n' });
    expect(fromStdin.code).toBe(0);
  });
});
