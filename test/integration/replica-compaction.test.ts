/**
 * Compaction in a real replica process (issue 18): with a short retention
 * and interval, records of ended leases are folded into the floor on the
 * replica's own timer; a compacted resource (and any never-signed one) is
 * refused at or below the floor with the floor in the answer, so the next
 * attempt succeeds at once; the floor survives a SIGKILL and restart, and a
 * running lease is never compacted.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dealLocalCluster, startLocalCluster } from '../../src/cluster/launcher.js';
import { outcomeOf, RawClient } from '../support/raw-client.js';

let root: string;
let keys: string;

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'qf-replica-compaction-'));
  keys = join(root, 'keys');
  dealLocalCluster(keys);
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** Polls `check` every 100 ms for at most `ms`. */
async function eventually(check: () => Promise<boolean>, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return check();
}

describe('S2 across compaction in a replica process', () => {
  it('folds ended leases into the floor, refuses at or below it with the floor, keeps running leases, and keeps the floor across SIGKILL', async () => {
    const local = await startLocalCluster({
      newStores: true,
      dir: keys,
      indices: [1],
      dataRoot: join(root, 'data'),
      extraArgs: ['--min-ttl', '50ms', '--max-ttl', '5s', '--retention', '200ms', '--compaction-interval', '200ms'],
    });
    try {
      const replica = local.replica(1);
      const alice = await RawClient.open(replica.url);
      const bob = await RawClient.open(replica.url);
      expect(outcomeOf(await alice.acquire('orders/1', 7n, 50)).status).toBe('granted');
      expect(outcomeOf(await alice.acquire('orders/held', 2n, 5_000)).status).toBe('granted');
      // orders/1's lease ends after 50 ms; after the retention, compaction folds epoch 7 into the floor.
      const compacted = await eventually(
        async () => outcomeOf(await bob.acquire('orders/new', 1n, 50)).status === 'stale',
        10_000,
      );
      expect(compacted).toBe(true);
      expect(outcomeOf(await bob.acquire('orders/new', 1n, 50))).toEqual({ status: 'stale', epoch: 7n, floor: 7n });
      // Alice's compacted grant is not signed again, for her or anyone.
      expect(outcomeOf(await alice.acquire('orders/1', 7n, 50))).toEqual({ status: 'stale', epoch: 7n, floor: 7n });
      expect(outcomeOf(await bob.acquire('orders/1', 7n, 50))).toEqual({ status: 'stale', epoch: 7n, floor: 7n });
      // A long lease, so this grant is never compacted while the test runs: with 50 ms, a slow machine folded
      // epoch 8 into the floor before the metrics were read.
      expect(outcomeOf(await bob.acquire('orders/1', 8n, 5_000)).status).toBe('granted');
      // The lease alice holds (renewed) is not compacted: bob is told it is busy, at its own epoch.
      expect(outcomeOf(await alice.renew('orders/held', 2n, 5_000)).status).toBe('renewed');
      expect(outcomeOf(await bob.acquire('orders/held', 3n, 50))).toMatchObject({ status: 'busy', epoch: 2n });
      await alice.close();
      await bob.close();
      const metrics = await (await fetch(replica.healthUrl.replace(/\/healthz$/, '/metrics'))).text();
      expect(metrics).toMatch(/^quorumfence_replica_epoch_floor\{[^}]*\} 7$/m);
      expect(metrics).toMatch(/^quorumfence_replica_compacted_records_total\{[^}]*\} [1-9]/m);

      await replica.kill('SIGKILL');
      await replica.start();
      const carol = await RawClient.open(replica.url);
      expect(outcomeOf(await carol.status('orders/never'))).toMatchObject({ epoch: 7n, leased: false });
      expect(outcomeOf(await carol.acquire('orders/never', 8n, 50)).status).toBe('granted');
      await carol.close();
    } finally {
      await local.close();
    }
  }, 60_000);
});
