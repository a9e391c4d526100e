/**
 * Leases against real replica processes (N = 4): S1 under racing holders,
 * handover after expiry and after release, automatic renewal, and the
 * holder's own view ending before the replicas' leases do.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toHex } from '../../src/common/bytes.js';
import { withEndpoints } from '../../src/cluster/description.js';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { QuorumFenceClient, type ClientConstructionOptions } from '../../src/client/client.js';
import { EvidenceLog } from '../../src/client/evidence.js';
import { generateIdentity } from '../../src/client/identity.js';
import type { LeaseEnd } from '../../src/client/lease.js';
import { startFaultProxy, type FaultProxy } from '../../src/testing/fault-proxy.js';
import { verifyToken, type AdmissionToken } from '../../src/token/admission-token.js';

let dir: string;
let local: LocalCluster | undefined;
const clients: QuorumFenceClient[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'qf-client-leases-'));
  dealLocalCluster(join(dir, 'keys'), 4);
  local = await startLocalCluster({ newStores: true, dir: join(dir, 'keys'), dataRoot: join(dir, 'data') });
}, 60_000);

afterAll(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
  await local?.close();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

async function newClient(options: ClientConstructionOptions = {}): Promise<QuorumFenceClient> {
  const client = await QuorumFenceClient.connect(local!.cluster, generateIdentity(), options);
  clients.push(client);
  return client;
}

describe('S1 uniqueness: two holders racing for one resource', () => {
  it('never get two valid tokens for one epoch, and every token verifies', async () => {
    // One evidence log for both clients: a replica that signed both holders at one epoch would show up here.
    const evidenceLog = new EvidenceLog();
    const a = await newClient({ evidenceLog, busyPollMs: 5 });
    const b = await newClient({ evidenceLog, busyPollMs: 5 });
    const tokens: AdmissionToken[] = [];
    const started = performance.now();
    // 40 rounds of both asking at once: enough to see split votes and handovers, within a few seconds.
    for (let round = 0; round < 40 && performance.now() - started < 30_000; round++) {
      await Promise.all(
        [a, b].map(async (client) => {
          const result = await client.acquire('race', { ttlMs: 2000, waitMs: 5000 });
          expect(result.ok, JSON.stringify(!result.ok && result)).toBe(true);
          if (!result.ok) return;
          tokens.push(result.lease.token);
          await result.lease.release();
        }),
      );
    }
    expect(tokens.length).toBeGreaterThanOrEqual(80);
    const byEpoch = new Map<bigint, string>();
    for (const token of tokens) {
      expect(verifyToken(token, local!.cluster).ok).toBe(true);
      const holder = toHex(token.grant.holder);
      const seen = byEpoch.get(token.grant.epoch);
      // S1: at most one holder per (resource, epoch).
      if (seen !== undefined) expect(seen).toBe(holder);
      byEpoch.set(token.grant.epoch, holder);
    }
    // Each acquire got its own epoch (a holder never reuses one after releasing it).
    expect(byEpoch.size).toBe(tokens.length);
    expect(evidenceLog.list()).toEqual([]);
  }, 60_000);
});

describe('One client, many leases', () => {
  it('concurrent acquires beyond the per-connection bound wait their turn instead of failing', async () => {
    const client = await newClient({ maxInFlightPerReplica: 4 });
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, k) => client.acquire(`many/${k}`, { ttlMs: 5000 })),
    );
    expect(results.filter((r) => !r.ok)).toEqual([]);
    expect(client.leases()).toHaveLength(40);
    const released = await Promise.all(results.map(async (r) => (r.ok ? r.lease.release() : undefined)));
    expect(released.every((r) => r?.ok)).toBe(true);
  });
});

describe('Reconnection: a restarted replica is used again', () => {
  it('works with one replica down, reconnects to it after its restart, then works with another one down', async () => {
    const client = await newClient({ reconnectMaxMs: 200 });
    await local!.replica(1).kill('SIGKILL');
    const during = await client.acquire('reconnect/a', { ttlMs: 5000 });
    expect(during.ok).toBe(true);
    await local!.replica(1).restart();
    const started = performance.now();
    while (client.replicas()[0]!.state.phase !== 'ready' && performance.now() - started < 10_000)
      await new Promise((r) => setTimeout(r, 20));
    expect(client.replicas()[0]!.state.phase).toBe('ready');
    await local!.replica(2).kill('SIGKILL');
    try {
      const after = await client.acquire('reconnect/b', { ttlMs: 5000 });
      expect(after.ok).toBe(true);
      if (after.ok) expect(after.lease.signers).toContain(1);
    } finally {
      await local!.replica(2).restart();
    }
    if (during.ok) await during.lease.release();
  }, 60_000);
});

describe('Lease handover', () => {
  it('a holder that stops renewing loses the lease after its ttl; the next holder gets a larger epoch', async () => {
    const first = await newClient();
    const second = await newClient();
    const ttlMs = 600;
    const acquiredAt = performance.now();
    const held = await first.acquire('stops-renewing', { ttlMs, autoRenew: false });
    expect(held.ok).toBe(true);
    if (!held.ok) return;
    const lost = new Promise<{ end: LeaseEnd; at: number }>((resolve) =>
      held.lease.once('lost', (end) => resolve({ end, at: performance.now() })),
    );

    const blocked = await second.acquire('stops-renewing', { ttlMs });
    expect(blocked.ok === false && blocked.reason).toBe('busy');

    const next = await second.acquire('stops-renewing', { ttlMs, waitMs: 5000 });
    const nextAt = performance.now();
    expect(next.ok).toBe(true);
    if (!next.ok) return;
    expect(next.lease.epoch).toBeGreaterThan(held.lease.epoch);
    // The replicas let the second holder in only once the ttl ran out there...
    expect(nextAt - acquiredAt).toBeGreaterThanOrEqual(ttlMs - 5);
    // ...and the first holder's own view had ended before that.
    const { end, at } = await lost;
    expect(end.reason).toBe('expired');
    expect(at).toBeLessThanOrEqual(nextAt);
    expect(held.lease.signal.aborted).toBe(true);
    expect((held.lease.signal.reason as { code?: string }).code).toBe('LEASE_LOST');
    await next.lease.release();
  });

  it('a holder that releases lets the next one in at once', async () => {
    const first = await newClient();
    const second = await newClient({ busyPollMs: 10 });
    const held = await first.acquire('releases', { ttlMs: 30_000 });
    expect(held.ok).toBe(true);
    if (!held.ok) return;
    const waiting = second.acquire('releases', { ttlMs: 30_000, waitMs: 10_000 });
    await new Promise((r) => setTimeout(r, 100));
    const releasedAt = performance.now();
    const released = await held.lease.release();
    expect(released.ok).toBe(true);
    const next = await waiting;
    expect(next.ok).toBe(true);
    if (!next.ok) return;
    // Far sooner than the 30 s ttl: the release ended the lease at the replicas.
    expect(performance.now() - releasedAt).toBeLessThan(1000);
    expect(next.lease.epoch).toBeGreaterThan(held.lease.epoch);
    // Released right after: a new acquire with no waiting gets in too (once the replicas confirmed the release:
    // another client's acquire could otherwise reach them first).
    await next.lease.release({ wait: true });
    const again = await first.acquire('releases', { ttlMs: 30_000 });
    expect(again.ok).toBe(true);
    if (again.ok) await again.lease.release();
  });

  it('automatic renewal keeps the lease for several ttls', async () => {
    const holder = await newClient();
    const other = await newClient();
    const held = await holder.acquire('renewed', { ttlMs: 300 });
    expect(held.ok).toBe(true);
    if (!held.ok) return;
    let renewals = 0;
    held.lease.on('renewed', () => renewals++);
    await new Promise((r) => setTimeout(r, 1200));
    expect(held.lease.active).toBe(true);
    expect(renewals).toBeGreaterThanOrEqual(3);
    const blocked = await other.acquire('renewed', { ttlMs: 300 });
    expect(blocked.ok === false && blocked.reason).toBe('busy');
    await held.lease.release();
    expect(held.lease.ended?.reason).toBe('released');
    expect(held.lease.signal.aborted).toBe(true);
  });

  it('a lease taken over by a newer holder is reported lost at the next renewal', async () => {
    const holder = await newClient();
    const other = await newClient();
    const held = await holder.acquire('taken-over', { ttlMs: 400, autoRenew: false });
    expect(held.ok).toBe(true);
    if (!held.ok) return;
    const next = await other.acquire('taken-over', { ttlMs: 5000, waitMs: 3000 });
    expect(next.ok).toBe(true);
    const renewed = await held.lease.renew();
    expect(renewed.ok).toBe(false);
    if (!renewed.ok) expect(renewed.reason).toBe('lost');
    expect(held.lease.ended?.reason).toBe('expired');
    if (next.ok) await next.lease.release();
  });

  it('await using releases the lease at the end of the block', async () => {
    const holder = await newClient();
    {
      const result = await holder.acquire('disposed', { ttlMs: 30_000 });
      expect(result.ok).toBe(true);
      if (!result.ok) return;
      await using lease = result.lease;
      expect(lease.active).toBe(true);
    }
    const status = await holder.status('disposed');
    expect(status.leased).toBe(false);
    expect(status.epoch).toBe(1n);
  });
});

describe('Release off the critical path', () => {
  it('release() resolves once the release is sent; closing the client right after still releases at the replicas', async () => {
    const first = await newClient();
    const second = await newClient();
    const held = await first.acquire('release/sent', { ttlMs: 60_000 });
    expect(held.ok).toBe(true);
    if (!held.ok) return;
    const sent = await held.lease.release();
    // To every connected replica: any of them may hold the lease, having joined it (docs/protocol.md).
    expect(sent).toEqual({ ok: true, sent: local!.cluster.n });
    expect(held.lease.signal.aborted).toBe(true);
    // close() waits for the release round instead of cutting the connections under it.
    await first.close();
    // Far from the 60 s ttl and with no wait: the replicas have let the lease go.
    const next = await second.acquire('release/sent', { ttlMs: 5_000 });
    expect(next.ok, JSON.stringify(!next.ok && next)).toBe(true);
    if (next.ok) expect(next.lease.epoch).toBeGreaterThan(held.lease.epoch);
    if (next.ok) await next.lease.release();
  });

  it('a release that is lost only delays the next holder until the lease ends at the replicas', async () => {
    // The first holder reaches every replica through a proxy that turns into a black hole before it releases.
    const proxies: FaultProxy[] = await Promise.all(
      local!.cluster.replicas.map((replica) => startFaultProxy({ target: replica.endpoint, host: '127.0.0.1' })),
    );
    try {
      const behind = withEndpoints(
        local!.cluster,
        proxies.map((proxy) => proxy.url),
      );
      const first = await QuorumFenceClient.connect(behind, generateIdentity(), { requestTimeoutMs: 1_000 });
      clients.push(first);
      const second = await newClient();
      const ttlMs = 1_500;
      const acquiredAt = performance.now();
      const held = await first.acquire('release/lost', { ttlMs, autoRenew: false });
      expect(held.ok).toBe(true);
      if (!held.ok) return;
      for (const proxy of proxies) proxy.partition(true);
      // Sent into the black hole: the connections look open, so it counts as sent, and it does not wait for answers.
      expect(await held.lease.release()).toEqual({ ok: true, sent: local!.cluster.n });
      const next = await second.acquire('release/lost', { ttlMs, waitMs: 10_000 });
      const nextAt = performance.now();
      expect(next.ok, JSON.stringify(!next.ok && next)).toBe(true);
      if (!next.ok) return;
      // The lease was not freed early (the release never arrived), and the next holder got in once it ended.
      expect(nextAt - acquiredAt).toBeGreaterThanOrEqual(ttlMs - 5);
      expect(next.lease.epoch).toBeGreaterThan(held.lease.epoch);
      await next.lease.release();
      await first.close();
    } finally {
      await Promise.all(proxies.map((proxy) => proxy.close()));
    }
  }, 60_000);
});
