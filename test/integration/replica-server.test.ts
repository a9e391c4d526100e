/**
 * One real replica process on a real socket: the replica rules end to end,
 * authentication, access rules, health and metrics, and concurrent acquires.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { grantMessage } from '../../src/token/grant.js';
import { CloseCode } from '../../src/protocol/messages.js';
import { PACKAGE_VERSION } from '../../src/common/version.js';
import { startOneReplica, type OneReplica } from '../support/one-replica.js';
import { helloFor, newHolder, outcomeOf, RawClient, type Holder } from '../support/raw-client.js';

let replica: OneReplica;
let root: string;
let local: LocalCluster;
let url: string;
const forbiddenHolder = newHolder();

beforeAll(async () => {
  replica = await startOneReplica('qf-replica-server', new Map([[forbiddenHolder.publicKey, ['sandbox/']]]), [
    '--min-ttl',
    '50ms',
    '--max-ttl',
    '5s',
    '--signing-workers',
    '1',
  ]);
  ({ root, local, url } = replica);
});

afterAll(async () => {
  await replica?.close();
});

function verifyPartial(resource: string, epoch: bigint, holder: Holder, partial: Uint8Array): boolean {
  const { cluster } = local;
  const message = grantMessage({ clusterId: cluster.id, resource, epoch, holder: holder.publicKey });
  return cluster.backend.verify(cluster.replicas[0]!.publicKeyShare, message, cluster.backend.decodeSignature(partial));
}

describe('replica process', () => {
  it('answers /healthz with its identity and /metrics in Prometheus text', async () => {
    const health = await fetch(local.replica(1).healthUrl);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({
      status: 'ok',
      replica: 1,
      clusterId: local.cluster.idHex,
      backend: 'blst',
      version: PACKAGE_VERSION,
      lastError: null,
    });
    const metrics = await (await fetch(url.replace('ws', 'http') + '/metrics')).text();
    for (const name of [
      'quorumfence_replica_grants_signed_total',
      'quorumfence_replica_refusals_total',
      'quorumfence_replica_sign_seconds',
      'quorumfence_replica_flush_seconds',
      'quorumfence_replica_active_leases',
      'quorumfence_replica_connections',
    ]) {
      expect(metrics).toContain(name);
    }
    // n and t from the cluster description (4 replicas, f = 1): Prometheus computes the quorum margin from them.
    expect(metrics).toMatch(/^quorumfence_replica_cluster_replicas\{[^}]*\} 4$/m);
    expect(metrics).toMatch(/^quorumfence_replica_cluster_threshold\{[^}]*\} 3$/m);
  });
});

describe('S2 monotonic signing (replica rules over the wire)', () => {
  it('grants a verifiable partial, resends the identical one, and refuses stale, busy, too_far and invalid', async () => {
    const alice = await RawClient.open(url);
    const bob = await RawClient.open(url);
    try {
      const first = outcomeOf(await alice.acquire('orders/1', 1n, 2_000));
      expect(first.status).toBe('granted');
      if (first.status !== 'granted') return;
      expect(verifyPartial('orders/1', 1n, alice.holder!, first.partial)).toBe(true);

      const again = outcomeOf(await alice.acquire('orders/1', 1n, 2_000));
      expect(again).toEqual(first);

      expect(outcomeOf(await bob.acquire('orders/1', 1n))).toEqual({ status: 'stale', epoch: 1n });
      const busy = outcomeOf(await bob.acquire('orders/1', 2n));
      expect(busy.status).toBe('busy');
      expect(busy).toMatchObject({ epoch: 1n });
      expect(outcomeOf(await alice.acquire('orders/1', 5_000_000n))).toEqual({ status: 'too_far', epoch: 1n });
      expect(outcomeOf(await alice.acquire('orders/1', 0n)).status).toBe('invalid');
      expect(outcomeOf(await alice.acquire('orders/1', 2n, 10)).status).toBe('invalid');
      expect(outcomeOf(await alice.acquire('x'.repeat(257), 2n)).status).toBe('invalid');
      expect(outcomeOf(await alice.acquire('', 2n)).status).toBe('invalid');
    } finally {
      await alice.close();
      await bob.close();
    }
  });

  it('renews and releases only for the recorded holder; after a release another holder is granted at once', async () => {
    const alice = await RawClient.open(url);
    const bob = await RawClient.open(url);
    try {
      expect(outcomeOf(await bob.status('jobs/7'))).toEqual({ status: 'ok', epoch: 0n, leased: false, remainingMs: 0 });
      expect(outcomeOf(await alice.acquire('jobs/7', 3n, 3_000)).status).toBe('granted');
      const status = outcomeOf(await bob.status('jobs/7'));
      expect(status).toMatchObject({ status: 'ok', epoch: 3n, leased: true });
      expect(outcomeOf(await alice.renew('jobs/7', 3n, 4_000))).toMatchObject({ status: 'renewed' });
      expect(outcomeOf(await bob.renew('jobs/7', 3n))).toEqual({ status: 'not_holder', epoch: 3n });
      expect(outcomeOf(await alice.renew('jobs/7', 2n))).toEqual({ status: 'not_holder', epoch: 3n });
      expect(outcomeOf(await bob.release('jobs/7', 3n))).toEqual({ status: 'not_holder', epoch: 3n });
      expect(outcomeOf(await alice.release('jobs/7', 3n))).toEqual({ status: 'released' });
      expect(outcomeOf(await alice.release('jobs/7', 3n))).toEqual({ status: 'released' });
      expect(outcomeOf(await alice.renew('jobs/7', 3n))).toEqual({ status: 'not_holder', epoch: 3n });
      expect(outcomeOf(await bob.status('jobs/7'))).toEqual({ status: 'ok', epoch: 3n, leased: false, remainingMs: 0 });
      const granted = outcomeOf(await bob.acquire('jobs/7', 4n));
      expect(granted.status).toBe('granted');
      if (granted.status === 'granted') expect(verifyPartial('jobs/7', 4n, bob.holder!, granted.partial)).toBe(true);
    } finally {
      await alice.close();
      await bob.close();
    }
  });

  it('acts on a quiet release and sends no reply to it; refuses "quiet" other than true (PROTOCOL_ERROR)', async () => {
    const alice = await RawClient.open(url);
    const bob = await RawClient.open(url);
    try {
      expect(outcomeOf(await alice.acquire('jobs/quiet', 3n, 3_000)).status).toBe('granted');
      // Bob's quiet release of Alice's lease changes nothing (not the holder); Alice's ends it.
      bob.send({ type: 'release', id: bob.nextId(), resource: 'jobs/quiet', epoch: 3n, quiet: true });
      expect(outcomeOf(await bob.status('jobs/quiet'))).toMatchObject({ leased: true });
      alice.send({ type: 'release', id: alice.nextId(), resource: 'jobs/quiet', epoch: 3n, quiet: true });
      // Frames on one connection are handled in order: the status after it sees the lease ended.
      expect(outcomeOf(await alice.status('jobs/quiet'))).toMatchObject({ leased: false });
      expect(outcomeOf(await bob.acquire('jobs/quiet', 4n)).status).toBe('granted');
      // No reply came for either quiet release. Bob, told the lease was running, heard of its end as a watcher does.
      expect(await bob.next()).toEqual({ message: { type: 'released', resource: 'jobs/quiet' } });
      await expect(alice.next(200)).rejects.toThrow('nothing arrived');
      await expect(bob.next(200)).rejects.toThrow('nothing arrived');

      alice.send({ type: 'release', id: alice.nextId(), resource: 'jobs/quiet', epoch: 4n, quiet: false } as never);
      expect(await alice.next()).toEqual({ closed: expect.objectContaining({ code: CloseCode.PROTOCOL_ERROR }) });
    } finally {
      await alice.close();
      await bob.close();
    }
  });

  it('lets a lease run out on the replica clock, then grants another holder', async () => {
    const alice = await RawClient.open(url);
    const bob = await RawClient.open(url);
    try {
      expect(outcomeOf(await alice.acquire('short/1', 1n, 60)).status).toBe('granted');
      await new Promise((r) => setTimeout(r, 120));
      expect(outcomeOf(await bob.acquire('short/1', 2n, 60)).status).toBe('granted');
    } finally {
      await alice.close();
      await bob.close();
    }
  });
});

describe('authentication and access: unauthenticated and unauthorised clients never receive a partial', () => {
  it('answers a request before hello with UNAUTHENTICATED and closes with 1008', async () => {
    const client = await RawClient.connect(url);
    client.send({ type: 'acquire', id: 9, resource: 'orders/unauth', epoch: 1n, ttlMs: 1_000 });
    const first = await client.next();
    expect(first).toMatchObject({ message: { type: 'error', id: 9, code: 'UNAUTHENTICATED' } });
    expect(await client.closed).toMatchObject({ code: CloseCode.POLICY_VIOLATION });
  });

  it('closes with 1008 on a bad signature, a replayed hello, and a hello meant for another replica', async () => {
    const holder = newHolder();
    const earlier = await RawClient.connect(url);
    const replayed = helloFor(holder, earlier.challenge);
    await earlier.close();

    const cases = [
      (c: RawClient) => ({ ...helloFor(holder, c.challenge), signature: new Uint8Array(64) }),
      () => replayed,
      (c: RawClient) => helloFor(holder, { ...c.challenge, replica: 2 }),
      (c: RawClient) => helloFor(holder, { ...c.challenge, clusterId: new Uint8Array(32) }),
      (c: RawClient) => ({ ...helloFor(holder, c.challenge), holder: newHolder().publicKey }),
    ];
    for (const make of cases) {
      const client = await RawClient.connect(url);
      client.send(make(client));
      const event = await client.next();
      expect(event).toEqual({ closed: expect.objectContaining({ code: CloseCode.POLICY_VIOLATION }) });
    }
  });

  it('refuses a second hello on an authenticated connection with 1002', async () => {
    const client = await RawClient.open(url);
    client.send(helloFor(client.holder!, client.challenge, client.nextId()));
    expect(await client.next()).toEqual({ closed: expect.objectContaining({ code: CloseCode.PROTOCOL_ERROR }) });
  });

  it('answers forbidden outside the holder prefixes, and grants inside them', async () => {
    const client = await RawClient.open(url, forbiddenHolder);
    try {
      for (const resource of ['orders/1', 'orders/forbidden', 'jobs/x']) {
        expect(outcomeOf(await client.acquire(resource, 1n))).toEqual({ status: 'forbidden' });
        expect(outcomeOf(await client.status(resource))).toEqual({ status: 'forbidden' });
      }
      expect(outcomeOf(await client.acquire('sandbox/1', 1n)).status).toBe('granted');
    } finally {
      await client.close();
    }
  });
});

describe("leases (the console's read-only request)", () => {
  it('lists running leases with holder and epoch, only those the asker may access, and drops released ones', async () => {
    const alice = await RawClient.open(url);
    const sandboxed = await RawClient.open(url, forbiddenHolder);
    try {
      expect(outcomeOf(await alice.acquire('leases/a', 1n, 4_000)).status).toBe('granted');
      const listed = outcomeOf(await alice.leases());
      expect(listed.status).toBe('leases');
      if (listed.status !== 'leases') return;
      const mine = listed.leases.find((l) => l.resource === 'leases/a');
      expect(mine).toMatchObject({ epoch: 1n, holder: alice.holder!.publicKey });
      expect(mine!.remainingMs).toBeGreaterThan(0);
      expect(mine!.remainingMs).toBeLessThanOrEqual(4_000);
      // The access rules apply: a holder limited to sandbox/ sees nothing else.
      const limited = outcomeOf(await sandboxed.leases());
      expect(limited.status === 'leases' && limited.leases.every((l) => l.resource.startsWith('sandbox/'))).toBe(true);
      expect(outcomeOf(await alice.request({ type: 'release', resource: 'leases/a', epoch: 1n })).status).toBe(
        'released',
      );
      const after = outcomeOf(await alice.leases());
      expect(after.status === 'leases' && after.leases.some((l) => l.resource === 'leases/a')).toBe(false);
    } finally {
      await alice.close();
      await sandboxed.close();
    }
  });

  it('answers invalid for a limit outside 1..32 and keeps the connection; the limit bounds the list', async () => {
    const alice = await RawClient.open(url);
    try {
      expect(outcomeOf(await alice.leases(0))).toMatchObject({ status: 'invalid' });
      expect(outcomeOf(await alice.leases(33))).toMatchObject({ status: 'invalid' });
      for (const k of [1, 2, 3])
        expect(outcomeOf(await alice.acquire(`leases/many-${k}`, 1n, 3_000)).status).toBe('granted');
      const one = outcomeOf(await alice.leases(1));
      expect(one).toMatchObject({ status: 'leases', more: true });
      expect(one.status === 'leases' && one.leases.length).toBe(1);
    } finally {
      await alice.close();
    }
  });
});

describe('wire limits', () => {
  it('answers requests over the in-flight bound or the rate with RATE_LIMITED and keeps the connection', async () => {
    const limited = await startLocalCluster({
      newStores: true,
      dir: join(root, 'keys'),
      indices: [2],
      dataRoot: join(root, 'data-limited'),
      extraArgs: ['--rate-limit', '10', '--max-in-flight', '4'],
    });
    try {
      const client = await RawClient.open(limited.replica(2).url);
      const answers = await Promise.all(Array.from({ length: 30 }, (_, k) => client.acquire(`limited/${k}`, 1n)));
      const limitedCount = answers.filter((a) => 'error' in a && a.error.code === 'RATE_LIMITED').length;
      const granted = answers.filter((a) => 'outcome' in a && a.outcome.status === 'granted').length;
      expect(limitedCount + granted).toBe(30);
      expect(granted).toBeGreaterThanOrEqual(1);
      expect(granted).toBeLessThanOrEqual(10);
      // The bucket refills at 10/s: the same connection works again.
      await new Promise((r) => setTimeout(r, 300));
      expect(outcomeOf(await client.status('limited/0')).status).toBe('ok');
      const metrics = await (await fetch(limited.replica(2).healthUrl.replace('/healthz', '/metrics'))).text();
      expect(metrics).toMatch(/quorumfence_replica_wire_errors_total\{code="RATE_LIMITED"[^}]*\} [1-9]/);
      await client.close();
    } finally {
      await limited.close();
    }
  });

  it('takes a quiet release on a connection whose in-flight slots are full: it holds none', async () => {
    const limited = await startLocalCluster({
      newStores: true,
      dir: join(root, 'keys'),
      indices: [3],
      dataRoot: join(root, 'data-one-slot'),
      extraArgs: ['--max-in-flight', '1'],
    });
    const alice = await RawClient.open(limited.replica(3).url);
    const bob = await RawClient.open(limited.replica(3).url);
    try {
      expect(outcomeOf(await alice.acquire('slots/held', 1n, 5_000)).status).toBe('granted');
      expect(outcomeOf(await bob.acquire('slots/mine', 1n, 5_000)).status).toBe('granted');
      // Bob's one slot: an acquire waiting in the line for Alice's lease.
      const waiting = bob.acquireInLine('slots/held', 2n, { waitMs: 4_000 });
      await new Promise((r) => setTimeout(r, 100));
      const refused = await bob.status('slots/mine');
      expect('error' in refused && refused.error.code).toBe('RATE_LIMITED');
      bob.send({ type: 'release', id: bob.nextId(), resource: 'slots/mine', epoch: 1n, quiet: true });
      expect(outcomeOf(await alice.status('slots/mine'))).toMatchObject({ leased: false });
      // Nothing about the quiet release came back (a refusal would have: an error frame names its id).
      await expect(bob.next(200)).rejects.toThrow('nothing arrived');
      expect(outcomeOf(await alice.release('slots/held', 1n)).status).toBe('released');
      expect(outcomeOf(await waiting).status).toBe('granted');
    } finally {
      await alice.close();
      await bob.close();
      await limited.close();
    }
  });

  it('counts grants and refusals by reason in /metrics', async () => {
    const metrics = await (await fetch(url.replace('ws', 'http') + '/metrics')).text();
    expect(metrics).toMatch(/quorumfence_replica_grants_signed_total\{kind="new"[^}]*\} [1-9]/);
    expect(metrics).toMatch(/quorumfence_replica_grants_signed_total\{kind="resend"[^}]*\} [1-9]/);
    for (const reason of ['stale', 'busy', 'too_far', 'invalid', 'forbidden', 'not_holder']) {
      expect(metrics).toMatch(new RegExp(`quorumfence_replica_refusals_total\\{reason="${reason}"[^}]*\\} [1-9]`));
    }
    expect(metrics).toMatch(/quorumfence_replica_flush_seconds_count\{[^}]*\} [1-9]/);
    expect(metrics).toMatch(/quorumfence_replica_sign_seconds_count\{[^}]*\} [1-9]/);
  });
});

describe('S1 uniqueness at one replica: concurrent acquires', () => {
  it('signs exactly one of many holders racing for the same (resource, epoch)', async () => {
    const clients = await Promise.all(Array.from({ length: 24 }, () => RawClient.open(url)));
    try {
      for (let round = 0; round < 8; round++) {
        const resource = `race/${round}`;
        const epoch = BigInt(round + 1);
        const answers = await Promise.all(clients.map((c) => c.acquire(resource, epoch, 5_000)));
        const outcomes = answers.map(outcomeOf);
        const granted = outcomes.flatMap((o, k) => (o.status === 'granted' ? [{ k, partial: o.partial }] : []));
        expect(granted).toHaveLength(1);
        expect(verifyPartial(resource, epoch, clients[granted[0]!.k]!.holder!, granted[0]!.partial)).toBe(true);
        for (const o of outcomes) if (o.status !== 'granted') expect(o).toEqual({ status: 'stale', epoch });
      }
      // Racing at increasing epochs on one resource: each epoch granted at most once, and never lower than one granted before.
      const resource = 'race/ladder';
      const grants = new Map<bigint, number>();
      await Promise.all(
        clients.map(async (c, k) => {
          for (let e = 1n; e <= 6n; e++) {
            const o = outcomeOf(await c.acquire(resource, e, 50));
            if (o.status === 'granted') {
              expect(grants.has(e)).toBe(false);
              grants.set(e, k);
            }
          }
        }),
      );
      expect(grants.size).toBeGreaterThan(0);
    } finally {
      await Promise.all(clients.map((c) => c.close()));
    }
  });
});
