/**
 * Share generations on the wire, with real replica processes (docs/resharing.md): replicas running a
 * description of membership 1 send `generation: 1` with each grant; a client holding that description combines
 * them, and a client still holding membership 0 combines none of them (not its generation), reports the
 * acquire unavailable naming them, and blames no replica.
 */
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { QuorumFenceClient } from '../../src/client/client.js';
import { generateIdentity } from '../../src/client/identity.js';
import { loadClusterFile, withEndpoints } from '../../src/cluster/description.js';
import { createSigningRecord } from '../../src/replica/signing-record.js';
import { verifyToken } from '../../src/token/admission-token.js';
import { RawClient } from '../support/raw-client.js';

let dir: string;
let local: LocalCluster | undefined;
const clients: QuorumFenceClient[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'qf-generation-'));
  const { clusterPath, keyPaths } = dealLocalCluster(join(dir, 'gen0'), 4);
  // The same key and shares, described as membership 1: the replicas sign as generation 1.
  mkdirSync(join(dir, 'gen1'));
  const json = JSON.parse(readFileSync(clusterPath, 'utf8')) as Record<string, unknown>;
  writeFileSync(join(dir, 'gen1', 'cluster.json'), JSON.stringify({ ...json, membershipVersion: 1 }));
  keyPaths.forEach((path, k) => copyFileSync(path, join(dir, 'gen1', `replica-${k + 1}.key`)));
  // Membership 1 made by hand, not by a reshare: its records are made here (a real one's come from inherit).
  const { id } = loadClusterFile(clusterPath);
  for (let i = 1; i <= 4; i++)
    await createSigningRecord(join(dir, 'data', `replica-${i}`), { clusterId: id, replicaIndex: i });
  local = await startLocalCluster({ dir: join(dir, 'gen1'), dataRoot: join(dir, 'data') });
}, 60_000);

afterAll(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
  await local?.close();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

describe('share generation in grants', () => {
  it('a grant names generation 1; a client on membership 1 combines, one on membership 0 combines nothing and says why', async () => {
    const raw = await RawClient.open(local!.replica(2).url);
    try {
      const answer = await raw.acquire('raw', 1n, 1_000);
      expect('outcome' in answer && answer.outcome).toMatchObject({ status: 'granted', generation: 1 });
    } finally {
      raw.socket.terminate();
    }

    expect(local!.cluster.membershipVersion).toBe(1);
    const current = await QuorumFenceClient.connect(local!.cluster, generateIdentity());
    clients.push(current);
    const granted = await current.acquire('orders', { ttlMs: 1_000 });
    expect(granted.ok, JSON.stringify(!granted.ok && granted)).toBe(true);
    if (!granted.ok) return;
    expect(verifyToken(granted.lease.token, local!.cluster).ok).toBe(true);
    await granted.lease.release();

    // The membership-0 description of the same cluster, at the replicas' actual endpoints.
    const stale = withEndpoints(
      loadClusterFile(join(dir, 'gen0', 'cluster.json')),
      local!.cluster.replicas.map((r) => r.endpoint),
    );
    expect(stale.membershipVersion).toBe(0);
    const behind = await QuorumFenceClient.connect(stale, generateIdentity());
    clients.push(behind);
    const refused = await behind.acquire('orders', { ttlMs: 1_000, timeoutMs: 3_000 });
    expect(refused.ok).toBe(false);
    if (refused.ok) return;
    expect(refused.reason).toBe('unavailable');
    expect(refused.message).toMatch(/on another share generation than this cluster description \(0\): replica/);
    expect(refused.faults).toEqual([]);
  }, 60_000);
});
