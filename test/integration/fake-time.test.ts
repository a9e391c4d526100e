/**
 * Timers run on the injectable clock: four real replicas (real LMDB, real BLS,
 * real loopback sockets, in this process) and a client share one ManualClock,
 * so an acquire, a renewal and a lease expiry are driven by moving that clock,
 * with no real seconds waited. Only I/O runs on real time.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/common/clock.js';
import { dealLocalCluster } from '../../src/cluster/launcher.js';
import { loadClusterFile, withEndpoints, type Cluster } from '../../src/cluster/description.js';
import { loadReplicaKeyFile } from '../../src/cluster/replica-key.js';
import { QuorumFenceClient } from '../../src/client/client.js';
import { generateIdentity } from '../../src/client/identity.js';
import type { LeaseEnd } from '../../src/client/lease.js';
import { ReplicaServer } from '../../src/replica/server.js';

const TTL_MS = 10_000;
const clock = new ManualClock(1_000_000);
const root = mkdtempSync(join(tmpdir(), 'qf-fake-time-'));
const servers: ReplicaServer[] = [];
const clients: QuorumFenceClient[] = [];
let cluster: Cluster;

beforeAll(async () => {
  const { clusterPath, keyPaths } = dealLocalCluster(join(root, 'keys'));
  const dealt = loadClusterFile(clusterPath);
  for (const [k, keyPath] of keyPaths.entries()) {
    servers.push(
      await ReplicaServer.start({
        cluster: dealt,
        key: loadReplicaKeyFile(keyPath, dealt),
        clusterJson: JSON.parse(readFileSync(clusterPath, 'utf8')) as unknown,
        keyJson: JSON.parse(readFileSync(keyPath, 'utf8')) as unknown,
        dataDir: join(root, `data-${k + 1}`),
        host: '127.0.0.1',
        port: 0,
        limits: { signingWorkers: 0 },
        clock,
        createStore: true,
      }),
    );
  }
  cluster = withEndpoints(
    dealt,
    servers.map((s) => s.url),
  );
}, 30_000);

afterAll(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await Promise.all(servers.map((s) => s.close()));
  rmSync(root, { recursive: true, force: true });
});

function client(): QuorumFenceClient {
  const c = new QuorumFenceClient(cluster, generateIdentity(), { clock });
  clients.push(c);
  return c;
}

describe('timers on the injectable clock', () => {
  it('renews a lease when the fake clock passes its renewal time, and lets one expire when it passes its end', async () => {
    const alice = client();
    const bob = client();
    const started = Date.now();

    // Acquire: answered over real sockets; no timer needs to fire.
    const renewing = await alice.acquire('fake-time/renewed', { ttlMs: TTL_MS });
    const expiring = await alice.acquire('fake-time/expired', { ttlMs: TTL_MS, autoRenew: false });
    if (!renewing.ok || !expiring.ok) throw new Error('acquire failed on fake time');
    const firstEnd = renewing.lease.expiresAt;
    const ended = new Promise<LeaseEnd>((resolve) => expiring.lease.once('ended', resolve));
    const renewed = new Promise<{ expiresAt: number }>((resolve) => renewing.lease.once('renewed', resolve));

    // Past half the ttl: the renewal timer fires; the replicas, on the same clock, still see the lease running.
    clock.advance(TTL_MS * 0.6);
    const renewal = await renewed;
    // Renewed at exactly half the ttl on the fake clock (renewAtFraction 0.5), so the view moves by exactly that.
    expect(renewal.expiresAt).toBe(firstEnd + TTL_MS * 0.5);
    expect(renewing.lease.remainingMs).toBe(firstEnd + TTL_MS * 0.5 - clock.now());

    // Past the ttl of the lease that does not renew: its expiry timer fires, and the replicas' lease is over too,
    // so another holder gets the next epoch at once. The renewed lease is still held.
    clock.advance(TTL_MS * 0.5);
    expect(await ended).toMatchObject({ reason: 'expired' });
    expect(expiring.lease.remainingMs).toBe(0);
    const next = await bob.acquire('fake-time/expired', { ttlMs: TTL_MS, autoRenew: false });
    if (!next.ok) throw new Error(`bob was refused: ${next.reason}`);
    expect(next.lease.epoch).toBe(expiring.lease.epoch + 1n);
    expect(renewing.lease.remainingMs).toBeGreaterThan(0);
    const busy = await bob.acquire('fake-time/renewed', { ttlMs: TTL_MS });
    expect(busy).toMatchObject({ ok: false, reason: 'busy' });

    // 11 fake seconds passed; the real run took far less.
    expect(Date.now() - started).toBeLessThan(TTL_MS);
    await renewing.lease.release();
    await next.lease.release();
  }, 30_000);
});
