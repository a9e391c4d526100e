/**
 * Issue 43, finding 2: the evidence-check budget was per connection, so one identity with 64 connections, each
 * within its 32 checks a second, sent acquires at a far epoch carrying random G2 points as catch-up evidence: an
 * honest catch-up acquire from another identity then took 8-20 s instead of milliseconds, and stayed slow after
 * the flood. Now the budget is per identity (all its connections together) and for the whole replica, checks wait
 * in a bounded queue, and the cheapest checks come first (none when the evidence could not be enough, no more than
 * the decision needs). Real replica processes over real sockets; the flood at one replica, the honest catch-up at
 * that same replica during the flood and after it.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { loadBackend } from '../../src/crypto/load.js';
import { parseOutcome } from '../../src/protocol/codec.js';
import type { AcquireOutcome, GrantEvidence } from '../../src/protocol/messages.js';
import { dealCluster } from '../support/dealt-cluster.js';
import { newHolder, outcomeOf, RawClient, type Holder } from '../support/raw-client.js';

const root = mkdtempSync(join(tmpdir(), 'qf-finding43-2-'));
let local: LocalCluster;
const clients: RawClient[] = [];

beforeAll(async () => {
  dealLocalCluster(join(root, 'keys'));
  local = await startLocalCluster({ newStores: true, dir: join(root, 'keys'), dataRoot: join(root, 'data') });
}, 60_000);

afterAll(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close().catch(() => undefined)));
  await local?.close();
  rmSync(root, { recursive: true, force: true });
});

async function open(replica: number, holder: Holder): Promise<RawClient> {
  const client = await RawClient.open(local.replica(replica).url, holder);
  clients.push(client);
  return client;
}

/** An acquire carrying catch-up evidence, answered (or an error frame's code). */
async function acquireWithEvidence(
  client: RawClient,
  resource: string,
  epoch: bigint,
  evidence: readonly GrantEvidence[],
): Promise<AcquireOutcome | string> {
  const answer = await client.exchange(
    { type: 'acquire', id: client.nextId(), resource, epoch, ttlMs: 5_000, evidence: [...evidence] },
    60_000,
  );
  if (answer.type === 'error') return answer.code;
  if (answer.type !== 'reply') throw new Error(`unexpected ${answer.type}`);
  return parseOutcome('acquire', answer.outcome);
}

/** The CPU seconds a process has used so far (user + system), from /proc. */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/**
 * Puts replicas 1 and 2 at epoch 181 of `resource` for `honest` (free steps from 1), replicas 3 and 4 at 1, and
 * returns 1's and 2's partials at 181: the evidence that lets replica 3 catch up (181 is beyond its free step).
 */
async function replicasApart(honest: Holder, resource: string): Promise<GrantEvidence[]> {
  const evidence: GrantEvidence[] = [];
  for (const replica of [1, 2, 3, 4]) {
    const client = await open(replica, honest);
    expect(outcomeOf(await client.acquire(resource, 1n))).toMatchObject({ status: 'granted' });
    if (replica > 2) continue;
    for (const epoch of [61n, 121n]) expect(outcomeOf(await client.acquire(resource, epoch)).status).toBe('granted');
    const last = outcomeOf(await client.acquire(resource, 181n));
    if (last.status !== 'granted') throw new Error(`replica ${replica}: ${last.status}`);
    evidence.push({ replica, epoch: 181n, partial: last.partial });
  }
  return evidence;
}

describe('finding 43/2: an identity flooding catch-up evidence does not starve another identity', () => {
  it(
    '64 connections of one identity sending random G2 evidence at replica 3: an honest catch-up there is answered promptly during the flood and after it',
    { timeout: 120_000 },
    async () => {
      const honest = newHolder();
      const duringEvidence = await replicasApart(honest, 'catch-up/during');
      const afterEvidence = await replicasApart(honest, 'catch-up/after');
      const target = local.replica(3);
      const honestAt3 = await open(3, honest);
      // Alone, for comparison: a fresh resource apart the same way.
      const baselineEvidence = await replicasApart(honest, 'catch-up/baseline');
      let started = performance.now();
      expect(await acquireWithEvidence(honestAt3, 'catch-up/baseline', 181n, baselineEvidence)).toMatchObject({
        status: 'granted',
      });
      const alone = performance.now() - started;

      // Points in the subgroup that are no partial of this cluster: another cluster's signatures.
      const backend = loadBackend();
      const stranger = dealCluster(4, backend);
      const points = Array.from(
        { length: 64 },
        (_, k) =>
          stranger.partial(1 + (k % 4), {
            clusterId: stranger.cluster.id,
            resource: `x${k}`,
            epoch: 1n,
            holder: honest.publicKey,
          }).bytes,
      );
      const flooder = newHolder();
      const floods = await Promise.all(Array.from({ length: 64 }, () => open(3, flooder)));
      let sent = 0;
      const cpuBefore = cpuSeconds(target.pid);
      const floodStarted = performance.now();
      // Each connection: 6 acquires a second, each with three random points (replicas 1, 2 and 4) at an epoch far
      // beyond the floor, so each needs f+1 verified partials: 18 checks a second, within the per-connection budget
      // (32), over 1,100 a second in all, more than a core verifies. Before the fix the queue of checks grew for as
      // long as the flood lasted (an honest catch-up took 25-28 s here, during the flood and after it).
      const timers = floods.map((client, c) =>
        setInterval(() => {
          const epoch = 5_000_000n + BigInt(sent++);
          const evidence = [1, 2, 4].map((replica, k) => ({ replica, epoch, partial: points[(c + k + sent) % 64]! }));
          client.send({ type: 'acquire', id: client.nextId(), resource: `flood/${c}`, epoch, ttlMs: 5_000, evidence });
        }, 170),
      );
      let during: number;
      let cpuDuring: number;
      try {
        await new Promise((r) => setTimeout(r, 4_000));
        started = performance.now();
        const answer = await acquireWithEvidence(honestAt3, 'catch-up/during', 181n, duringEvidence);
        during = performance.now() - started;
        expect(answer).toMatchObject({ status: 'granted' });
        await new Promise((r) => setTimeout(r, 2_000));
        cpuDuring = (cpuSeconds(target.pid) - cpuBefore) / ((performance.now() - floodStarted) / 1000);
      } finally {
        for (const timer of timers) clearInterval(timer);
      }
      await new Promise((r) => setTimeout(r, 1_000));
      started = performance.now();
      expect(await acquireWithEvidence(honestAt3, 'catch-up/after', 181n, afterEvidence)).toMatchObject({
        status: 'granted',
      });
      const after = performance.now() - started;
      console.log(
        `catch-up at replica 3: alone ${alone.toFixed(0)} ms, during the flood ${during.toFixed(0)} ms, ` +
          `after it ${after.toFixed(0)} ms; replica 3 CPU during the flood ${(cpuDuring * 100).toFixed(0)} % ` +
          `(${sent} flood acquires)`,
      );
      expect(sent).toBeGreaterThan(1_500);
      expect(during).toBeLessThan(2_000);
      expect(after).toBeLessThan(1_000);
    },
  );
});
