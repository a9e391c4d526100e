/**
 * Freezing a running replica for a reshare (docs/resharing.md), with real replica processes over
 * sockets: the operator's POST /admin/freeze (through `quorumfence reshare freeze --url`) answers
 * once the marker is flushed; from then on that replica answers every request with the wire error
 * REPLICA_FROZEN, also after a restart; clients count it as a replica that cannot vote, so acquires
 * still succeed while 2f+1 others can grant, and fail as unavailable, naming it, once they cannot.
 * A request without the operator secret, or with a wrong one, is refused and changes nothing.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { QuorumFenceClient } from '../../src/client/client.js';
import { generateIdentity } from '../../src/client/identity.js';
import { exportInterchange } from '../../src/replica/interchange.js';
import { SigningRecord } from '../../src/replica/signing-record.js';
import { verifyToken } from '../../src/token/admission-token.js';
import { runCli } from '../support/cli.js';
import { untilAllReady } from '../support/connected.js';
import { RawClient } from '../support/raw-client.js';
import { makeSelfSignedCert } from '../support/self-signed-cert.js';

let dir: string;
let local: LocalCluster | undefined;
const clients: QuorumFenceClient[] = [];
const secret = randomBytes(32).toString('base64url');
let secretFile: string;
let wrongSecretFile: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'qf-live-freeze-'));
  secretFile = join(dir, 'operator-secret');
  wrongSecretFile = join(dir, 'wrong-secret');
  writeFileSync(secretFile, secret + '\n', { mode: 0o600 });
  writeFileSync(wrongSecretFile, randomBytes(32).toString('base64url') + '\n', { mode: 0o600 });
  dealLocalCluster(join(dir, 'keys'), 4);
  local = await startLocalCluster({
    newStores: true,
    dir: join(dir, 'keys'),
    dataRoot: join(dir, 'data'),
    // Replicas 1 and 2 have an operator secret; 3 and 4 none (their admin endpoint is closed).
    extraArgs: (index) => (index <= 2 ? ['--operator-secret-file', secretFile] : []),
  });
}, 60_000);

afterAll(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
  await local?.close();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

async function newClient(): Promise<QuorumFenceClient> {
  const client = await QuorumFenceClient.connect(local!.cluster, generateIdentity());
  clients.push(client);
  return client;
}

async function health(index: number): Promise<{ frozen: boolean }> {
  const response = await fetch(local!.replica(index).healthUrl);
  return (await response.json()) as { frozen: boolean };
}

function adminUrl(index: number): string {
  return local!.replica(index).healthUrl.replace('/healthz', '/admin/freeze');
}

/** One acquire straight at replica `index`: its outcome status, or its wire error code. */
async function rawAcquire(index: number, resource: string, epoch: bigint): Promise<string> {
  const raw = await RawClient.open(local!.replica(index).url);
  try {
    const answer = await raw.acquire(resource, epoch, 2_000);
    return 'error' in answer ? `error ${answer.error.code}` : answer.outcome.status;
  } finally {
    raw.socket.terminate();
  }
}

describe('freezing a running replica (POST /admin/freeze)', () => {
  it('refuses a missing, wrong or unconfigured secret (UNAUTHENTICATED, 401) and a GET (405), changing nothing', async () => {
    const bare = await fetch(adminUrl(1), { method: 'POST' });
    expect(bare.status).toBe(401);
    expect(((await bare.json()) as { code: string }).code).toBe('UNAUTHENTICATED');
    const wrong = await runCli(['reshare', 'freeze', '--url', local!.replica(1).url, '--secret-file', wrongSecretFile]);
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toMatch(/HTTP 401.*\(UNAUTHENTICATED\)/);
    // Replica 3 has no operator secret: nothing opens its admin endpoint, not even replica 1's secret.
    const closed = await runCli(['reshare', 'freeze', '--url', local!.replica(3).url, '--secret-file', secretFile]);
    expect(closed.code).toBe(1);
    expect(closed.stderr).toMatch(/no operator secret.*\(UNAUTHENTICATED\)/);
    const get = await fetch(adminUrl(1), { headers: { authorization: `Bearer ${secret}` } });
    expect(get.status).toBe(405);
    // With the right secret, a body that is not { reason?: string } (400) or is over 1 KiB (413) freezes nothing.
    const authorized = { method: 'POST', headers: { authorization: `Bearer ${secret}` } } as const;
    for (const [body, status] of [
      ['not json', 400],
      ['{"reason": 7}', 400],
      ['[]', 400],
      [JSON.stringify({ reason: 'x'.repeat(2_000) }), 413],
    ] as const) {
      const refused = await fetch(adminUrl(1), { ...authorized, body });
      expect([refused.status, ((await refused.json()) as { code: string }).code]).toEqual([status, 'INVALID_ARGUMENT']);
    }
    const noSecret = await runCli(['reshare', 'freeze', '--url', local!.replica(1).url]);
    expect([noSecret.code, noSecret.stderr]).toEqual([2, expect.stringMatching(/\(INVALID_OPTION\)/)]);
    // Its one duration takes a unit like every other (issue 47, item 9); the old --timeout-ms says what replaced it.
    const freezeWith = (...extra: string[]) =>
      runCli(['reshare', 'freeze', '--url', local!.replica(1).url, '--secret-file', secretFile, ...extra]);
    const old = await freezeWith('--timeout-ms', '5000');
    expect([old.code, old.stderr]).toEqual([2, expect.stringContaining('--timeout-ms is now --timeout')]);
    expect(old.stderr).toContain('(--timeout 5000ms)');
    const unitless = await freezeWith('--timeout', '5000');
    expect([unitless.code, unitless.stderr]).toEqual([
      2,
      expect.stringContaining('--timeout expects a duration with a unit'),
    ]);
    for (const index of [1, 3]) expect((await health(index)).frozen).toBe(false);
    expect(await rawAcquire(1, 'untouched', 1n)).toBe('granted');
    expect(await rawAcquire(3, 'untouched', 1n)).toBe('granted');
  }, 60_000);

  it('grant before, freeze live, every request after refused with REPLICA_FROZEN (also after a restart); the cluster still grants with the other three, and names the frozen ones when it cannot', async () => {
    const client = await newClient();
    // Replica 1 must be among the signers of 'orders' (its ring order): all four connections ready first.
    expect(await untilAllReady(client)).toEqual(['ready', 'ready', 'ready', 'ready']);
    const before = await client.acquire('orders', { ttlMs: 1_000 });
    expect(before.ok, JSON.stringify(!before.ok && before)).toBe(true);
    if (!before.ok) return;
    expect(before.lease.signers).toContain(1);
    await before.lease.release();

    // Bob waits in replica 1's line for a resource Alice holds for 30 s: the freeze answers him at once.
    const alice = await RawClient.open(local!.replica(1).url);
    const bob = await RawClient.open(local!.replica(1).url);
    const held = await alice.acquire('line', 1n, 30_000);
    expect('outcome' in held && held.outcome.status).toBe('granted');
    const waitedSince = performance.now();
    const waiting = bob.acquireInLine('line', 2n, { ttlMs: 1_000, waitMs: 30_000, nextEpoch: true });
    // The replica's `turn` push says Bob is first in its line: he is waiting there when the freeze comes.
    const pushed = await bob.next(10_000);
    expect('message' in pushed && pushed.message).toMatchObject({ type: 'turn', resource: 'line', epoch: 2n });

    const frozen = await runCli([
      'reshare',
      'freeze',
      '--url',
      local!.replica(1).url,
      '--secret-file',
      secretFile,
      '--reason',
      'replace replica 1',
    ]);
    expect(frozen.code, frozen.stderr).toBe(0);
    const answer = JSON.parse(frozen.stdout) as { frozen: boolean; replica: number; reason: string };
    expect(answer).toMatchObject({ frozen: true, replica: 1, reason: 'replace replica 1' });
    expect((await health(1)).frozen).toBe(true);
    const bobsAnswer = await waiting;
    expect('error' in bobsAnswer && bobsAnswer.error.code).toBe('REPLICA_FROZEN');
    expect(performance.now() - waitedSince).toBeLessThan(15_000);
    alice.socket.terminate();
    bob.socket.terminate();
    // Freezing again keeps the first freeze.
    const again = await runCli(['reshare', 'freeze', '--url', local!.replica(1).url, '--secret-file', secretFile]);
    expect(JSON.parse(again.stdout)).toMatchObject({ reason: 'replace replica 1' });

    // The frozen replica refuses with its own wire code; the grant before the freeze is in its record.
    expect(await rawAcquire(1, 'orders', before.lease.token.grant.epoch + 1n)).toBe('error REPLICA_FROZEN');
    expect(await rawAcquire(1, 'fresh', 1n)).toBe('error REPLICA_FROZEN');
    const reader = SigningRecord.open(local!.replica(1).dataDir, undefined, { readOnly: true });
    const exported = exportInterchange(reader);
    await reader.close();
    expect(exported.entries.find((e) => e.resource === 'orders')?.epoch).toBe(String(before.lease.token.grant.epoch));

    // The client counts replica 1 out and still gets a token from 2, 3 and 4.
    const during = await client.acquire('orders', { ttlMs: 1_000 });
    expect(during.ok, JSON.stringify(!during.ok && during)).toBe(true);
    if (!during.ok) return;
    expect(during.lease.token.grant.epoch).toBeGreaterThan(before.lease.token.grant.epoch);
    expect(verifyToken(during.lease.token, local!.cluster).ok).toBe(true);
    await during.lease.release();

    // A restart keeps it frozen.
    await local!.replica(1).restart();
    expect((await health(1)).frozen).toBe(true);
    expect(await rawAcquire(1, 'after-restart', 1n)).toBe('error REPLICA_FROZEN');

    // With replica 2 frozen too, only two can vote: the acquire is unavailable and names both.
    const second = await runCli(['reshare', 'freeze', '--url', local!.replica(2).url, '--secret-file', secretFile]);
    expect(second.code, second.stderr).toBe(0);
    // Wait (bounded) until the client is connected to every replica again, replica 1 after its restart included.
    expect(await untilAllReady(client)).toEqual(['ready', 'ready', 'ready', 'ready']);
    const stuck = await client.acquire('orders', { ttlMs: 1_000, timeoutMs: 3_000 });
    expect(stuck.ok).toBe(false);
    if (stuck.ok) return;
    expect(stuck.reason).toBe('unavailable');
    expect(stuck.message).toMatch(/frozen for a reshare: replica 1, 2/);
  }, 90_000);
});

describe('reshare freeze --url over wss:// with --ca', () => {
  it('a replica whose self-signed certificate this machine does not trust: refused without --ca (CONNECTION_FAILED, nothing frozen), frozen with it; a bad --ca file is refused (INVALID_OPTION, IO_ERROR), and --ca with ws:// or --data (INVALID_OPTION)', async () => {
    const tlsDir = join(dir, 'tls');
    const cert = makeSelfSignedCert(tlsDir);
    if (cert === undefined) return;
    const tls = await startLocalCluster({
      newStores: true,
      dir: join(dir, 'keys'),
      indices: [1],
      dataRoot: join(dir, 'data-tls'),
      extraArgs: ['--tls-cert', cert.certFile, '--tls-key', cert.keyFile, '--operator-secret-file', secretFile],
    });
    try {
      const url = tls.replica(1).url;
      expect(url).toMatch(/^wss:\/\//);
      const freeze = (...extra: string[]) =>
        runCli(['reshare', 'freeze', '--url', url, '--secret-file', secretFile, ...extra], { timeoutMs: 30_000 });
      const untrusted = await freeze();
      expect([untrusted.code, untrusted.stderr]).toEqual([
        1,
        expect.stringMatching(/--ca FILE.*\(CONNECTION_FAILED\)/),
      ]);
      writeFileSync(join(tlsDir, 'not-a-cert.pem'), 'hello\n');
      const notPem = await freeze('--ca', join(tlsDir, 'not-a-cert.pem'));
      expect([notPem.code, notPem.stderr]).toEqual([
        2,
        expect.stringMatching(/no PEM certificate; run "quorumfence reshare --help" \(INVALID_OPTION\)\n$/),
      ]);
      writeFileSync(join(tlsDir, 'broken.pem'), '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n');
      const broken = await freeze('--ca', join(tlsDir, 'broken.pem'));
      expect([broken.code, broken.stderr]).toEqual([2, expect.stringMatching(/does not parse.*\(INVALID_OPTION\)/)]);
      const missing = await freeze('--ca', join(tlsDir, 'absent.pem'));
      expect([missing.code, missing.stderr]).toEqual([1, expect.stringMatching(/cannot read .*\(IO_ERROR\)/)]);
      const plain = await runCli(
        ['reshare', 'freeze', '--url', url.replace('wss:', 'ws:'), '--secret-file', secretFile, '--ca', cert.certFile],
        { timeoutMs: 30_000 },
      );
      expect([plain.code, plain.stderr]).toEqual([
        2,
        expect.stringMatching(/--ca goes with a wss:\/\/ .*\(INVALID_OPTION\)/),
      ]);
      const stopped = await runCli([
        'reshare',
        'freeze',
        '--data',
        join(dir, 'data-tls', 'replica-1'),
        '--ca',
        cert.certFile,
      ]);
      expect([stopped.code, stopped.stderr]).toEqual([
        2,
        expect.stringMatching(/--ca goes with --url.*\(INVALID_OPTION\)/),
      ]);
      // None of the refusals froze it: it still grants.
      const ca = readFileSync(cert.certFile);
      const acquireOnce = async (resource: string) => {
        const raw = await RawClient.open(url, undefined, { ca });
        try {
          const answer = await raw.acquire(resource, 1n, 2_000);
          return 'error' in answer ? `error ${answer.error.code}` : answer.outcome.status;
        } finally {
          raw.socket.terminate();
        }
      };
      expect(await acquireOnce('tls/before')).toBe('granted');
      const trusted = await freeze('--ca', cert.certFile, '--reason', 'tls test');
      expect(trusted.code, trusted.stderr).toBe(0);
      expect(JSON.parse(trusted.stdout)).toMatchObject({ frozen: true, replica: 1, reason: 'tls test' });
      expect(await acquireOnce('tls/after')).toBe('error REPLICA_FROZEN');
    } finally {
      await tls.close();
    }
  }, 120_000);
});
