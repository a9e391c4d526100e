/**
 * One identity, one holder (docs/protocol.md, "Sessions"; issue 32): two processes that load the same identity file
 * are two sessions, and a replica does not hand a running lease to another session of its holder. Crash recovery is
 * explicit: `--resume` (SDK: `acquire(..., { resume: true })`) ends the old session's lease and takes a new epoch.
 * Real processes (the CLI) and real replicas.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clusterToJson } from '../../src/cluster/description.js';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { QuorumFenceClient, createIdentityFile, loadIdentityFile } from '../../src/client/index.js';
import { checkToken } from '../../src/token/admission-token.js';
import { runCli } from '../support/cli.js';

let dir: string;
let local: LocalCluster | undefined;
let clusterFile: string;
let identityFile: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'qf-sessions-'));
  dealLocalCluster(join(dir, 'keys'), 4);
  local = await startLocalCluster({ newStores: true, dir: join(dir, 'keys'), dataRoot: join(dir, 'data') });
  clusterFile = join(dir, 'cluster.json');
  writeFileSync(clusterFile, JSON.stringify(clusterToJson(local.cluster)));
  identityFile = join(dir, 'shared.key');
  createIdentityFile(identityFile);
}, 60_000);

afterAll(async () => {
  await local?.close();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

interface Acquired {
  ok: boolean;
  reason?: string;
  epoch?: string;
  token?: string;
  session?: string;
}

async function acquire(resource: string, ...extra: string[]): Promise<{ code: number | null; out: Acquired }> {
  const result = await runCli([
    'acquire',
    resource,
    '--cluster',
    clusterFile,
    '--identity',
    identityFile,
    '--ttl',
    '30s',
    '--json',
    ...extra,
  ]);
  return { code: result.code, out: JSON.parse(result.stdout) as Acquired };
}

describe('one identity, one holder', () => {
  it('a second process with the same identity file gets no token while the first one’s lease runs', async () => {
    const first = await acquire('sessions/one');
    expect(first.code).toBe(0);
    expect(first.out.session).toMatch(/^[0-9a-f]{32}$/);
    expect(checkToken(first.out.token!, local!.cluster).ok).toBe(true);
    const second = await acquire('sessions/one');
    expect(second.code).toBe(1);
    expect(second.out).toMatchObject({ ok: false, reason: 'busy' });
    // The SDK is the same: a client instance is a session of its own.
    const sdk = await QuorumFenceClient.connect(local!.cluster, loadIdentityFile(identityFile));
    try {
      expect(sdk.session).not.toBe(first.out.session);
      expect(await sdk.acquire('sessions/one', { ttlMs: 1_000 })).toMatchObject({ ok: false, reason: 'busy' });
    } finally {
      await sdk.close();
    }
  });

  it('--resume ends the old session’s lease and takes a new epoch, which every replica then reports', async () => {
    const first = await acquire('sessions/resume');
    expect(first.code).toBe(0);
    const resumed = await acquire('sessions/resume', '--resume');
    expect(resumed.code).toBe(0);
    expect(BigInt(resumed.out.epoch!)).toBeGreaterThan(BigInt(first.out.epoch!));
    expect(resumed.out.session).not.toBe(first.out.session);
    // The crashed process's session, come back: its lease is over everywhere.
    const old = await QuorumFenceClient.connect(local!.cluster, loadIdentityFile(identityFile), {
      session: first.out.session!,
    });
    try {
      const status = await old.status('sessions/resume');
      expect(status.epoch).toBe(BigInt(resumed.out.epoch!));
    } finally {
      await old.close();
    }
  });

  it('two clients of one identity in one process: the second waits for the first’s release, as another holder would', async () => {
    const identity = loadIdentityFile(identityFile);
    const [a, b] = await Promise.all([
      QuorumFenceClient.connect(local!.cluster, identity),
      QuorumFenceClient.connect(local!.cluster, identity),
    ]);
    try {
      const held = await a.acquire('sessions/inproc', { ttlMs: 10_000 });
      expect(held.ok).toBe(true);
      if (!held.ok) return;
      const waiting = b.acquire('sessions/inproc', { ttlMs: 1_000, waitMs: 5_000 });
      await new Promise((resolve) => setTimeout(resolve, 200));
      await held.lease.release();
      const got = await waiting;
      expect(got.ok).toBe(true);
      if (got.ok) {
        expect(got.lease.epoch).toBeGreaterThan(held.lease.epoch);
        await got.lease.release();
      }
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});
