/**
 * Byzantine clients against real replicas and the real reference resource:
 * an authenticated holder that asks for epochs far above the watermark,
 * releases or renews another holder's lease, replays old tokens, tampers with
 * tokens, or brings a token of another cluster. Every such request is refused
 * and changes nothing (replica state, barrier, data), and the guard log still
 * passes the history checker.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { QuorumFenceClient, generateIdentity } from '../../src/client/index.js';
import { MAX_EPOCH } from '../../src/common/limits.js';
import {
  askAll,
  foreignClusterToken,
  openSessions,
  tamperedTokens,
  type RawReplicaSession,
} from '../../src/testing/byzantine-clients.js';
import { checkHistory, formatViolation } from '../../src/testing/history-checker.js';
import { ResourceHttpClient, WorkloadRecorder, writeIncrement } from '../../src/testing/workload.js';
import { startResource, stopAllResources } from '../support/resource-process.js';

let dir: string;
let local: LocalCluster;
let guard: ResourceHttpClient;
let alice: QuorumFenceClient;
let bob: QuorumFenceClient;
let mallory: Map<number, RawReplicaSession>;
const recorder = new WorkloadRecorder();

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'qf-byz-clients-'));
  dealLocalCluster(join(dir, 'keys'), 4);
  const [cluster, resource] = await Promise.all([
    startLocalCluster({
      newStores: true,
      dir: join(dir, 'keys'),
      dataRoot: join(dir, 'data'),
      extraArgs: ['--signing-workers', '0'],
    }),
    startResource({ clusterFile: join(dir, 'keys', 'cluster.json'), dataDir: join(dir, 'resource') }),
  ]);
  local = cluster;
  guard = new ResourceHttpClient(resource.url);
  [alice, bob] = await Promise.all([
    QuorumFenceClient.connect(local.cluster, generateIdentity()),
    QuorumFenceClient.connect(local.cluster, generateIdentity()),
  ]);
  mallory = await openSessions(local.cluster, generateIdentity());
  expect(mallory.size).toBe(4);
});

afterAll(async () => {
  for (const session of mallory?.values() ?? []) session.close();
  await Promise.all([alice?.close(), bob?.close()]);
  await stopAllResources();
  await local?.close();
  rmSync(dir, { recursive: true, force: true });
});

const statuses = (answers: Map<number, string>) => [...answers.values()];

describe('Byzantine clients at the replicas', () => {
  it('an epoch far above the watermark is too_far at every replica and is not recorded', async () => {
    const resource = 'clients/huge';
    for (const epoch of [1_000_002n, MAX_EPOCH]) {
      expect(statuses(await askAll(mallory, { type: 'acquire', resource, epoch, ttlMs: 1_000 }))).toEqual([
        'too_far',
        'too_far',
        'too_far',
        'too_far',
      ]);
    }
    // Above the u63 range: refused by the bounds check.
    expect(statuses(await askAll(mallory, { type: 'acquire', resource, epoch: MAX_EPOCH + 1n, ttlMs: 1_000 }))).toEqual(
      ['invalid', 'invalid', 'invalid', 'invalid'],
    );
    const status = await alice.status(resource);
    expect(status.epoch).toBe(0n);
    const acquired = await alice.acquire(resource, { ttlMs: 2_000 });
    expect(acquired.ok && acquired.lease.epoch).toBe(1n);
    if (acquired.ok) await acquired.lease.release();
  });

  it("releases and renewals of another holder's lease are not_holder and change nothing", async () => {
    const resource = 'clients/lease';
    const acquired = await alice.acquire(resource, { ttlMs: 5_000, autoRenew: false });
    expect(acquired.ok).toBe(true);
    if (!acquired.ok) return;
    const epoch = acquired.lease.epoch;
    // Once every replica holds the lease: the one that did not sign it joins at the lease's join time, a tenth of its
    // ttl after the grant. Until then that replica holds no lease of (resource, epoch): another identity's renew there
    // joins a lease of its own, as its acquire there would be granted (docs/protocol.md, "Leases that outlive f
    // signers", on that window).
    await vi.waitFor(() => expect(acquired.lease.holders).toEqual([1, 2, 3, 4]), { timeout: 5_000, interval: 50 });
    for (const body of [
      { type: 'release', resource, epoch },
      { type: 'renew', resource, epoch, ttlMs: 60_000 },
      { type: 'release', resource, epoch: epoch + 1n },
    ] as const) {
      expect(statuses(await askAll(mallory, body))).toEqual(['not_holder', 'not_holder', 'not_holder', 'not_holder']);
    }
    const status = await bob.status(resource);
    expect(status).toMatchObject({ epoch, leased: true });
    // The lease still runs: Bob is refused while the real holder can renew and release.
    expect(await bob.acquire(resource, { ttlMs: 1_000 })).toMatchObject({ ok: false, reason: 'busy' });
    expect((await acquired.lease.renew()).ok).toBe(true);
    expect((await acquired.lease.release()).ok).toBe(true);
  });
});

describe('Byzantine clients at the guard', () => {
  it('replayed, tampered and foreign tokens are refused; the barrier and the data do not move', async () => {
    const resource = 'clients/guarded';
    const first = await alice.acquire(resource, { ttlMs: 5_000 });
    expect(first.ok).toBe(true);
    if (!first.ok) return;
    recorder.token(first.lease.tokenText);
    expect((await writeIncrement(first.lease, guard, resource, 'n', recorder)).kind).toBe('incremented');
    const oldToken = first.lease.tokenText;
    await first.lease.release({ wait: true }); // confirmed: Bob's acquire, from another client, comes after it

    const second = await bob.acquire(resource, { ttlMs: 5_000 });
    expect(second.ok).toBe(true);
    if (!second.ok) return;
    recorder.token(second.lease.tokenText);
    expect((await writeIncrement(second.lease, guard, resource, 'n', recorder)).kind).toBe('incremented');
    const before = await guard.read(resource, 'n');

    const refusals: Record<string, string> = {};
    const attempt = async (label: string, token: string, target = resource) => {
      const answer = await guard.put(target, 'n', '1000', token);
      refusals[label] = answer.ok ? 'ACCEPTED' : answer.code;
    };
    await attempt('replayed old token', oldToken);
    for (const variant of tamperedTokens(second.lease.tokenText))
      await attempt(`tampered ${variant.change}`, variant.token);
    await attempt(
      'another cluster',
      foreignClusterToken(local.cluster, { resource, epoch: 1_000n, holder: second.lease.holder }),
    );
    await attempt('token of another resource', second.lease.tokenText, 'clients/other');

    expect(refusals['replayed old token']).toBe('stale');
    expect(refusals['another cluster']).toBe('wrong_cluster');
    expect(refusals['token of another resource']).toBe('wrong_resource');
    for (const [label, code] of Object.entries(refusals)) {
      expect(['stale', 'malformed', 'bad_token', 'wrong_cluster', 'wrong_resource', 'missing_token'], label).toContain(
        code,
      );
    }
    expect(await guard.read(resource, 'n')).toEqual(before);
    await second.lease.release();

    const history = await recorder.history(guard);
    const check = checkHistory(history, local.cluster);
    expect(check.ok, check.ok ? '' : check.violations.map(formatViolation).join('\n')).toBe(true);
    expect(check.stats.refusedByReason.stale).toBeGreaterThanOrEqual(1);
  });
});
