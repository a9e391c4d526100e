/**
 * S3 durable before visible, against a real replica process killed with
 * SIGKILL at random moments under load, and restarted each time.
 *
 * Each cycle: four holders pipeline acquires against the replica (racing for
 * the same epochs of a few hot resources, and taking fresh ones), the replica
 * is SIGKILLed after a random delay, and then, with the process dead, its
 * signing record is read from disk: every partial any client ever received
 * must be matched by the record (the same holder at that epoch, or a higher
 * epoch), no (resource, epoch) was ever signed for two holders, and no
 * watermark went down. After the last cycle the record is checked once more
 * through `quorumfence replica export`.
 *
 * Soak (about 1.4 s per kill): REPLICA_SOAK_KILLS=1000 npx vitest run test/integration/replica-crash.test.ts
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bytesEqual, toHex } from '../../src/common/bytes.js';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { grantMessage } from '../../src/token/grant.js';
import { SigningRecord } from '../../src/replica/signing-record.js';
import { newHolder, RawClient, type Holder } from '../support/raw-client.js';

// The issue asks for at least 50 kills in the test; the soak raises it.
const KILLS = Math.max(50, Number(process.env.REPLICA_SOAK_KILLS ?? 50));
/** A restart takes ~0.8 s here; budget 3 s per cycle so a loaded CI box still finishes. */
const TIMEOUT_MS = 60_000 + KILLS * 3_000;
const HOT = ['hot/a', 'hot/b', 'hot/c', 'hot/d'];
const PIPELINE = 8;

let root: string;
let local: LocalCluster;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'qf-replica-crash-'));
  dealLocalCluster(join(root, 'keys'));
  local = await startLocalCluster({
    newStores: true,
    dir: join(root, 'keys'),
    indices: [1],
    dataRoot: join(root, 'data'),
    // REPLICA_ENTRY runs the same loop against another build (e.g. a deliberately broken one, to see the test fail).
    ...(process.env.REPLICA_ENTRY ? { entry: process.env.REPLICA_ENTRY } : {}),
    // Short leases so hot resources change hands within a cycle, and restart leases (maxTtl) end quickly.
    extraArgs: ['--min-ttl', '10ms', '--max-ttl', '150ms', '--signing-workers', '1', '--max-in-flight', '64'],
  });
});

afterAll(async () => {
  await local?.close();
  rmSync(root, { recursive: true, force: true });
});

interface Received {
  resource: string;
  epoch: bigint;
  holder: Uint8Array;
  partial: Uint8Array;
}

/** Pipelines acquires until the connection dies; reports every granted partial. */
async function hammer(
  client: RawClient,
  cycle: number,
  known: Map<string, bigint>,
  onGrant: (r: Received) => void,
): Promise<void> {
  let fresh = 0;
  const worker = async (lane: number): Promise<void> => {
    for (;;) {
      const hot = Math.random() < 0.6;
      const resource = hot
        ? HOT[Math.floor(Math.random() * HOT.length)]!
        : `fresh/${cycle}/${toHex(client.holder!.publicKey).slice(0, 8)}/${lane}/${fresh++}`;
      // Everyone aims at the next epoch of a hot resource: maximal same-epoch contention.
      const epoch = hot ? (known.get(resource) ?? 0n) + 1n : 1n;
      let answer;
      try {
        answer = await client.acquire(resource, epoch, 10 + Math.floor(Math.random() * 40));
      } catch {
        return; // The replica died: this is the point of the test.
      }
      if ('error' in answer) continue;
      const o = answer.outcome;
      if (o.status === 'granted') onGrant({ resource, epoch, holder: client.holder!.publicKey, partial: o.partial });
      const seen = o.status === 'granted' ? epoch : 'epoch' in o ? o.epoch : 0n;
      if (seen > (known.get(resource) ?? 0n)) known.set(resource, seen);
    }
  };
  await Promise.all(Array.from({ length: PIPELINE }, (_, lane) => worker(lane)));
}

describe('S3 durable before visible', () => {
  it(
    `never loses a record whose partial left the process, over ${KILLS} SIGKILLs under load`,
    async () => {
      const replica = local.replica(1);
      const { cluster } = local;
      const holders: Holder[] = Array.from({ length: 4 }, () => newHolder());
      /** Every (resource, epoch) a client was ever granted, and to whom. */
      const granted = new Map<string, Received>();
      /** Granted since the last check. */
      let fresh: Received[] = [];
      /** The record seen at the last check: later checks need the same holder at an equal epoch, or a higher epoch. */
      const watermarks = new Map<string, { epoch: bigint; holder: Uint8Array }>();
      const known = new Map<string, bigint>();
      let totalGrants = 0;
      let sampled = 0;

      const violations: string[] = [];
      const check = async (): Promise<void> => {
        const store = SigningRecord.open(replica.dataDir, undefined, { readOnly: true, probe: false });
        try {
          // Every partial sent since the last check is matched by the record on disk.
          for (const { resource, epoch, holder } of fresh) {
            const record = store.get(resource);
            if (!record || record.epoch < epoch)
              violations.push(`${resource}: record ${record?.epoch} below a partial sent for epoch ${epoch}`);
            else if (record.epoch === epoch && !bytesEqual(record.holder, holder))
              violations.push(`${resource}@${epoch}: recorded holder differs from the one signed`);
          }
          fresh = [];
          // Earlier partials stay matched: no watermark goes down, and none changes holder at an equal epoch.
          for (const { resource, record } of store.entries()) {
            const before = watermarks.get(resource);
            if (
              before &&
              (record.epoch < before.epoch ||
                (record.epoch === before.epoch && !bytesEqual(record.holder, before.holder)))
            ) {
              violations.push(`${resource}: watermark went from ${before.epoch} to ${record.epoch}`);
            }
            watermarks.set(resource, { epoch: record.epoch, holder: record.holder });
          }
          for (const resource of watermarks.keys())
            if (store.get(resource) === undefined) violations.push(`${resource}: record vanished`);
        } finally {
          await store.close();
        }
        expect(violations).toEqual([]);
      };

      for (let cycle = 0; cycle < KILLS; cycle++) {
        const clients = await Promise.all(holders.map((h) => RawClient.open(replica.url, h)));
        const load = Promise.all(
          clients.map((c) =>
            hammer(c, cycle, known, (r) => {
              totalGrants++;
              const key = `${r.resource}|${r.epoch}`;
              const previous = granted.get(key);
              // S1 at one replica: one holder per (resource, epoch), and the same partial on every resend.
              if (previous) {
                expect(toHex(previous.holder)).toBe(toHex(r.holder));
                expect(toHex(previous.partial)).toBe(toHex(r.partial));
              }
              granted.set(key, r);
              fresh.push(r);
              // Verify a sample of partials with real crypto (each pairing costs ~1.5 ms).
              if (Math.random() < 0.05) {
                sampled++;
                const message = grantMessage({
                  clusterId: cluster.id,
                  resource: r.resource,
                  epoch: r.epoch,
                  holder: r.holder,
                });
                expect(
                  cluster.backend.verify(
                    cluster.replicas[0]!.publicKeyShare,
                    message,
                    cluster.backend.decodeSignature(r.partial),
                  ),
                ).toBe(true);
              }
            }),
          ),
        );
        await new Promise((r) => setTimeout(r, Math.random() * 200));
        await replica.kill('SIGKILL');
        await load;
        await Promise.all(clients.map((c) => c.closed));
        await check();
        await replica.restart();
      }

      // Once more through the export command, in its documented format.
      const exportPath = join(root, 'export.json');
      execFileSync(process.execPath, [
        join(process.cwd(), 'dist/nodes/quorumfence.js'),
        'replica',
        'export',
        '--data',
        replica.dataDir,
        '--out',
        exportPath,
      ]);
      const exported = JSON.parse(readFileSync(exportPath, 'utf8')) as {
        format: string;
        clusterId: string;
        replica: number;
        entries: { resource: string; epoch: string; holder: string }[];
      };
      expect(exported).toMatchObject({ format: 'quorumfence/signing-record/v2', clusterId: cluster.idHex, replica: 1 });
      const byResource = new Map(exported.entries.map((e) => [e.resource, e]));
      for (const { resource, epoch, holder } of granted.values()) {
        const entry = byResource.get(resource)!;
        expect(BigInt(entry.epoch) >= epoch).toBe(true);
        if (BigInt(entry.epoch) === epoch) expect(entry.holder).toBe(toHex(holder));
      }
      // The load must have been real, or the kills proved nothing.
      expect(totalGrants).toBeGreaterThan(KILLS * 5);
      expect(sampled).toBeGreaterThan(0);
    },
    TIMEOUT_MS,
  );
});
