/**
 * Issue 30, findings 1 and 2, against real replicas: one authenticated client splits a resource's records (and, by
 * compaction, the replicas' floors) so that no epoch could gather 2f+1 grants under the old step rule. Under the
 * epoch-step rule (docs/protocol.md, "Epoch steps") the finding's own frames are refused, and the widest split the
 * attacker can still make (replicas pushed ahead with its own partials as evidence, or one replica alone while
 * another is down) is crossed by an honest client's acquire: it catches the laggards up with its partials.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { QuorumFenceClient, generateIdentity } from '../../src/client/index.js';
import { openSessions, type RawReplicaSession } from '../../src/testing/byzantine-clients.js';
import type { GrantEvidence } from '../../src/protocol/messages.js';

/** Small steps so the attack's widest splits take a few hundred grants, not millions. */
const FREE_STEP = 4n;
const MAX_STEP = 100n;

let dir: string;
let defaults: LocalCluster;
let small: LocalCluster;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'qf-epoch-lockout-'));
  dealLocalCluster(join(dir, 'defaults'), 4);
  dealLocalCluster(join(dir, 'small'), 4);
  [defaults, small] = await Promise.all([
    startLocalCluster({
      newStores: true,
      dir: join(dir, 'defaults'),
      dataRoot: join(dir, 'defaults-data'),
      extraArgs: ['--signing-workers', '0'],
    }),
    startLocalCluster({
      newStores: true,
      dir: join(dir, 'small'),
      dataRoot: join(dir, 'small-data'),
      extraArgs: [
        '--signing-workers',
        '0',
        '--free-epoch-step',
        String(FREE_STEP),
        '--max-epoch-step',
        String(MAX_STEP),
        '--retention',
        '200ms',
        '--compaction-interval',
        '100ms',
        '--min-ttl',
        '100ms',
      ],
    }),
  ]);
});

afterAll(async () => {
  await Promise.all([defaults?.close(), small?.close()]);
  rmSync(dir, { recursive: true, force: true });
});

type Sessions = Map<number, RawReplicaSession>;

/** Mallory's acquire at some replicas, with evidence; the partials of the grants it got, as evidence for more. */
async function grantAt(
  sessions: Sessions,
  replicas: readonly number[],
  resource: string,
  epoch: bigint,
  evidence: readonly GrantEvidence[] = [],
): Promise<GrantEvidence[]> {
  const won: GrantEvidence[] = [];
  for (const index of replicas) {
    const body = { type: 'acquire', resource, epoch, ttlMs: 100, ...(evidence.length ? { evidence } : {}) } as const;
    const answer = await sessions.get(index)!.request(body);
    if ('outcome' in answer && answer.outcome.status === 'granted')
      won.push({ replica: index, epoch, partial: answer.outcome.partial });
  }
  return won;
}

async function epochsOf(sessions: Sessions, resource: string): Promise<bigint[]> {
  const epochs: bigint[] = [];
  for (const index of [1, 2, 3, 4]) {
    const answer = await sessions.get(index)!.request({ type: 'status', resource });
    epochs.push('outcome' in answer && answer.outcome.status === 'ok' ? answer.outcome.epoch : -1n);
  }
  return epochs;
}

/**
 * Pushes `replicas` ahead together: each grant goes at the free step above the first one's record, and the others
 * follow it with its partial as evidence (within maxEpochStep), until they are `ahead` above where they started.
 */
async function pushAhead(sessions: Sessions, replicas: readonly number[], resource: string, ahead: bigint) {
  const [first, ...rest] = replicas;
  const start = (await epochsOf(sessions, resource)).reduce((a, b) => (a > b ? a : b));
  let epoch = start;
  while (epoch < start + ahead) {
    epoch += FREE_STEP;
    const evidence = await grantAt(sessions, [first!], resource, epoch);
    expect(evidence).toHaveLength(1);
    expect(await grantAt(sessions, rest, resource, epoch, evidence)).toHaveLength(rest.length);
    for (const index of replicas) await sessions.get(index)!.request({ type: 'release', resource, epoch });
  }
  return epoch;
}

describe('finding 1: one client cannot lock a resource out', () => {
  it('one replica pushed ahead alone while another is down: the acquire goes above it and brings the others up in steps', async () => {
    const mallory = await openSessions(small.cluster, generateIdentity());
    const alice = await QuorumFenceClient.connect(small.cluster, generateIdentity(), { maxEpochStep: MAX_STEP });
    try {
      const resource = 'orders/lone';
      // The first test on this cluster: every replica starts at 0.
      const start = await epochsOf(mallory, resource);
      let epoch = start[0]!;
      // Alone, without evidence, one replica moves at most the free step per grant.
      for (let i = 0; i < 40; i++) {
        epoch += FREE_STEP;
        expect(await grantAt(mallory, [1], resource, epoch)).toHaveLength(1);
        await mallory.get(1)!.request({ type: 'release', resource, epoch });
      }
      expect(await grantAt(mallory, [1], resource, epoch + FREE_STEP + 1n)).toEqual([]);
      expect(await epochsOf(mallory, resource)).toEqual([epoch, ...start.slice(1)]);
      expect(epoch - start[1]!).toBeGreaterThan(MAX_STEP);
      await small.replica(4).kill('SIGSTOP');
      try {
        const acquired = await alice.acquire(resource, { ttlMs: 2_000, timeoutMs: 10_000 });
        expect(acquired.ok, acquired.ok ? '' : acquired.message).toBe(true);
        if (!acquired.ok) return;
        expect(acquired.lease.epoch > epoch).toBe(true);
        await acquired.lease.release();
      } finally {
        await small.replica(4).kill('SIGCONT');
      }
    } finally {
      for (const session of mallory.values()) session.close();
      await alice.close();
    }
  });

  it("the finding's frames (record + 10^6, then + 2·10^6 at two replicas) are refused, and the resource stays acquirable", async () => {
    const mallory = await openSessions(defaults.cluster, generateIdentity());
    const alice = await QuorumFenceClient.connect(defaults.cluster, generateIdentity());
    try {
      const resource = 'orders/101';
      const first = await alice.acquire(resource, { ttlMs: 1_000 });
      expect(first.ok).toBe(true);
      // Confirmed before Mallory's frames, so they are refused by the epoch steps and not by Alice's lease.
      if (first.ok) await first.lease.release({ wait: true });
      const before = await epochsOf(mallory, resource);
      const record = before.reduce((a, b) => (a > b ? a : b));
      expect(await grantAt(mallory, [1, 2], resource, record! + 1_000_000n)).toEqual([]);
      expect(await grantAt(mallory, [1, 2], resource, record! + 2_000_000n)).toEqual([]);
      for (const index of [1, 2])
        await mallory.get(index)!.request({ type: 'release', resource, epoch: record! + 2_000_000n });
      // Under the old rule the statuses ended 2000001, 2000001, 1, 1 and no epoch could gather three grants.
      expect(await epochsOf(mallory, resource)).toEqual(before);
      const again = await alice.acquire(resource, { ttlMs: 1_000 });
      expect(again.ok).toBe(true);
      if (again.ok) await again.lease.release();
    } finally {
      for (const session of mallory.values()) session.close();
      await alice.close();
    }
  });

  // Two retries: in two CI runs the first replica refused one of the pushing grants on a loaded machine (pushAhead's
  // first check), before anything this test claims was reached; not yet explained. A refusal three times in a row
  // still fails it.
  it(
    'two replicas pushed far ahead with its own partials: an honest acquire catches the others up with f+1 partials',
    { retry: 2 },
    async () => {
      const mallory = await openSessions(small.cluster, generateIdentity());
      const alice = await QuorumFenceClient.connect(small.cluster, generateIdentity(), { maxEpochStep: MAX_STEP });
      try {
        const resource = 'orders/split';
        const top = await pushAhead(mallory, [1, 2], resource, 3n * MAX_STEP);
        const split = await epochsOf(mallory, resource);
        expect(split.slice(0, 2)).toEqual([top, top]);
        // More than a catch-up step apart: under the old rule (steps from each replica's own record) no epoch above
        // replicas 1 and 2 is within reach of 3 and 4.
        for (const lagging of split.slice(2))
          expect(lagging + MAX_STEP, `epochs ${split.join(', ')}`).toBeLessThan(top);
        const acquired = await alice.acquire(resource, { ttlMs: 2_000 });
        expect(acquired.ok, acquired.ok ? '' : acquired.message).toBe(true);
        if (!acquired.ok) return;
        expect(acquired.lease.epoch > top).toBe(true);
        await acquired.lease.release();
      } finally {
        for (const session of mallory.values()) session.close();
        await alice.close();
      }
    },
  );
});

describe('finding 2: one client cannot lock out every new resource through the floor', () => {
  it('floors split by a throwaway name pushed ahead and compacted: a new name is still acquired', async () => {
    const mallory = await openSessions(small.cluster, generateIdentity());
    const alice = await QuorumFenceClient.connect(small.cluster, generateIdentity(), { maxEpochStep: MAX_STEP });
    try {
      // Let the earlier tests' records reach the floors first (retention 200 ms, compaction every 100 ms).
      let settled = await epochsOf(mallory, 'never/seen');
      for (let calm = 0, reads = 0; calm < 3 && reads < 100; reads++) {
        await new Promise((r) => setTimeout(r, 150));
        const now = await epochsOf(mallory, 'never/seen');
        calm = now.every((epoch, i) => epoch === settled[i]) ? calm + 1 : 0;
        settled = now;
      }
      const top = await pushAhead(mallory, [1, 2], 'tmp/throwaway', 3n * MAX_STEP);
      // Compaction folds the released record into the floor of replicas 1 and 2 only.
      const deadline = Date.now() + 30_000;
      let floors = await epochsOf(mallory, 'never/seen');
      while ((floors[0]! < top || floors[1]! < top) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 100));
        floors = await epochsOf(mallory, 'never/seen');
      }
      expect(floors[0]).toBeGreaterThanOrEqual(top);
      expect(floors[1]).toBeGreaterThanOrEqual(top);
      expect(floors[2]! + 2n * MAX_STEP).toBeLessThan(top);
      expect(floors[3]! + 2n * MAX_STEP).toBeLessThan(top);
      const acquired = await alice.acquire('fresh/name', { ttlMs: 2_000 });
      expect(acquired.ok, acquired.ok ? '' : acquired.message).toBe(true);
      if (acquired.ok) await acquired.lease.release();
    } finally {
      for (const session of mallory.values()) session.close();
      await alice.close();
    }
  });
});
