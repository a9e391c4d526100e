/**
 * Release notices: a replica tells the connections it answered `busy` for a
 * resource when its holder releases it, so waiters retry at once instead of at
 * their next poll. Real replica processes and sockets.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { QuorumFenceClient } from '../../src/client/client.js';
import { generateIdentity } from '../../src/client/identity.js';
import { decodeServerMessage, encodeMessage } from '../../src/protocol/codec.js';
import { isQuorumFenceError } from '../../src/common/errors.js';
import { outcomeOf, RawClient } from '../support/raw-client.js';

const root = mkdtempSync(join(tmpdir(), 'qf-notice-'));
let local: LocalCluster;

beforeAll(async () => {
  dealLocalCluster(join(root, 'keys'), 4);
  local = await startLocalCluster({ newStores: true, dir: join(root, 'keys'), dataRoot: join(root, 'data') });
});
afterAll(async () => {
  await local?.close();
  rmSync(root, { recursive: true, force: true });
});

describe('release notices', () => {
  it('the codec accepts exactly { v, type: released, resource }', () => {
    expect(decodeServerMessage(encodeMessage({ type: 'released', resource: 'r' }))).toEqual({
      type: 'released',
      resource: 'r',
    });
    const extra = encodeMessage({ type: 'released', resource: 'r', epoch: 1n } as never);
    expect(() => decodeServerMessage(extra)).toThrow(expect.objectContaining({ code: 'PROTOCOL_ERROR' }));
    try {
      decodeServerMessage(encodeMessage({ type: 'released' } as never));
      expect.unreachable();
    } catch (error) {
      expect(isQuorumFenceError(error, 'PROTOCOL_ERROR')).toBe(true);
    }
  });

  it('a replica notifies the connections it told busy, once, when the holder releases', async () => {
    const url = local.replica(1).url;
    const holder = await RawClient.open(url);
    const waiter = await RawClient.open(url);
    const bystander = await RawClient.open(url);
    try {
      expect(outcomeOf(await holder.acquire('notice/r', 1n, 10_000)).status).toBe('granted');
      expect(outcomeOf(await waiter.acquire('notice/r', 2n, 1_000)).status).toBe('busy');
      expect(outcomeOf(await holder.release('notice/r', 1n)).status).toBe('released');
      expect(await waiter.next(5_000)).toEqual({ message: { type: 'released', resource: 'notice/r' } });
      // Nobody else hears it, and a second release does not announce again.
      expect(outcomeOf(await holder.release('notice/r', 1n)).status).toBe('released');
      await expect(bystander.next(300)).rejects.toThrow(/nothing arrived/);
      await expect(waiter.next(300)).rejects.toThrow(/nothing arrived/);
    } finally {
      await Promise.all([holder.close(), waiter.close(), bystander.close()]);
    }
  });

  it('an SDK waiter that polls only every 10 s gets the lease right after the release', async () => {
    const slowPoll = { busyPollMs: 10_000 };
    const [a, b] = await Promise.all([
      QuorumFenceClient.connect(local.cluster, generateIdentity(), slowPoll),
      QuorumFenceClient.connect(local.cluster, generateIdentity(), slowPoll),
    ]);
    try {
      const first = await a.acquire('notice/sdk', { ttlMs: 30_000 });
      expect(first.ok).toBe(true);
      if (!first.ok) return;
      const waiting = b.acquire('notice/sdk', { ttlMs: 30_000, waitMs: 20_000 });
      await new Promise((resolve) => setTimeout(resolve, 300)); // b has been told busy by now
      const releasedAt = performance.now();
      await first.lease.release();
      const second = await waiting;
      const handoverMs = performance.now() - releasedAt;
      expect(second.ok).toBe(true);
      if (second.ok) {
        expect(second.lease.epoch).toBeGreaterThan(first.lease.epoch);
        await second.lease.release();
      }
      // Without the notice b would sleep until its next poll, seconds away.
      expect(handoverMs).toBeLessThan(2_000);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});
