/**
 * Safety across a reshare, at the signing record: old stores frozen before
 * export refuse every later grant (durably, across reopen), and a new member
 * that inherits the records of any 2f_old+1 old members (f_old of them
 * Byzantine: reporting low, absurdly high, equivocating holders, or nothing)
 * never re-signs an epoch the old set granted to someone else, and continues
 * every resource above the old epochs.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { isQuorumFenceError } from '../../src/common/errors.js';
import { bytesEqual } from '../../src/common/bytes.js';
import { exportInterchange, parseInterchange } from '../../src/replica/interchange.js';
import {
  CONTESTED_HOLDER,
  inheritRecords,
  unbackedLeadAllowed,
  type OldRecordReport,
} from '../../src/replica/inherit.js';
import { mayReplace } from '../../src/replica/check-and-record.js';
import { SigningRecord, type RecordEntry } from '../../src/replica/signing-record.js';
import { grantDigest } from '../../src/token/grant.js';
import { codeOf } from '../support/error-code.js';

const oldClusterId = new Uint8Array(32).fill(1);
const newClusterId = new Uint8Array(32).fill(2);
const holders = [0xa1, 0xb2, 0xc3].map((b) => new Uint8Array(32).fill(b));

function entry(resource: string, epoch: bigint, holder: Uint8Array, clusterId = oldClusterId): RecordEntry {
  return {
    resource,
    record: { epoch, holder, grantDigest: grantDigest({ clusterId, resource, epoch, holder }) },
  };
}

async function rejectionCode(promise: Promise<unknown>): Promise<string | undefined> {
  try {
    await promise;
  } catch (error) {
    return isQuorumFenceError(error) ? error.code : String(error);
  }
  return undefined;
}

let dir: string;
beforeEach(() => {
  dir = join(mkdtempSync(join(tmpdir(), 'qf-reshare-record-')), 'data');
});
// The mkdtemp folder, not only its data/.
afterEach(() => rmSync(dirname(dir), { recursive: true, force: true }));

describe('reshare: old members are frozen before they deal', () => {
  it('a frozen store refuses every grant with REPLICA_FROZEN, on this open and after a reopen; its export holds every grant before the freeze', async () => {
    const identity = { clusterId: oldClusterId, replicaIndex: 1 };
    let store = SigningRecord.open(dir, identity, { create: true });
    const granted = entry('orders', 5n, holders[0]!).record;
    await store.checkAndRecord('orders', () => ({ record: granted, result: undefined }));
    // A grant queued together with the freeze is decided before it.
    const racing = store.checkAndRecord('stock', () => ({ record: entry('stock', 1n, holders[1]!).record, result: 1 }));
    const frozen = store.freeze('reshare test');
    await racing;
    expect((await frozen).reason).toBe('reshare test');
    expect(
      await rejectionCode(
        store.checkAndRecord('orders', () => ({ record: entry('orders', 6n, holders[1]!).record, result: 0 })),
      ),
    ).toBe('REPLICA_FROZEN');
    const exported = exportInterchange(store);
    expect(exported.entries.map((e) => [e.resource, e.epoch])).toEqual([
      ['orders', '5'],
      ['stock', '1'],
    ]);
    await store.close();
    store = SigningRecord.open(dir, identity);
    expect(store.frozen?.reason).toBe('reshare test');
    expect(
      await rejectionCode(
        store.checkAndRecord('new', () => ({ record: entry('new', 1n, holders[0]!).record, result: 0 })),
      ),
    ).toBe('REPLICA_FROZEN');
    await store.close();
  });

  it('a live freeze under a steady stream of grants: calls made after it are refused at once, the ones before it finish first, and the export holds exactly the grants that resolved', async () => {
    const identity = { clusterId: oldClusterId, replicaIndex: 1 };
    const store = SigningRecord.open(dir, identity, { create: true });
    const calls: { resource: string; epoch: bigint; after: boolean; outcome: Promise<string | undefined> }[] = [];
    const grant = (k: number, after: boolean) => {
      // Four resources, so calls queue behind each other in one critical section as well as run side by side.
      const resource = `r${k % 4}`;
      const epoch = BigInt(k + 1);
      calls.push({
        resource,
        epoch,
        after,
        outcome: rejectionCode(
          store.checkAndRecord(resource, () => ({ record: entry(resource, epoch, holders[0]!).record, result: 0 })),
        ),
      });
    };
    for (let k = 0; k < 40; k++) grant(k, false);
    const freezing = store.freeze('live');
    // One call in the same turn as the freeze, so there is always one after it however fast the flush is (the
    // interval's first tick is a millisecond away, and on a quiet disk the freeze can be done by then).
    grant(40, true);
    let k = 41;
    // Keep the stream going while the freeze waits for the calls before it.
    const stream = setInterval(() => grant(k++, true), 0);
    await freezing;
    clearInterval(stream);
    const outcomes = await Promise.all(calls.map((c) => c.outcome));
    expect(calls.filter((c) => c.after).length).toBeGreaterThan(0);
    calls.forEach((c, i) => {
      if (c.after) expect(outcomes[i]).toBe('REPLICA_FROZEN');
      else expect([undefined, 'REPLICA_FROZEN']).toContain(outcomes[i]);
    });
    // The last resolved grant per resource is what the export holds, and nothing signs after.
    const resolved = new Map<string, bigint>();
    calls.forEach((c, i) => {
      if (outcomes[i] === undefined) resolved.set(c.resource, c.epoch);
    });
    expect(new Map(exportInterchange(store).entries.map((e) => [e.resource, BigInt(e.epoch)]))).toEqual(resolved);
    expect(await rejectionCode(store.freeze('again'))).toBeUndefined();
    expect(store.frozen?.reason).toBe('live');
    await store.close();
  });

  it('inheriting refuses fewer than 2f_old+1 old records, and two records from one replica, with RESHARE_REFUSED', () => {
    const report = (replica: number): OldRecordReport => ({ replica, floor: 0n, entries: [] });
    expect(codeOf(() => inheritRecords([report(1), report(2)], 1, newClusterId))).toBe('RESHARE_REFUSED');
    expect(codeOf(() => inheritRecords([report(1), report(2), report(2)], 1, newClusterId))).toBe('RESHARE_REFUSED');
    expect(codeOf(() => inheritRecords([report(1), report(2), report(3)], 1, newClusterId))).toBeUndefined();
  });

  it('a resource one old member compacted into its floor is inherited as signed up to that floor, never below', async () => {
    // Replica 1 signed orders@10 and compacted it (floor 10, no entry); replicas 2 and 3 still hold orders@5.
    const reports: OldRecordReport[] = [
      { replica: 1, floor: 10n, entries: [] },
      { replica: 2, floor: 0n, entries: [entry('orders', 5n, holders[0]!), entry('fresh', 12n, holders[1]!)] },
      { replica: 3, floor: 0n, entries: [entry('orders', 5n, holders[0]!)] },
    ];
    const inherited = inheritRecords(reports, 1, newClusterId);
    expect(inherited.floor).toBe(10n);
    expect(inherited.entries.map((e) => [e.resource, e.record.epoch])).toEqual([['fresh', 12n]]);
    const store = SigningRecord.open(dir, { clusterId: newClusterId, replicaIndex: 4 }, { create: true });
    await store.raiseFrom(inherited.entries, inherited.floor);
    expect(store.floor).toBe(10n);
    expect(store.get('orders')).toBeUndefined(); // judged against the floor: epochs up to 10 are stale
    expect(store.get('fresh')?.epoch).toBe(12n);
    await store.close();
  });

  it('an inherited record raises a new store through the interchange path, digests under the new cluster id', async () => {
    const reports = [1, 2, 3].map((replica) => ({
      replica,
      floor: 0n,
      entries: [entry('orders', BigInt(replica), holders[0]!)],
    }));
    const inherited = inheritRecords(reports, 1, newClusterId);
    const store = SigningRecord.open(dir, { clusterId: newClusterId, replicaIndex: 4 }, { create: true });
    await store.raiseFrom(inherited.entries);
    const json = exportInterchange(store);
    expect(parseInterchange(json, newClusterId).entries[0]!.record.epoch).toBe(3n);
    await store.close();
  });
});

describe('reshare: the inherited record never lets an old epoch be granted to someone else', () => {
  it('any old grants, any 2f_old+1 reporters with f_old Byzantine: every granted epoch is covered, and the top epoch is re-signable only for its holder', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(1, 2),
        fc.array(
          fc.record({
            resource: fc.constantFrom('a', 'b', 'c'),
            epoch: fc.integer({ min: 1, max: 20 }),
            holder: fc.nat(2),
            signers: fc.array(fc.nat(), { minLength: 7, maxLength: 7 }),
          }),
          { maxLength: 12 },
        ),
        fc.array(fc.nat(), { minLength: 7, maxLength: 7 }),
        fc.constantFrom('low', 'absurd', 'other-holder', 'silent'),
        (oldF, grants, reporterChoice, lie) => {
          const oldN = 3 * oldF + 1;
          const t = 2 * oldF + 1;
          const byzantine = new Set(Array.from({ length: oldF }, (_, k) => k + 1));
          // Each honest old member's record: per resource the highest (epoch, holder) it signed, per the replica rules.
          const records = new Map<number, Map<string, RecordEntry>>();
          for (let i = 1; i <= oldN; i++) records.set(i, new Map());
          const issued: { resource: string; epoch: bigint; holder: Uint8Array }[] = [];
          for (const g of grants) {
            const holder = holders[g.holder]!;
            const next = entry(g.resource, BigInt(g.epoch), holder).record;
            // Byzantine members sign anything; honest members only what mayReplace allows.
            const willing = [...records.keys()].filter(
              (i) => byzantine.has(i) || mayReplace(records.get(i)!.get(g.resource)?.record, next),
            );
            if (willing.length < t) continue;
            const ordered = [...willing].sort((x, y) => g.signers[x % 7]! - g.signers[y % 7]! || x - y);
            for (const i of ordered.slice(0, t)) {
              if (!byzantine.has(i)) records.get(i)!.set(g.resource, { resource: g.resource, record: next });
            }
            issued.push({ resource: g.resource, epoch: BigInt(g.epoch), holder });
          }
          // Any 2f_old+1 reporters, the Byzantine ones among them lying.
          const pool = Array.from({ length: oldN }, (_, k) => k + 1);
          const reporters: number[] = [];
          for (let k = 0; k < t; k++) reporters.push(pool.splice(reporterChoice[k]! % pool.length, 1)[0]!);
          const reports: OldRecordReport[] = reporters.map((replica) => {
            if (!byzantine.has(replica)) return { replica, floor: 0n, entries: [...records.get(replica)!.values()] };
            switch (lie) {
              case 'silent':
              case 'low':
                return { replica, floor: 0n, entries: lie === 'low' ? [entry('a', 1n, holders[2]!)] : [] };
              case 'absurd':
                // As high as a lie may go and still be inherited whatever the others report: 2^62 and above is
                // refused, and so is a value more than 1/1024 of the epochs left below 2^62 above what f+1 back.
                return { replica, floor: 0n, entries: [entry('a', unbackedLeadAllowed(0n), holders[2]!)] };
              case 'other-holder':
                return {
                  replica,
                  floor: 0n,
                  entries: issued.map((g) =>
                    entry(g.resource, g.epoch, holders[(holders.findIndex((h) => bytesEqual(h, g.holder)) + 1) % 3]!),
                  ),
                };
            }
          });
          const inherited = inheritRecords(reports, oldF, newClusterId);
          const byResource = new Map(inherited.entries.map((e) => [e.resource, e.record]));
          for (const g of issued) {
            const kept = byResource.get(g.resource);
            expect(kept).toBeDefined();
            expect(kept!.epoch >= g.epoch).toBe(true);
            if (kept!.epoch === g.epoch) {
              // The new set may re-sign this epoch only for the holder it was granted to (or no one).
              expect(bytesEqual(kept!.holder, g.holder) || bytesEqual(kept!.holder, CONTESTED_HOLDER)).toBe(true);
              const other = holders.find((h) => !bytesEqual(h, g.holder))!;
              expect(mayReplace(kept, entry(g.resource, g.epoch, other, newClusterId).record)).toBe(false);
            }
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
