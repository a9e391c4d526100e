/**
 * What the console keeps under --data (issue 46 item 4): a restart keeps the history, the convictions, the evidence
 * and its counts, and the alert timers; a store of another cluster or format is refused with its code; what is kept is
 * bounded, and what does not read is left out. The watcher's client points at replicas that do not exist (port 1:
 * refused at once), so every replica is down and the verdicts come from the evidence alone.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { QuorumFenceClient } from '../../src/client/client.js';
import { EvidenceLog } from '../../src/client/evidence.js';
import { generateIdentity } from '../../src/client/identity.js';
import { withEndpoints } from '../../src/cluster/description.js';
import { toHex } from '../../src/common/bytes.js';
import { AlertEvaluator, FOR_OUTAGE_TOLERANCE_MS, type AlertCondition } from '../../src/console/alerts.js';
import { ConsoleStore } from '../../src/console/console-store.js';
import { EVIDENCE_FORMAT } from '../../src/console/evidence-json.js';
import { EvidenceStore } from '../../src/console/evidence-store.js';
import { HISTORY_BUCKET_MS, HISTORY_WINDOW_MS, RollingHistory } from '../../src/console/history.js';
import { ConsoleMetrics } from '../../src/console/metrics.js';
import { ConsoleWatcher } from '../../src/console/watcher.js';
import { loadBackend } from '../../src/crypto/load.js';
import type { Grant } from '../../src/token/grant.js';
import { dealCluster } from '../support/dealt-cluster.js';
import { open } from 'lmdb';
import { isQuorumFenceError } from '../../src/common/errors.js';

async function codeOfAsync(fn: () => Promise<unknown>): Promise<string | undefined> {
  try {
    await fn();
  } catch (error) {
    return isQuorumFenceError(error) ? error.code : `not a QuorumFenceError: ${String(error)}`;
  }
  return undefined;
}

const dealt = dealCluster(4, loadBackend());
const cluster = withEndpoints(
  dealt.cluster,
  [1, 2, 3, 4].map(() => 'ws://127.0.0.1:1'),
);
const root = mkdtempSync(join(tmpdir(), 'qf-console-store-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const grantJson = (g: Grant) => ({
  clusterId: toHex(g.clusterId),
  resource: g.resource,
  epoch: String(g.epoch),
  holder: toHex(g.holder),
});
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

const running: { watcher: ConsoleWatcher; client: QuorumFenceClient; store: ConsoleStore }[] = [];
afterEach(async () => {
  for (const r of running.splice(0)) {
    await r.watcher.stop();
    await r.client.close();
    await r.store.close();
  }
});

async function startConsole(dir: string) {
  const store = await ConsoleStore.open(dir, cluster);
  const evidence = new EvidenceLog();
  const client = new QuorumFenceClient(cluster, generateIdentity(), { evidenceLog: evidence });
  const metrics = new ConsoleMetrics(cluster.idHex);
  const watcher = new ConsoleWatcher({ client, evidence, metrics, intervalMs: 100, timeoutMs: 200, watch: [], store });
  const handle = { watcher, client, store, metrics };
  running.push(handle);
  return handle;
}

async function stop(handle: Awaited<ReturnType<typeof startConsole>>) {
  running.splice(running.indexOf(handle), 1);
  await handle.watcher.stop();
  await handle.client.close();
  await handle.store.close();
}

describe('the console store (--data)', () => {
  it('keeps the history, convictions, evidence and its count, and the alert timers across a restart', async () => {
    const dir = join(root, 'restart');
    const first = await startConsole(dir);
    const id = first.watcher.addEvidence(equivocation(4, 'orders', 7n));
    first.watcher.start();
    await expect.poll(() => first.watcher.state.polls, { timeout: 10_000 }).toBeGreaterThanOrEqual(3);
    const before = first.watcher.state;
    const pendingSince = before.alerts.find((a) => a.alert === 'QuorumFenceQuorumMarginExhausted')!.instances[0]!.since;
    expect(before.history.points.length).toBeGreaterThan(0);
    await stop(first);

    const second = await startConsole(dir);
    // Before its first poll, the page already has the past.
    const restored = second.watcher.state;
    expect(restored.persistence.restoredFrom).not.toBeNull();
    // (A poll may have ended after `before` was read, adding a bucket: the earlier ones come first.)
    const earlier = before.history.points.map((p) => p.at);
    expect(restored.history.points.map((p) => p.at).slice(0, earlier.length)).toEqual(earlier);
    expect(restored.evidence.map((e) => [e.id, e.kind, e.replica])).toEqual([[id, 'equivocation', 4]]);
    expect(second.watcher.evidenceDocument(id)).toMatchObject({ format: EVIDENCE_FORMAT, replica: 4 });
    // The counter the evidence alert reads starts where it was.
    expect(await second.metrics.registry.getSingleMetricAsString('quorumfence_console_evidence_total')).toMatch(
      /kind="equivocation"[^}]*\} 1/,
    );
    second.watcher.start();
    await expect.poll(() => second.watcher.state.polls, { timeout: 10_000 }).toBeGreaterThan(0);
    const after = second.watcher.state;
    expect(after.replicas[3]!.faulty).toMatch(/verified equivocation evidence/);
    expect(after.alerts.find((a) => a.alert === 'QuorumFenceReplicaFaulty')!.state).toBe('firing');
    // The margin alert's `for` goes on from when it began, not from the restart.
    const margin = after.alerts.find((a) => a.alert === 'QuorumFenceQuorumMarginExhausted')!;
    expect(margin.instances[0]!.since).toBe(pendingSince);
    // The earlier points are still there, the new ones after them.
    expect(after.history.points[0]!.at).toBe(before.history.points[0]!.at);
    expect(after.history.dataSince).toBe(before.history.points[0]!.at);
  }, 30_000);

  it('refuses a store of another cluster (CLUSTER_MISMATCH) and a folder of another format (UNKNOWN_VERSION)', async () => {
    const dir = join(root, 'other');
    const other = dealCluster(4, loadBackend()).cluster;
    await (await ConsoleStore.open(dir, other)).close();
    expect(await codeOfAsync(() => ConsoleStore.open(dir, cluster))).toBe('CLUSTER_MISMATCH');
    // Refused, and nothing changed: the store still opens for its own cluster.
    await (await ConsoleStore.open(dir, other)).close();
    const notAFolder = join(root, 'a-file');
    writeFileSync(notAFolder, 'x');
    expect(await codeOfAsync(() => ConsoleStore.open(notAFolder, cluster))).toBe('IO_ERROR');
    // An LMDB folder some other program wrote: not taken for a console store.
    const foreign = join(root, 'foreign');
    const env = open({ path: foreign, maxDbs: 2 });
    await env.openDB<unknown, string>('console', { encoding: 'json' }).put('meta', { format: 'something/else' });
    await env.close();
    expect(await codeOfAsync(() => ConsoleStore.open(foreign, cluster))).toBe('UNKNOWN_VERSION');
  });

  it('drops alert timers after an outage longer than Prometheus’s tolerance, and history older than its window', () => {
    const rule: AlertCondition = {
      alert: 'A',
      severity: 'warning',
      forMs: 60_000,
      holds: () => [{ labels: {}, value: 1 }],
    };
    const input = (at: number) => ({
      at,
      margin: 0,
      t: 3,
      metricsUp: new Map(),
      thresholdKnown: true,
      evidenceByKind: {},
      faulty: new Map(),
      samples: new Map(),
    });
    const kept = new AlertEvaluator([rule]);
    kept.restoreTimers([['A\u0000[]', 1_000]], 2_000, 2_000 + FOR_OUTAGE_TOLERANCE_MS);
    expect(kept.evaluate(input(2_000 + FOR_OUTAGE_TOLERANCE_MS))[0]!.state).toBe('firing');
    const dropped = new AlertEvaluator([rule]);
    dropped.restoreTimers([['A\u0000[]', 1_000]], 2_000, 2_001 + FOR_OUTAGE_TOLERANCE_MS);
    expect(dropped.evaluate(input(2_001 + FOR_OUTAGE_TOLERANCE_MS))[0]!.state).toBe('pending');

    const history = new RollingHistory();
    const now = 1_000 * HISTORY_WINDOW_MS;
    const bucket = (start: number) => ({ start, margin: 1, polls: 1, grantsSum: 0, grantsPolls: 0, refusalsSum: [] });
    const stored = Array.from({ length: 400 }, (_, k) => bucket(now - (400 - k) * HISTORY_BUCKET_MS));
    history.restore([...stored, { ...bucket(now), polls: 'x' as unknown as number }], now);
    // 180 buckets at most (the window), the malformed one left out.
    expect(history.points()).toHaveLength(HISTORY_WINDOW_MS / HISTORY_BUCKET_MS - 1);
  });

  it('leaves out evidence that does not read, and convicts nobody on a tampered equivocation (negative case)', () => {
    const store = new EvidenceStore(cluster);
    const good = equivocation(4, 'orders', 7n);
    const tampered = { ...equivocation(3, 'orders', 8n), partial: good.partial };
    const observation = {
      format: 'quorumfence/console-observation/v1',
      clusterId: cluster.idHex,
      replica: 2,
      kind: 'protocol',
      reason: 'broke the protocol: a text frame',
      observedAt: '2026-01-01T00:00:00.000Z',
      observed: { message: 'a text frame' },
    };
    const result = store.restore({
      nextId: 9,
      items: [
        { id: 1, document: good },
        { id: 2, document: tampered },
        { id: 3, document: observation },
        { id: 4, document: { ...observation, clusterId: '00'.repeat(32) } },
        { id: 5, document: 'junk' },
      ],
    });
    expect(result).toEqual({ restored: 2, skipped: 3 });
    expect(store.rows().map((r) => [r.id, r.kind, r.replica, r.transferable])).toEqual([
      [1, 'equivocation', 4, true],
      [3, 'protocol', 2, false],
    ]);
    expect(store.stored().nextId).toBe(9);
  });
});
