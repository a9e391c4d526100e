/**
 * Signed frozen exports (src/replica/frozen-export.ts) on real LMDB stores with real BLS shares: only a
 * frozen store is signed; a signed export reads back as exactly the store's record; any change to any signed
 * field, a relabel to another replica, or another replica's signature is refused with its code; and the
 * signature is no grant partial (its message cannot be a grant message, and it does not verify as one).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { bytesEqual, toHex } from '../../src/common/bytes.js';
import { loadBackend } from '../../src/crypto/load.js';
import { frozenExportMessage, readFrozenExport, signFrozenExport } from '../../src/replica/frozen-export.js';
import { SigningRecord } from '../../src/replica/signing-record.js';
import { GRANT_DOMAIN_TAG, grantDigest, grantMessage } from '../../src/token/grant.js';
import { dealCluster } from '../support/dealt-cluster.js';
import { codeOf } from '../support/error-code.js';

const backend = loadBackend('blst');
const dealt = dealCluster(4, backend);
const { cluster } = dealt;
const keyOf = (index: number) => ({ index, secretKey: dealt.secretKeys[index - 1]! });
const root = mkdtempSync(join(tmpdir(), 'qf-frozen-export-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let stores = 0;

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** A real store of replica `index` holding `grants` (resource -> epoch, holder byte), frozen or not. */
async function storeWith(index: number, grants: [string, number, number][], frozen: boolean) {
  const store = SigningRecord.open(
    join(root, `store-${++stores}`),
    { clusterId: cluster.id, replicaIndex: index },
    { create: true },
  );
  for (const [resource, epoch, holderByte] of grants) {
    const holder = new Uint8Array(32).fill(holderByte);
    await store.checkAndRecord(resource, () => ({
      record: {
        epoch: BigInt(epoch),
        holder,
        grantDigest: grantDigest({ clusterId: cluster.id, resource, epoch: BigInt(epoch), holder }),
        released: false,
      },
      result: undefined,
    }));
  }
  if (frozen) await store.freeze('test');
  return store;
}

const grants = fc.uniqueArray(
  fc.tuple(fc.constantFrom('a', 'b', 'orders/1', 'ünïcode'), fc.integer({ min: 1, max: 1_000_000 }), fc.nat(255)),
  { selector: (g) => g[0], minLength: 1, maxLength: 4 },
);

/** One change to one signed field of a v3 document. */
const changes: [string, (j: Json) => void][] = [
  ['replica relabelled', (j) => (j.replica = (j.replica % 4) + 1)],
  ['floor raised', (j) => (j.floor = String(BigInt(j.floor) + 1n))],
  ['freeze time', (j) => (j.frozen.at = 'earlier')],
  ['freeze reason', (j) => (j.frozen.reason = j.frozen.reason + '!')],
  ['an entry dropped', (j) => j.entries.pop()],
  [
    'an entry added',
    (j) => {
      const holder = new Uint8Array(32).fill(7);
      j.entries.push({
        resource: 'ÿ-added',
        epoch: '3',
        holder: toHex(holder),
        grantDigest: toHex(grantDigest({ clusterId: cluster.id, resource: 'ÿ-added', epoch: 3n, holder })),
      });
    },
  ],
];

describe('signed frozen exports', () => {
  it('an unfrozen store is not signed: EXPORT_NOT_FROZEN; another replica key is refused', async () => {
    const store = await storeWith(1, [['a', 1, 1]], false);
    expect(codeOf(() => signFrozenExport(store, cluster, keyOf(1)))).toBe('EXPORT_NOT_FROZEN');
    await store.freeze('now');
    expect(codeOf(() => signFrozenExport(store, cluster, keyOf(2)))).toBe('RESHARE_REFUSED');
    expect(codeOf(() => signFrozenExport(store, cluster, keyOf(1)))).toBeUndefined();
    await store.close();
  });

  it('any record, signed and read back: the same record; any one changed field, or another signer, is refused', async () => {
    await fc.assert(
      fc.asyncProperty(grants, fc.integer({ min: 1, max: 4 }), fc.nat(changes.length - 1), async (g, index, change) => {
        const store = await storeWith(index, g, true);
        const signed = JSON.parse(JSON.stringify(signFrozenExport(store, cluster, keyOf(index)))) as Json;
        const entries = [...store.entries()];
        await store.close();
        const report = readFrozenExport(structuredClone(signed), cluster, 'export.json');
        expect(report.replica).toBe(index);
        expect(report.entries.map((e) => [e.resource, e.record.epoch])).toEqual(
          entries.map((e) => [e.resource, e.record.epoch]),
        );
        const [what, edit] = changes[change]!;
        const doctored = structuredClone(signed);
        edit(doctored);
        expect([what, codeOf(() => readFrozenExport(doctored, cluster, 'export.json'))]).toEqual([
          what,
          'EXPORT_SIGNATURE_INVALID',
        ]);
        // Another replica's share over this very record, relabelled to it: verifies only under its own index.
        const other = (index % 4) + 1;
        const message = frozenExportMessage({
          clusterId: cluster.id,
          membershipVersion: 0,
          replica: index,
          frozen: report.frozen,
          floor: report.floor,
          entries: report.entries,
        });
        const forged = { ...signed, signature: toHex(backend.sign(keyOf(other).secretKey, message).bytes) };
        expect(codeOf(() => readFrozenExport(forged, cluster, 'export.json'))).toBe('EXPORT_SIGNATURE_INVALID');
      }),
      { numRuns: 25 },
    );
  });

  it('an export signature is no grant partial: its message never begins like a grant message, and it verifies as none', async () => {
    const store = await storeWith(2, [['orders', 5, 0xa1]], true);
    const signed = signFrozenExport(store, cluster, keyOf(2));
    const report = readFrozenExport(JSON.parse(JSON.stringify(signed)), cluster, 'export.json');
    await store.close();
    const message = frozenExportMessage({ clusterId: cluster.id, membershipVersion: 0, ...report });
    expect(bytesEqual(message.subarray(0, GRANT_DOMAIN_TAG.length), GRANT_DOMAIN_TAG)).toBe(false);
    const signature = backend.decodeSignature(Buffer.from(signed.signature, 'hex'), 'signature');
    const grant = { clusterId: cluster.id, resource: 'orders', epoch: 5n, holder: new Uint8Array(32).fill(0xa1) };
    expect(backend.verify(cluster.replicas[1]!.publicKeyShare, grantMessage(grant), signature)).toBe(false);
    expect(backend.verify(cluster.replicas[1]!.publicKeyShare, message, signature)).toBe(true);
  });
});
