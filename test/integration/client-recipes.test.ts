/**
 * The recipes on top of leases, against real replica processes (N = 4) and,
 * for the once-only runner, the real LMDB guard store.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { QuorumFenceClient } from '../../src/client/client.js';
import { campaign, type Term } from '../../src/client/campaign.js';
import { generateIdentity } from '../../src/client/identity.js';
import { guardResultStore, runOnce } from '../../src/client/run-once.js';
import { withLock } from '../../src/client/with-lock.js';
import { LmdbGuard } from '../../src/guard/lmdb-guard.js';
import { checkToken } from '../../src/token/admission-token.js';

let dir: string;
let local: LocalCluster | undefined;
let guard: LmdbGuard | undefined;
const clients: QuorumFenceClient[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'qf-client-recipes-'));
  dealLocalCluster(join(dir, 'keys'), 4);
  local = await startLocalCluster({ newStores: true, dir: join(dir, 'keys'), dataRoot: join(dir, 'data') });
  guard = await LmdbGuard.open(join(dir, 'guard'), local.cluster);
}, 60_000);

afterAll(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
  await guard?.close();
  await local?.close();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

async function newClient(): Promise<QuorumFenceClient> {
  // Short polls so that waiting recipes notice a release quickly.
  const client = await QuorumFenceClient.connect(local!.cluster, generateIdentity(), { busyPollMs: 10 });
  clients.push(client);
  return client;
}

describe('withLock runs the function under a lease and releases it', () => {
  it('passes a valid token, returns the value, and releases afterwards', async () => {
    const client = await newClient();
    const result = await withLock(client, 'with-lock', async ({ tokenText, epoch, signal }) => {
      expect(checkToken(tokenText, local!.cluster).ok).toBe(true);
      expect(signal.aborted).toBe(false);
      return epoch * 10n;
    });
    expect(result.ok).toBe(true);
    if (result.ok) {
      expect(result.value).toBe(result.epoch * 10n);
      expect(result.lost).toBeUndefined();
    }
    expect((await client.status('with-lock')).leased).toBe(false);
  });

  it('releases when the function throws, and rethrows', async () => {
    const client = await newClient();
    await expect(
      withLock(client, 'with-lock-throws', () => {
        throw new Error('work failed');
      }),
    ).rejects.toThrow('work failed');
    expect((await client.status('with-lock-throws')).leased).toBe(false);
  });

  it('returns the refusal when another holder keeps the lock', async () => {
    const holder = await newClient();
    const other = await newClient();
    const held = await holder.acquire('with-lock-busy', { ttlMs: 30_000 });
    expect(held.ok).toBe(true);
    let ran = false;
    const result = await withLock(other, 'with-lock-busy', () => {
      ran = true;
    });
    expect(result.ok === false && result.reason).toBe('busy');
    expect(ran).toBe(false);
    if (held.ok) await held.lease.release();
  });
});

describe('campaign: one leader at a time, terms only grow', () => {
  it('elects one, and the other takes over with a larger term when the leader resigns', async () => {
    const [clientA, clientB] = [await newClient(), await newClient()];
    const a = campaign(clientA, 'leader', { ttlMs: 2000, pollMs: 500 });
    const b = campaign(clientB, 'leader', { ttlMs: 2000, pollMs: 500 });
    // Listeners attached in the same turn as campaign(): the first election cannot be missed.
    const elected = (campaignOf: typeof a) => new Promise<Term>((resolve) => campaignOf.once('elected', resolve));
    const first = await Promise.race([elected(a), elected(b)]);
    const [leader, follower] = a.isLeader ? [a, b] : [b, a];
    expect(leader.isLeader).toBe(true);
    expect(follower.isLeader).toBe(false);
    expect(leader.term).toBe(first.term);

    const deposed = new Promise<string>((resolve) => leader.once('deposed', ({ end }) => resolve(end.reason)));
    const next = new Promise<Term>((resolve) => follower.once('elected', resolve));
    await leader.resign();
    expect(await deposed).toBe('released');
    const second = await next;
    expect(second.term).toBeGreaterThan(first.term);
    expect(follower.isLeader).toBe(true);
    await follower.resign();
    expect(follower.isLeader).toBe(false);
  }, 20_000);
});

describe('runOnce: the work for a key runs once, its result stored through the guard', () => {
  it('two concurrent callers get one run and the same result; a later caller gets the stored one', async () => {
    const store = guardResultStore(guard!);
    let runs = 0;
    const work = async () => {
      runs++;
      await new Promise((r) => setTimeout(r, 100));
      return { answer: 42, run: runs };
    };
    const [x, y] = await Promise.all([
      runOnce(await newClient(), store, 'job-1', work, { waitMs: 5000 }),
      runOnce(await newClient(), store, 'job-1', work, { waitMs: 5000 }),
    ]);
    expect(runs).toBe(1);
    expect(x.ok && y.ok).toBe(true);
    if (x.ok && y.ok) {
      expect(x.value).toEqual({ answer: 42, run: 1 });
      expect(y.value).toEqual(x.value);
      expect([x.ran, y.ran].sort()).toEqual([false, true]);
    }
    const later = await runOnce(await newClient(), store, 'job-1', work);
    expect(later.ok && later.value).toEqual({ answer: 42, run: 1 });
    expect(later.ok && later.ran).toBe(false);
    expect(runs).toBe(1);
  });

  it('the guard fences a stale holder: an older token cannot store a result after a newer one', async () => {
    const store = guardResultStore(guard!);
    const client = await newClient();
    const first = await client.acquire('once/fenced', { ttlMs: 5000 });
    expect(first.ok).toBe(true);
    if (!first.ok) return;
    await first.lease.release();
    const second = await client.acquire('once/fenced', { ttlMs: 5000 });
    expect(second.ok).toBe(true);
    if (!second.ok) return;
    expect(await store.write('once/fenced', new TextEncoder().encode('"new"'), second.lease.token)).toEqual({
      ok: true,
    });
    const stale = await store.write('once/fenced', new TextEncoder().encode('"old"'), first.lease.token);
    expect(stale.ok === false && stale.reason).toBe('fenced');
    const again = await store.write('once/fenced', new TextEncoder().encode('"again"'), second.lease.token);
    expect(again.ok === false && again.reason).toBe('exists');
    expect(new TextDecoder().decode(await store.read('once/fenced'))).toBe('"new"');
    await second.lease.release();
  });
});
