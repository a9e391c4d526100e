/**
 * The signing record on real LMDB files in a temp dir: identity checks,
 * locking, reset detection, no store made unless told, refusing to lower a
 * watermark, and atomic imports.
 */
import { existsSync, mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { isQuorumFenceError, type ErrorCode } from '../../src/common/errors.js';
import { grantDigest } from '../../src/token/grant.js';
import type { SignedRecord } from '../../src/replica/policy.js';
import { mayReplace } from '../../src/replica/check-and-record.js';
import { decodeRecord, encodeRecord } from '../../src/replica/record-codec.js';
import { createSigningRecord, SigningRecord, type StoreIdentity } from '../../src/replica/signing-record.js';
import { open as lmdbOpen } from 'lmdb';

const clusterId = new Uint8Array(32).fill(1);
const identity: StoreIdentity = { clusterId, replicaIndex: 2 };
const alice = new Uint8Array(32).fill(0xa1);
const bob = new Uint8Array(32).fill(0xb0);

function record(resource: string, epoch: bigint, holder: Uint8Array): SignedRecord {
  return { epoch, holder, grantDigest: grantDigest({ clusterId, resource, epoch, holder }) };
}

function expectCode(fn: () => unknown, code: ErrorCode): void {
  try {
    fn();
  } catch (error) {
    expect(isQuorumFenceError(error) ? error.code : error).toBe(code);
    return;
  }
  throw new Error(`expected ${code}, nothing was thrown`);
}

let dir: string;
let open: SigningRecord[] = [];
function openStore(id: StoreIdentity | undefined = identity, readOnly = false): SigningRecord {
  // A new store for each test: told it is new, as `replica init` or `keygen --data` would.
  const store = SigningRecord.open(dir, id, { readOnly, create: !readOnly });
  open.push(store);
  return store;
}

beforeEach(() => {
  dir = join(mkdtempSync(join(tmpdir(), 'qf-signing-record-')), 'data');
});
afterEach(async () => {
  await Promise.all(open.map((s) => s.close()));
  open = [];
  rmSync(dirname(dir), { recursive: true, force: true }); // the mkdtemp folder, not only its data/
});

describe('signing record layout', () => {
  it('round-trips a record and refuses unknown layouts with STORE_CORRUPT', () => {
    const r = record('x', 42n, alice);
    expect(decodeRecord(encodeRecord(r, 1_700_000_000_000), dir)).toEqual(r);
    const bad = encodeRecord(r, 1_700_000_000_000);
    bad[0] = 9;
    expectCode(() => decodeRecord(bad, dir), 'STORE_CORRUPT');
    expectCode(() => decodeRecord(encodeRecord(r, 1_700_000_000_000).subarray(1), dir), 'STORE_CORRUPT');
    const zeroEpoch = encodeRecord(r, 1_700_000_000_000);
    zeroEpoch.fill(0, 2, 10);
    expectCode(() => decodeRecord(zeroEpoch, dir), 'STORE_CORRUPT');
  });
});

describe('S2 monotonic signing (store)', () => {
  it('never lets a write lower a watermark or change the holder at an equal epoch', () => {
    const current = record('r', 5n, alice);
    expect(mayReplace(undefined, current)).toBe(true);
    expect(mayReplace(current, record('r', 6n, bob))).toBe(true);
    expect(mayReplace(current, { ...current })).toBe(true);
    expect(mayReplace(current, record('r', 4n, alice))).toBe(false);
    expect(mayReplace(current, record('r', 5n, bob))).toBe(false);
  });

  it('refuses (INTERNAL) a decision that would lower the watermark, and keeps the record', async () => {
    const store = openStore();
    await store.checkAndRecord('r', () => ({ record: record('r', 5n, alice), result: undefined }));
    await expect(
      store.checkAndRecord('r', () => ({ record: record('r', 3n, bob), result: undefined })),
    ).rejects.toMatchObject({ code: 'INTERNAL' });
    await expect(
      store.checkAndRecord('r', () => ({ record: record('r', 5n, bob), result: undefined })),
    ).rejects.toMatchObject({ code: 'INTERNAL' });
    expect(store.get('r')).toEqual(record('r', 5n, alice));
  });

  it('runs calls for one resource one at a time, each seeing the previous write', async () => {
    const store = openStore();
    const seen: (bigint | undefined)[] = [];
    await Promise.all(
      Array.from({ length: 50 }, (_, k) =>
        store.checkAndRecord('hot', (current) => {
          seen.push(current?.epoch);
          return { record: record('hot', (current?.epoch ?? 0n) + 1n, k % 2 ? alice : bob), result: undefined };
        }),
      ),
    );
    expect(seen).toEqual([undefined, ...Array.from({ length: 49 }, (_, k) => BigInt(k + 1))]);
    expect(store.get('hot')?.epoch).toBe(50n);
  });

  it('keeps every record across a close and reopen', async () => {
    const store = openStore();
    await Promise.all(
      ['a', 'b', 'ü'].map((r, k) =>
        store.checkAndRecord(r, () => ({ record: record(r, BigInt(k + 1), alice), result: undefined })),
      ),
    );
    await store.close();
    const again = openStore();
    expect([...again.entries()]).toEqual([
      { resource: 'a', record: record('a', 1n, alice) },
      { resource: 'b', record: record('b', 2n, alice) },
      { resource: 'ü', record: record('ü', 3n, alice) },
    ]);
    expect(again.openedWith).toEqual({ resources: 3 });
  });
});

describe('signing record identity and locking', () => {
  it('refuses a data directory of another cluster or another replica with CLUSTER_MISMATCH', async () => {
    await openStore().close();
    expectCode(
      () => SigningRecord.open(dir, { clusterId: new Uint8Array(32).fill(9), replicaIndex: 2 }),
      'CLUSTER_MISMATCH',
    );
    expectCode(() => SigningRecord.open(dir, { clusterId, replicaIndex: 3 }), 'CLUSTER_MISMATCH');
    expect(openStore().identity.replicaIndex).toBe(2);
  });

  it('refuses a second writer while the first is open (STORE_LOCKED), and takes over a dead process lock', async () => {
    const store = openStore();
    expectCode(() => SigningRecord.open(dir, identity), 'STORE_LOCKED');
    // Readers (export) need no lock.
    expect(openStore(undefined, true).identity.replicaIndex).toBe(2);
    await store.close();
    // A lock left by a process that no longer exists (pid 2^22+1 is above Linux's pid_max default).
    writeFileSync(join(dir, 'replica.lock'), '4194305\n');
    expect(openStore().identity.replicaIndex).toBe(2);
  });

  it("takes over a lock naming this process's pid that it does not hold (a container's pid 1, restarted after a kill)", async () => {
    await openStore().close();
    open = [];
    writeFileSync(join(dir, 'replica.lock'), `${process.pid}\n`);
    const store = openStore();
    expect(store.identity.replicaIndex).toBe(2);
    // Held now: a second open in this process is still refused.
    expectCode(() => SigningRecord.open(dir, identity), 'STORE_LOCKED');
    await store.close();
    expect(existsSync(join(dir, 'replica.lock'))).toBe(false);
  });

  it('refuses to start from empty watermarks when the LMDB data was removed (STORE_CORRUPT)', async () => {
    const store = openStore();
    await store.checkAndRecord('r', () => ({ record: record('r', 1n, alice), result: undefined }));
    await store.close();
    open = [];
    unlinkSync(join(dir, 'data.mdb'));
    expectCode(() => SigningRecord.open(dir, identity), 'STORE_CORRUPT');
    expect(existsSync(join(dir, 'replica.lock'))).toBe(false);
  });

  it('refuses a data.mdb that is not LMDB (STORE_CORRUPT)', async () => {
    await openStore().close();
    open = [];
    writeFileSync(join(dir, 'data.mdb'), Buffer.alloc(64 * 1024, 0x5a));
    expectCode(() => SigningRecord.open(dir, identity), 'STORE_CORRUPT');
    expectCode(() => SigningRecord.open(dir, undefined, { readOnly: true }), 'STORE_CORRUPT');
  });

  it('refuses a read-only open of a directory without a store', () => {
    expectCode(() => SigningRecord.open(dir, undefined, { readOnly: true }), 'STORE_CORRUPT');
  });

  it('never makes a store unless told to (STORE_MISSING, nothing created); told once, it finds it afterwards (issue 43, finding 5)', async () => {
    let message = '';
    try {
      SigningRecord.open(dir, identity);
    } catch (error) {
      expect(isQuorumFenceError(error, 'STORE_MISSING')).toBe(true);
      message = (error as Error).message;
    }
    // The message names the ways a store is made.
    for (const way of ['replica init', 'keygen --data', 'dkg run', 'reshare inherit', 'replica import'])
      expect(message).toContain(way);
    expect(existsSync(dir)).toBe(false);
    await createSigningRecord(dir, identity);
    const store = SigningRecord.open(dir, identity);
    open.push(store);
    expect(store.identity.replicaIndex).toBe(2);
    // A record is never replaced by an empty one.
    await expect(createSigningRecord(dir, identity)).rejects.toMatchObject({ code: 'FILE_EXISTS' });
  });

  it('an LMDB file whose making stopped before its identity was written is made again only when told (STORE_MISSING)', async () => {
    await openStore().close();
    open = [];
    // What a crash between LMDB's file and the identity leaves: an empty store with no identity.
    rmSync(dir, { recursive: true, force: true });
    const env = lmdbOpen({ path: dir, maxDbs: 4 });
    env.openDB('records', { encoding: 'binary', keyEncoding: 'binary' });
    env.openDB('meta', { encoding: 'string' });
    await env.close();
    expectCode(() => SigningRecord.open(dir, identity), 'STORE_MISSING');
    expect(openStore().identity.replicaIndex).toBe(2);
  });
});

describe('import raises watermarks only', () => {
  it('raises lower records, ignores higher ones, and refuses a conflict at an equal epoch without changing anything', async () => {
    const store = openStore();
    for (const [r, e] of [
      ['low', 2n],
      ['high', 9n],
      ['same', 4n],
    ] as const) {
      await store.checkAndRecord(r, () => ({ record: record(r, e, alice), result: undefined }));
    }
    const before = [...store.entries()];
    await expect(
      store.raiseFrom([
        { resource: 'low', record: record('low', 5n, bob) },
        { resource: 'same', record: record('same', 4n, bob) },
      ]),
    ).rejects.toMatchObject({ code: 'BAD_INTERCHANGE' });
    expect([...store.entries()]).toEqual(before);

    const summary = await store.raiseFrom([
      { resource: 'high', record: record('high', 3n, bob) },
      { resource: 'low', record: record('low', 5n, bob) },
      { resource: 'new', record: record('new', 1n, bob) },
      { resource: 'same', record: record('same', 4n, alice) },
    ]);
    expect(summary).toEqual({ raised: 2, unchanged: 2 });
    expect(store.get('low')).toEqual(record('low', 5n, bob));
    expect(store.get('high')).toEqual(record('high', 9n, alice));
    expect(store.get('new')).toEqual(record('new', 1n, bob));
  });
});
