/**
 * The signing record's floor and compaction at the store level: record
 * versions, a damaged floor, the busy-resource rule, and import with a floor.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { open as openLmdb } from 'lmdb';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { grantDigest } from '../../src/token/grant.js';
import type { SignedRecord } from '../../src/replica/policy.js';
import { mayReplace } from '../../src/replica/check-and-record.js';
import { decodeStoredRecord, encodeRecord } from '../../src/replica/record-codec.js';
import { SigningRecord, type StoreIdentity } from '../../src/replica/signing-record.js';
import { codeOf } from '../support/error-code.js';

const clusterId = new Uint8Array(32).fill(1);
const identity: StoreIdentity = { clusterId, replicaIndex: 2 };
const alice = new Uint8Array(32).fill(0xa1);
const bob = new Uint8Array(32).fill(0xb0);

function record(resource: string, epoch: bigint, holder: Uint8Array): SignedRecord {
  return { epoch, holder, grantDigest: grantDigest({ clusterId, resource, epoch, holder }) };
}

let dir: string;
let wall = 1_000;
let stores: SigningRecord[] = [];
function openStore(): SigningRecord {
  const store = SigningRecord.open(dir, identity, { probe: false, wallClock: () => wall, create: true });
  stores.push(store);
  return store;
}
async function put(store: SigningRecord, resource: string, epoch: bigint, holder = alice): Promise<void> {
  await store.checkAndRecord(resource, () => ({ record: record(resource, epoch, holder), result: undefined }));
}

beforeEach(() => {
  dir = join(mkdtempSync(join(tmpdir(), 'qf-record-floor-')), 'data');
  wall = 1_000;
});
afterEach(async () => {
  await Promise.all(stores.map((s) => s.close()));
  stores = [];
  rmSync(dirname(dir), { recursive: true, force: true });
});

describe('record versions', () => {
  it('reads version 1 records (grant time 0, the old released flag ignored) and refuses others with STORE_CORRUPT', () => {
    const v2 = encodeRecord(record('x', 7n, alice), 1_234);
    expect(decodeStoredRecord(v2, dir)).toEqual({ record: record('x', 7n, alice), grantedAtMs: 1_234 });
    const v1 = Uint8Array.from(v2.subarray(0, 74));
    v1[0] = 1;
    v1[1] = 0x01;
    expect(decodeStoredRecord(v1, dir)).toEqual({ record: record('x', 7n, alice), grantedAtMs: 0 });
    const v3 = Uint8Array.from(v2);
    v3[0] = 3;
    expect(codeOf(() => decodeStoredRecord(v3, dir))).toBe('STORE_CORRUPT');
    expect(() => decodeStoredRecord(v3, dir)).toThrow(/reads record versions 1 and 2/);
    const flagged = Uint8Array.from(v2);
    flagged[1] = 0x01; // version 2 has no flags
    expect(codeOf(() => decodeStoredRecord(flagged, dir))).toBe('STORE_CORRUPT');
  });

  it('refuses to open a store whose floor is not a decimal epoch (STORE_CORRUPT)', async () => {
    await openStore().close();
    stores = [];
    const env = openLmdb({ path: dir, maxDbs: 4 });
    env.openDB<string, string>('meta', { encoding: 'string' }).putSync('floor', '12abc');
    await env.close();
    expect(codeOf(() => openStore())).toBe('STORE_CORRUPT');
    // The refused open left the store neither open nor locked: once repaired, it opens (not STORE_LOCKED).
    const repair = openLmdb({ path: dir, maxDbs: 4 });
    repair.openDB<string, string>('meta', { encoding: 'string' }).putSync('floor', '12');
    await repair.close();
    expect(openStore().floor).toBe(12n);
  });
});

describe('compaction keeps S2', () => {
  it('raises the floor to the largest compacted epoch in the same step, durably, and skips busy resources', async () => {
    const store = openStore();
    await put(store, 'a', 4n);
    await put(store, 'b', 9n);
    await put(store, 'c', 2n);
    // c has a call in its critical section: compaction must leave it alone.
    const pending = put(store, 'c', 3n);
    const step = store.compactStep(undefined, 10, () => true);
    await pending;
    expect(step).toMatchObject({ compacted: 2, scanned: 3, next: undefined });
    expect(store.floor).toBe(9n);
    expect(store.get('a')).toBeUndefined();
    expect(store.get('c')?.epoch).toBe(3n);
    await store.close();
    const again = openStore();
    expect(again.floor).toBe(9n);
    expect(again.openedWith.resources).toBe(1);
  });

  it('refuses (INTERNAL) a write at or below the floor for a resource without a record, whatever the caller decided', async () => {
    expect(mayReplace(undefined, record('x', 5n, alice), 5n)).toBe(false);
    expect(mayReplace(undefined, record('x', 6n, alice), 5n)).toBe(true);
    const store = openStore();
    await put(store, 'a', 5n);
    store.compactStep(undefined, 10, () => true);
    expect(store.floor).toBe(5n);
    await expect(put(store, 'a', 5n, bob)).rejects.toMatchObject({ code: 'INTERNAL' });
    await expect(put(store, 'never', 3n, bob)).rejects.toMatchObject({ code: 'INTERNAL' });
    expect(store.get('a')).toBeUndefined();
    await put(store, 'a', 6n, bob);
    expect(store.get('a')?.epoch).toBe(6n);
  });

  it('steps through the records in batches and never lowers the floor', async () => {
    const store = openStore();
    for (const [k, resource] of ['a', 'b', 'c', 'd', 'e'].entries()) await put(store, resource, BigInt(10 - k));
    const first = store.compactStep(undefined, 2, () => true);
    expect(first.compacted).toBe(2);
    expect(store.floor).toBe(10n);
    const second = store.compactStep(first.next, 2, () => true);
    expect(second.scanned).toBe(2);
    expect(store.floor).toBe(10n);
    expect(store.compactStep(second.next, 2, () => true).next).toBeUndefined();
    expect(store.size).toBe(0);
  });

  it('passes each record its grant time from the wall clock', async () => {
    const store = openStore();
    wall = 5_000;
    await put(store, 'a', 1n);
    const seen: number[] = [];
    store.compactStep(undefined, 10, (_r, _rec, grantedAtMs) => {
      seen.push(grantedAtMs);
      return false;
    });
    expect(seen).toEqual([5_000]);
  });
});

describe('import with a floor', () => {
  it('raises the floor, ignores entries at or below it for absent resources, and still refuses conflicts', async () => {
    const store = openStore();
    await put(store, 'kept', 3n);
    const summary = await store.raiseFrom(
      [
        { resource: 'gone', record: record('gone', 5n, bob) },
        { resource: 'kept', record: record('kept', 4n, bob) },
        { resource: 'new', record: record('new', 6n, bob) },
      ],
      5n,
    );
    expect(summary).toEqual({ raised: 2, unchanged: 1 });
    expect(store.floor).toBe(5n);
    expect(store.get('gone')).toBeUndefined();
    expect(store.get('kept')?.epoch).toBe(4n);
    // A lower floor in a later file never lowers it.
    await store.raiseFrom([], 2n);
    expect(store.floor).toBe(5n);
    await expect(store.raiseFrom([{ resource: 'new', record: record('new', 6n, alice) }], 0n)).rejects.toMatchObject({
      code: 'BAD_INTERCHANGE',
    });
    expect(store.get('new')?.holder).toEqual(bob);
  });
});
