/**
 * Convictions persist (issue 30, finding 8): a replica convicted by verified equivocation evidence stays
 * faulty, and its document downloadable, however much evidence arrives after it. The watcher keeps the newest
 * 64 items for the page and, apart from them, the first item that convicts each replica. Its client points at
 * replicas that do not exist, so every replica is unreachable: the verdict comes from the evidence alone.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { QuorumFenceClient } from '../../src/client/client.js';
import { EvidenceLog } from '../../src/client/evidence.js';
import { generateIdentity } from '../../src/client/identity.js';
import { withEndpoints } from '../../src/cluster/description.js';
import { toHex } from '../../src/common/bytes.js';
import { EVIDENCE_FORMAT } from '../../src/console/evidence-json.js';
import { ConsoleMetrics } from '../../src/console/metrics.js';
import { ConsoleWatcher } from '../../src/console/watcher.js';
import { loadBackend } from '../../src/crypto/load.js';
import type { Grant } from '../../src/token/grant.js';
import { dealCluster } from '../support/dealt-cluster.js';

const dealt = dealCluster(4, loadBackend());
// Port 1: nothing listens there, so every connection is refused at once.
const cluster = withEndpoints(
  dealt.cluster,
  [1, 2, 3, 4].map(() => 'ws://127.0.0.1:1'),
);
const grantJson = (g: Grant) => ({
  clusterId: toHex(g.clusterId),
  resource: g.resource,
  epoch: String(g.epoch),
  holder: toHex(g.holder),
});
/** Replica `signer`'s two signatures for two holders at one (resource, epoch). */
function equivocation(signer: number, resource: string, epoch: bigint) {
  const grant = (holder: number): Grant => ({
    clusterId: cluster.id,
    resource,
    epoch,
    holder: new Uint8Array(32).fill(holder),
  });
  return {
    format: EVIDENCE_FORMAT,
    replica: signer,
    observedAt: '2026-01-01T00:00:00.000Z',
    grant: grantJson(grant(1)),
    partial: toHex(dealt.partial(signer, grant(1)).bytes),
    conflicting: { grant: grantJson(grant(2)), partial: toHex(dealt.partial(signer, grant(2)).bytes) },
  };
}

let watcher: ConsoleWatcher | undefined;
let client: QuorumFenceClient | undefined;
afterEach(async () => {
  await watcher?.stop();
  await client?.close();
});

describe('convictions persist', () => {
  it('keeps replica 4 convicted, and its evidence downloadable, after 70 newer pieces of evidence against replica 1', async () => {
    const evidence = new EvidenceLog();
    client = new QuorumFenceClient(cluster, generateIdentity(), { evidenceLog: evidence });
    const metrics = new ConsoleMetrics(cluster.idHex);
    watcher = new ConsoleWatcher({ client, evidence, metrics, intervalMs: 100, timeoutMs: 200, watch: [] });
    const first = watcher.addEvidence(equivocation(4, 'orders', 7n));
    for (let epoch = 1n; epoch <= 70n; epoch++) watcher.addEvidence(equivocation(1, 'jobs', epoch));
    watcher.start();
    await expect.poll(() => watcher!.state.polls, { timeout: 10_000 }).toBeGreaterThan(0);
    const rows = watcher.state.replicas;
    expect(rows.map((r) => [r.replica, r.reachable, r.convicted])).toEqual([
      [1, false, true],
      [2, false, false],
      [3, false, false],
      [4, false, true],
    ]);
    expect(rows[3]!.faulty).toMatch(/verified equivocation evidence/);
    expect(watcher.evidenceDocument(first)?.replica).toBe(4);
    // The page lists the newest 64 and, before them, the first item that convicts each replica.
    const listed = watcher.state.evidence;
    expect(listed).toHaveLength(66);
    expect(listed.slice(0, 2)).toMatchObject([
      { id: first, replica: 4, downloadable: true },
      { id: first + 1, replica: 1, downloadable: true },
    ]);
    expect(await metrics.registry.getSingleMetricAsString('quorumfence_console_replica_faulty')).toMatch(
      /replica="4"[^}]*\} 1/,
    );
  }, 30_000);
});
