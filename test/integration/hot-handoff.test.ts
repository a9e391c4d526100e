/**
 * Fair hot handoffs (docs/protocol.md, Hot handoffs): an acquire that finds the resource held and may wait is
 * kept by the replica in arrival order and answered when its turn comes (a release, or the lease running out),
 * at the resource's next epoch if it asked for that. Real replica processes and sockets; the SDK test checks
 * that waiters through the client get the lease in the order they asked.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { QuorumFenceClient } from '../../src/client/client.js';
import { generateIdentity } from '../../src/client/identity.js';
import { leaderOf } from '../../src/client/signer-choice.js';
import { decodeServerMessage, encodeMessage } from '../../src/protocol/codec.js';
import { verifyToken } from '../../src/token/admission-token.js';
import { outcomeOf, RawClient } from '../support/raw-client.js';
import { untilAllReady } from '../support/connected.js';

const root = mkdtempSync(join(tmpdir(), 'qf-handoff-'));
let local: LocalCluster;

beforeAll(async () => {
  dealLocalCluster(join(root, 'keys'), 4);
  local = await startLocalCluster({ newStores: true, dir: join(root, 'keys'), dataRoot: join(root, 'data') });
});
afterAll(async () => {
  await local?.close();
  rmSync(root, { recursive: true, force: true });
});

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One sample of replica `index`'s /metrics named `name` (with `labels` among its labels); 0 when absent. */
async function metric(index: number, name: string, labels = ''): Promise<number> {
  const text = await (await fetch(local.replica(index).healthUrl.replace('/healthz', '/metrics'))).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(labels));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

const lineWaiters = (index: number) => metric(index, 'quorumfence_replica_line_waiters');

/** The epoch of the last turn notice `client` was pushed (undefined: none), reading its inbox to the end. */
async function lastTurn(client: RawClient): Promise<bigint | undefined> {
  let epoch: bigint | undefined;
  for (let k = 0; k < 100; k++) {
    const pushed = await client.next(200).catch(() => undefined);
    if (!pushed || !('message' in pushed)) return epoch;
    if (pushed.message.type === 'turn') epoch = pushed.message.epoch;
  }
  return epoch;
}

/** How many acquires left replica `index`'s lines by their turn, and with their wait over first. */
async function lineExits(index: number): Promise<{ turn: number; expired: number }> {
  return {
    turn: await metric(index, 'quorumfence_replica_line_exits_total', 'how="turn"'),
    expired: await metric(index, 'quorumfence_replica_line_exits_total', 'how="expired"'),
  };
}

/** Waits until `condition` holds, checking every 50 ms, at most 20 s. */
async function until(condition: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 400; i++) {
    if (await condition()) return;
    await pause(50);
  }
  throw new Error('condition not met within 20 s');
}

/** Resolves to the order in which `promises` settled (their indices). */
function settleOrder(promises: readonly Promise<unknown>[]): { order: number[]; all: Promise<unknown[]> } {
  const order: number[] = [];
  const all = Promise.all(promises.map((p, k) => p.finally(() => order.push(k))));
  return { order, all };
}

describe('a replica keeps waiting acquires in arrival order', () => {
  it('answers them one per release, in the order they came, each at the next epoch', async () => {
    const url = local.replica(1).url;
    const holder = await RawClient.open(url);
    const waiters = await Promise.all([RawClient.open(url), RawClient.open(url), RawClient.open(url)]);
    try {
      expect(outcomeOf(await holder.acquire('line/r', 1n, 30_000)).status).toBe('granted');
      const pending: Promise<ReturnType<typeof outcomeOf<'acquire'>>>[] = [];
      for (const waiter of waiters) {
        // All ask for epoch 2; the line hands out 2, 3, 4.
        pending.push(waiter.acquireInLine('line/r', 2n, { waitMs: 20_000, nextEpoch: true }).then(outcomeOf));
        await pause(50); // arrival order
      }
      const { order } = settleOrder(pending);
      // The first in line hears which epoch its turn will grant, so it can ask the other replicas for it now.
      expect(await waiters[0]!.next(2_000)).toEqual({ message: { type: 'turn', resource: 'line/r', epoch: 2n } });
      await pause(100);
      expect(order).toEqual([]); // nobody is answered while the lease runs
      expect(outcomeOf(await holder.release('line/r', 1n)).status).toBe('released');
      const first = await pending[0]!;
      expect(first).toMatchObject({ status: 'granted', epoch: 2n });
      await pause(100);
      expect(order).toEqual([0]); // the others wait for the lease the first one now holds
      expect(await waiters[1]!.next(2_000)).toEqual({ message: { type: 'turn', resource: 'line/r', epoch: 3n } });
      expect(outcomeOf(await waiters[0]!.release('line/r', 2n)).status).toBe('released');
      expect(await pending[1]!).toMatchObject({ status: 'granted', epoch: 3n });
      expect(outcomeOf(await waiters[1]!.release('line/r', 3n)).status).toBe('released');
      expect(await pending[2]!).toMatchObject({ status: 'granted', epoch: 4n });
      expect(order).toEqual([0, 1, 2]);
    } finally {
      await Promise.all([holder.close(), ...waiters.map((w) => w.close())]);
    }
  });

  it('a lease that runs out hands over without any release', async () => {
    const url = local.replica(2).url;
    const [holder, waiter] = await Promise.all([RawClient.open(url), RawClient.open(url)]);
    try {
      expect(outcomeOf(await holder.acquire('line/expiry', 1n, 300)).status).toBe('granted');
      const started = performance.now();
      const answer = outcomeOf(await waiter.acquireInLine('line/expiry', 2n, { waitMs: 10_000 }));
      expect(answer.status).toBe('granted');
      // Strict epoch: no nextEpoch asked, so the answer names none.
      expect(answer).not.toHaveProperty('epoch');
      expect(performance.now() - started).toBeGreaterThanOrEqual(200);
    } finally {
      await Promise.all([holder.close(), waiter.close()]);
    }
  });

  it('a waiter whose wait is over gets busy; one whose connection closed leaves the line to the next', async () => {
    const url = local.replica(3).url;
    const [holder, impatient, gone, patient] = await Promise.all([
      RawClient.open(url),
      RawClient.open(url),
      RawClient.open(url),
      RawClient.open(url),
    ]);
    try {
      expect(outcomeOf(await holder.acquire('line/leave', 1n, 30_000)).status).toBe('granted');
      const busy = outcomeOf(await impatient.acquireInLine('line/leave', 2n, { waitMs: 200, nextEpoch: true }));
      expect(busy).toMatchObject({ status: 'busy', epoch: 1n });
      void gone.acquireInLine('line/leave', 2n, { waitMs: 20_000, nextEpoch: true }).catch(() => undefined);
      await pause(50);
      const later = patient.acquireInLine('line/leave', 2n, { waitMs: 20_000, nextEpoch: true }).then(outcomeOf);
      await pause(50);
      await gone.close();
      await pause(50);
      expect(outcomeOf(await holder.release('line/leave', 1n)).status).toBe('released');
      // Granted the epoch it was told: the epochs told to those ahead of it, who left, are not given again (their
      // requests may wait at other signers), so it is above 2 (docs/protocol.md, "Lines (hot handoffs)").
      const granted = await later;
      expect(granted).toMatchObject({ status: 'granted' });
      const told = await lastTurn(patient);
      expect(told).toBeGreaterThan(2n);
      expect((granted as { epoch?: bigint }).epoch).toBe(told);
    } finally {
      await Promise.all([holder.close(), impatient.close(), patient.close()]);
    }
  });

  it("a release withdraws the same holder's waiting acquire, so a given-up attempt never becomes a lease", async () => {
    const url = local.replica(2).url;
    const [holder, waiter, next] = await Promise.all([RawClient.open(url), RawClient.open(url), RawClient.open(url)]);
    try {
      expect(outcomeOf(await holder.acquire('line/withdraw', 1n, 30_000)).status).toBe('granted');
      const withdrawn = waiter.acquireInLine('line/withdraw', 2n, { waitMs: 20_000 }).then(outcomeOf);
      await pause(50);
      const patient = next.acquireInLine('line/withdraw', 2n, { waitMs: 20_000, nextEpoch: true }).then(outcomeOf);
      await pause(50);
      expect(outcomeOf(await waiter.release('line/withdraw', 2n)).status).toBe('not_holder');
      expect(await withdrawn).toMatchObject({ status: 'busy' });
      expect(outcomeOf(await holder.release('line/withdraw', 1n)).status).toBe('released');
      // Its epoch is the one it was told, behind the withdrawn waiter's (fixed at 2, before it in the line).
      const granted = await patient;
      expect(granted).toMatchObject({ status: 'granted' });
      expect((granted as { epoch?: bigint }).epoch).toBe(await lastTurn(next));
    } finally {
      await Promise.all([holder.close(), waiter.close(), next.close()]);
    }
  });

  it('the turn notice has exactly { v, type: turn, resource, epoch >= 1 }', () => {
    const notice = { type: 'turn', resource: 'r', epoch: 3n } as const;
    expect(decodeServerMessage(encodeMessage(notice))).toEqual(notice);
    for (const bad of [
      { ...notice, extra: 1 },
      { ...notice, epoch: 0n },
      { type: 'turn', resource: 'r' },
    ])
      expect(() => decodeServerMessage(encodeMessage(bad as never))).toThrow(
        expect.objectContaining({ code: 'PROTOCOL_ERROR' }),
      );
  });

  it('a malformed wait is a protocol error that closes the connection and changes nothing', async () => {
    const url = local.replica(4).url;
    for (const bad of [{ waitMs: -1 }, { waitMs: 'soon' }, { waitMs: 1.5 }, { waitMs: 100, nextEpoch: 'yes' }]) {
      const client = await RawClient.open(url);
      client.send({
        type: 'acquire',
        id: client.nextId(),
        resource: 'line/bad',
        epoch: 1n,
        ttlMs: 1_000,
        ...bad,
      } as never);
      const next = await client.next(5_000);
      expect(next).toMatchObject({ closed: { code: 1002 } });
    }
    const probe = await RawClient.open(url);
    try {
      expect(outcomeOf(await probe.status('line/bad'))).toMatchObject({ status: 'ok', epoch: 0n });
    } finally {
      await probe.close();
    }
  });
});

describe('SDK waiters on a held resource', () => {
  it('get the lease in the order they asked, each with a token that verifies', async () => {
    const clients = await Promise.all(
      Array.from({ length: 4 }, () => QuorumFenceClient.connect(local.cluster, generateIdentity())),
    );
    // The leader's line is the point: every client connected to every replica before it asks (see untilAllReady).
    for (const client of clients) expect(await untilAllReady(client)).toEqual(['ready', 'ready', 'ready', 'ready']);
    try {
      const [holder, ...waiting] = clients;
      // Contention is what sends a client to the leader's line: the first acquire of each waiter finds it held.
      const held = await holder!.acquire('line/sdk', { ttlMs: 30_000 });
      expect(held.ok).toBe(true);
      if (!held.ok) return;
      const acquired: Promise<Awaited<ReturnType<QuorumFenceClient['acquire']>>>[] = [];
      for (const client of waiting) {
        acquired.push(client.acquire('line/sdk', { ttlMs: 30_000, waitMs: 25_000, timeoutMs: 30_000 }));
        await pause(300); // each has found it busy and taken its place before the next asks
      }
      const { order } = settleOrder(acquired);
      await held.lease.release();
      const epochs: bigint[] = [];
      for (const k of [0, 1, 2]) {
        const result = await acquired[k]!;
        expect(
          result.ok,
          JSON.stringify(result, (_, v) => (typeof v === 'bigint' ? String(v) : v)),
        ).toBe(true);
        if (!result.ok) return;
        expect(verifyToken(result.lease.token, local.cluster).ok).toBe(true);
        epochs.push(result.lease.token.grant.epoch);
        await result.lease.release();
      }
      expect(order).toEqual([0, 1, 2]);
      expect(epochs[0]! < epochs[1]! && epochs[1]! < epochs[2]!).toBe(true);
      expect(epochs[0]! > held.lease.token.grant.epoch).toBe(true);
    } finally {
      await Promise.all(clients.map((c) => c.close()));
    }
  });

  // Two retries: on a loaded two-core machine this failed in about one CI run of three (a client served one turn
  // late). Clients then sometimes disagree for an instant about which replica leads the line (they judge the
  // leader by its answer times, docs/protocol.md, "Slow replicas"); issue 42 keeps that open. Order lost three times
  // in a row still fails the test.
  it(
    'hot clients that acquire and release at once, with no write, are served in rotation by their turns',
    { retry: 2 },
    async () => {
      // Each client releases the moment it holds the lease and asks again at once: the case that lost the line to
      // leases nobody held (an attempt's late grants), newcomers granted ahead of the line, waiters sent back
      // `stale` again and again, and a lost turn sending its waiter to polling (issue 13).
      const resource = 'line/hot-no-write';
      const leader = leaderOf(resource, 4);
      const waiters = 6;
      const rounds = 5;
      const clients = await Promise.all(
        Array.from({ length: waiters + 1 }, () => QuorumFenceClient.connect(local.cluster, generateIdentity())),
      );
      // The leader's line is the point: every client connected to every replica before it asks (see untilAllReady).
      for (const client of clients) expect(await untilAllReady(client)).toEqual(['ready', 'ready', 'ready', 'ready']);
      const before = await Promise.all([1, 2, 3, 4].map((i) => lineExits(i)));
      try {
        const [holder, ...hot] = clients;
        const held = await holder!.acquire(resource, { ttlMs: 60_000 });
        expect(held.ok).toBe(true);
        if (!held.ok) return;
        // Long leases and waits: a lost lease or a missed turn is not cured by a lease running out within the test.
        const options = { ttlMs: 60_000, waitMs: 60_000, timeoutMs: 90_000 } as const;
        const served: number[] = [];
        const epochs: bigint[] = [];
        const failures: string[] = [];
        const loops: Promise<void>[] = [];
        for (const [k, client] of hot.entries()) {
          loops.push(
            (async () => {
              for (let round = 0; round < rounds; round++) {
                const result = await client.acquire(resource, options);
                if (!result.ok) {
                  failures.push(`client ${k}: ${result.reason} ${result.message}`);
                  return;
                }
                served.push(k);
                epochs.push(result.lease.token.grant.epoch);
                if (!verifyToken(result.lease.token, local.cluster).ok) failures.push(`client ${k}: token fails`);
                // The last release is confirmed: the status read below comes from another client.
                await result.lease.release({ wait: round === rounds - 1 });
              }
            })(),
          );
          // Arrival order: the next client asks only once this one waits in the leader's line.
          await until(async () => (await lineWaiters(leader)) >= k + 1);
        }
        await held.lease.release();
        await Promise.all(loops);
        expect(failures).toEqual([]);
        // Each one that releases goes to the back of the line: 0, 1, ..., 5, 0, 1, ... and nobody overtakes.
        expect(served).toEqual(Array.from({ length: waiters * rounds }, (_, i) => i % waiters));
        for (let i = 1; i < epochs.length; i++) expect(epochs[i]! > epochs[i - 1]!).toBe(true);
        // No waiter, at the leader or in the others' lines, waited out its wait before its turn came.
        const after = await Promise.all([1, 2, 3, 4].map((i) => lineExits(i)));
        expect(after.map((exits, i) => exits.expired - before[i]!.expired)).toEqual([0, 0, 0, 0]);
        expect(after[leader - 1]!.turn).toBeGreaterThan(before[leader - 1]!.turn);
        // Nothing left behind: no replica keeps a lease on the resource once everyone released.
        const status = await holder!.status(resource);
        expect(status.replicas.map((view) => (view.state === 'ok' ? view.leased : view.state))).toEqual([
          false,
          false,
          false,
          false,
        ]);
      } finally {
        await Promise.all(clients.map((c) => c.close()));
      }
    },
  );

  it('a leader that goes silent while keeping a waiter costs it at most the turn wait, not the lease', async () => {
    const resource = 'line/silent-leader';
    const leader = local.replica(leaderOf(resource, 4));
    const clients = await Promise.all(
      Array.from({ length: 2 }, () => QuorumFenceClient.connect(local.cluster, generateIdentity())),
    );
    // The leader's line is the point: every client connected to every replica before it asks (see untilAllReady).
    for (const client of clients) expect(await untilAllReady(client)).toEqual(['ready', 'ready', 'ready', 'ready']);
    try {
      const [holder, waiter] = clients;
      const held = await holder!.acquire(resource, { ttlMs: 60_000 });
      expect(held.ok).toBe(true);
      if (!held.ok) return;
      const started = performance.now();
      const waiting = waiter!.acquire(resource, { ttlMs: 30_000, waitMs: 40_000, timeoutMs: 45_000 });
      await pause(300); // in the leader's line by now
      await leader.kill('SIGSTOP');
      await held.lease.release();
      const result = await waiting;
      expect(result.ok).toBe(true);
      // The turn wait is at most 5 s; far below the 60 s lease a waiter would otherwise sit out.
      expect(performance.now() - started).toBeLessThan(20_000);
      if (result.ok) await result.lease.release();
    } finally {
      await leader.kill('SIGCONT');
      await Promise.all(clients.map((c) => c.close()));
    }
  });
});
