/**
 * The replica as a process: refusing to start (non-zero exit, one line on
 * stderr naming the problem) on a bad key, a share that does not match, a
 * data directory of another cluster or replica, a corrupt or reset store, a
 * store nobody made (issue 43, finding 5), or a store in use; graceful
 * SIGTERM; and TLS.
 */
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dealLocalCluster, replicaEntryPoint, startLocalCluster } from '../../src/cluster/launcher.js';
import { CloseCode } from '../../src/protocol/messages.js';
import { outcomeOf, RawClient } from '../support/raw-client.js';
import { makeSelfSignedCert } from '../support/self-signed-cert.js';
import { CLI_PATH } from '../support/cli.js';
import { freePortRange, freePorts } from '../support/free-ports.js';

let root: string;
let keys: string;
let otherKeys: string;

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'qf-replica-process-'));
  keys = join(root, 'keys');
  otherKeys = join(root, 'other-keys');
  dealLocalCluster(keys);
  dealLocalCluster(otherKeys);
});

afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

/** Runs the replica to completion (it must fail); returns exit status and stderr. */
function startFails(args: { cluster?: string; key?: string; data: string; extra?: string[] }): {
  status: number | null;
  stderr: string;
} {
  const result = spawnSync(
    process.execPath,
    [
      replicaEntryPoint(),
      '--cluster',
      args.cluster ?? join(keys, 'cluster.json'),
      '--key',
      args.key ?? join(keys, 'replica-1.key'),
      '--data',
      args.data,
      ...(args.extra ?? []),
    ],
    { encoding: 'utf8', timeout: 30_000 },
  );
  return { status: result.status, stderr: result.stderr };
}

function expectOneLine(result: { status: number | null; stderr: string }, code: string, mentions: RegExp): void {
  expect(result.status, result.stderr).not.toBe(0);
  expect(result.status).not.toBeNull();
  const lines = result.stderr.trim().split('\n');
  expect(lines, result.stderr).toHaveLength(1);
  expect(lines[0]).toContain(`(${code})`);
  expect(lines[0]).toMatch(mentions);
}

/** Starts replica 1 of `keys` on `data` until healthy, then stops it, leaving a real store behind. */
async function makeStore(dir: string, data: string, index = 1): Promise<void> {
  const local = await startLocalCluster({ newStores: true, dir, indices: [index], dataRoot: data });
  const client = await RawClient.open(local.replica(index).url);
  expect(outcomeOf(await client.acquire('r', 1n)).status).toBe('granted');
  await client.close();
  await local.close();
}

describe('replica start-up refuses what it cannot trust', () => {
  it('a key file that is not a key (BAD_KEY_FILE)', () => {
    const bad = join(root, 'garbage.key');
    writeFileSync(bad, 'not json');
    expectOneLine(startFails({ key: bad, data: join(root, 'd-bad-key') }), 'BAD_KEY_FILE', /garbage\.key/);
    const badIndex = join(root, 'bad-index.key');
    writeFileSync(
      badIndex,
      JSON.stringify({ ...JSON.parse(readFileSync(join(keys, 'replica-1.key'), 'utf8')), index: 9 }),
    );
    expectOneLine(startFails({ key: badIndex, data: join(root, 'd-bad-index') }), 'BAD_KEY_FILE', /index/);
  });

  it('a key file of another cluster (CLUSTER_MISMATCH)', () => {
    expectOneLine(
      startFails({ key: join(otherKeys, 'replica-1.key'), data: join(root, 'd-other-key') }),
      'CLUSTER_MISMATCH',
      /belongs to cluster/,
    );
  });

  it('a tampered share that does not match the published share (SHARE_MISMATCH)', () => {
    const key = JSON.parse(readFileSync(join(keys, 'replica-1.key'), 'utf8')) as { secretShare: string };
    const other = JSON.parse(readFileSync(join(keys, 'replica-2.key'), 'utf8')) as { secretShare: string };
    const tampered = join(root, 'tampered.key');
    writeFileSync(tampered, JSON.stringify({ ...key, secretShare: other.secretShare }));
    expectOneLine(startFails({ key: tampered, data: join(root, 'd-tampered') }), 'SHARE_MISMATCH', /does not match/);
  });

  it('a cluster description whose id does not match its contents (CLUSTER_MISMATCH)', () => {
    const cluster = JSON.parse(readFileSync(join(keys, 'cluster.json'), 'utf8')) as { clusterId: string };
    const edited = join(root, 'edited-cluster.json');
    writeFileSync(edited, JSON.stringify({ ...cluster, clusterId: '00'.repeat(32) }));
    expectOneLine(startFails({ cluster: edited, data: join(root, 'd-edited') }), 'CLUSTER_MISMATCH', /clusterId/);
  });

  it('a data directory written by another cluster, or by another replica of this one (CLUSTER_MISMATCH)', async () => {
    const data = join(root, 'd-cluster');
    await makeStore(otherKeys, data);
    expectOneLine(startFails({ data: join(data, 'replica-1') }), 'CLUSTER_MISMATCH', /signing record of cluster/);
    await makeStore(keys, data, 2);
    expectOneLine(startFails({ data: join(data, 'replica-2') }), 'CLUSTER_MISMATCH', /replica 2, not of replica 1/);
  });

  it('a corrupt store, and a store whose data file was removed (STORE_CORRUPT)', async () => {
    const data = join(root, 'd-corrupt');
    await makeStore(keys, data);
    const dir = join(data, 'replica-1');
    copyFileSync(join(dir, 'data.mdb'), join(root, 'data.mdb.saved'));
    writeFileSync(join(dir, 'data.mdb'), Buffer.alloc(64 * 1024, 0x5a));
    expectOneLine(startFails({ data: dir }), 'STORE_CORRUPT', /damaged or not an LMDB file/);
    unlinkSync(join(dir, 'data.mdb'));
    expectOneLine(startFails({ data: dir }), 'STORE_CORRUPT', /refusing to start from empty watermarks/);
  });

  it('a data directory without a signing record: a new one, a mistyped one, an emptied volume (STORE_MISSING, nothing made)', async () => {
    // Never made: a new replica started without `replica init` (or keygen --data, dkg run, reshare inherit).
    const fresh = join(root, 'd-never-made');
    expectOneLine(startFails({ data: fresh }), 'STORE_MISSING', /no signing record in .*d-never-made.*replica init/);
    expect(existsSync(fresh)).toBe(false);
    // An emptied volume (or a mistyped --data that exists): a replica that granted, its files gone.
    const data = join(root, 'd-emptied');
    await makeStore(keys, data);
    for (const name of ['data.mdb', 'lock.mdb', 'signing-record.json'])
      rmSync(join(data, 'replica-1', name), { force: true });
    expectOneLine(startFails({ data: join(data, 'replica-1') }), 'STORE_MISSING', /reshare inherit/);
    expect(existsSync(join(data, 'replica-1', 'data.mdb'))).toBe(false);
  });

  it('a data directory in use by a live replica (STORE_LOCKED)', async () => {
    const local = await startLocalCluster({
      newStores: true,
      dir: keys,
      indices: [1],
      dataRoot: join(root, 'd-locked'),
    });
    try {
      expectOneLine(
        startFails({ data: local.replica(1).dataDir }),
        'STORE_LOCKED',
        new RegExp(`in use by process ${local.replica(1).pid}`),
      );
    } finally {
      await local.close();
    }
  });

  it('an unknown flag (INVALID_OPTION, exit 2)', () => {
    const result = startFails({ data: join(root, 'd-flag'), extra: ['--no-such-flag'] });
    expect(result.status).toBe(2);
    expect(result.stderr).toContain('(INVALID_OPTION)');
    expect(existsSync(join(root, 'd-flag'))).toBe(false);
  });
});

describe('where a replica listens', () => {
  /** Starts replica `index` of `clusterDir` with `extra` flags; resolves with its log lines once it listens. */
  async function startAndStop(clusterDir: string, index: number, data: string, extra: string[] = []) {
    const child = spawn(
      process.execPath,
      [
        replicaEntryPoint(),
        '--cluster',
        join(clusterDir, 'cluster.json'),
        '--key',
        join(clusterDir, `replica-${index}.key`),
        '--data',
        data,
        ...extra,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const exited = new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
    try {
      let stdout = '';
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no "listening" line: ${stdout}`)), 30_000);
        child.stdout.on('data', (chunk: Buffer) => {
          stdout += chunk.toString();
          if (stdout.includes('"listening"')) {
            clearTimeout(timer);
            resolve();
          }
        });
      });
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      return stdout
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as { msg: string; url?: string; level: number });
    } finally {
      child.kill('SIGKILL');
    }
  }

  it('without --listen, on the host and port of its own endpoint in cluster.json; a --listen on another port is logged as a warning', async () => {
    const base = await freePortRange(4);
    const dir = join(root, 'endpoint-listen');
    // keygen --data makes each replica's record: the key was just dealt.
    const made = spawnSync(
      process.execPath,
      [CLI_PATH, 'keygen', '--replicas', '4', '--out', dir, '--base-port', String(base), '--data', join(root, 'd-el')],
      { encoding: 'utf8', timeout: 30_000 },
    );
    expect(made.status, made.stderr).toBe(0);
    const lines = await startAndStop(dir, 3, join(root, 'd-el', 'replica-3'));
    expect(lines.find((l) => l.msg === 'listening')?.url).toBe(`ws://127.0.0.1:${base + 2}`);
    expect(lines.filter((l) => l.level >= 40)).toEqual([]);

    const [other] = await freePorts(1);
    const moved = await startAndStop(dir, 3, join(root, 'd-el', 'replica-3'), ['--listen', `127.0.0.1:${other}`]);
    expect(moved.find((l) => l.msg === 'listening')?.url).toBe(`ws://127.0.0.1:${other}`);
    expect(moved.find((l) => l.level === 40)?.msg).toContain(`is not the port of this replica's endpoint`);
  });

  it('refuses an endpoint that is not an address of this machine, naming it (INVALID_OPTION, exit 2)', () => {
    const dir = join(root, 'remote-endpoint');
    // Documentation addresses (RFC 5737), less one this machine happens to have (a sandbox may use TEST-NET-1).
    const own = new Set(Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((e) => e.address)));
    const remote = ['203.0.113.7', '198.51.100.7', '192.0.2.7'].find((address) => !own.has(address))!;
    const endpoints = [1, 2, 3, 4].map((i) => `ws://${remote}:${7000 + i}`).join(',');
    const made = spawnSync(
      process.execPath,
      [CLI_PATH, 'keygen', '--replicas', '4', '--out', dir, '--endpoints', endpoints],
      {
        encoding: 'utf8',
        timeout: 30_000,
      },
    );
    expect(made.status, made.stderr).toBe(0);
    const result = startFails({
      cluster: join(dir, 'cluster.json'),
      key: join(dir, 'replica-2.key'),
      data: join(root, 'd-remote'),
    });
    expect(result.status).toBe(2);
    expectOneLine(
      result,
      'INVALID_OPTION',
      new RegExp(
        `ws://${remote.replace(/\./g, '\\.')}:7002.*not an address of this machine.*--listen 0\\.0\\.0\\.0:7002`,
      ),
    );
  });
});

describe('S6 leases across a restart', () => {
  it('counts every recorded lease as running for maxTtl after a SIGKILL and restart, released ones too (releases are not fsynced)', async () => {
    const local = await startLocalCluster({
      newStores: true,
      dir: keys,
      indices: [1],
      dataRoot: join(root, 'd-restart-lease'),
      extraArgs: ['--min-ttl', '50ms', '--max-ttl', '1500ms'],
    });
    try {
      const replica = local.replica(1);
      const alice = await RawClient.open(replica.url);
      expect(outcomeOf(await alice.acquire('lease/held', 1n, 50)).status).toBe('granted');
      expect(outcomeOf(await alice.acquire('lease/released', 1n, 1_000)).status).toBe('granted');
      expect(outcomeOf(await alice.release('lease/released', 1n)).status).toBe('released');
      // Before the crash the release takes effect at once.
      const carol = await RawClient.open(replica.url);
      expect(outcomeOf(await carol.status('lease/released'))).toMatchObject({ epoch: 1n, leased: false });
      await carol.close();
      await replica.kill('SIGKILL');
      await replica.restart();
      const bob = await RawClient.open(replica.url);
      // Alice asked for 50 ms, but the replica forgot that: it must assume the longest lease, from the restart.
      const busy = outcomeOf(await bob.acquire('lease/held', 2n, 50));
      expect(busy.status).toBe('busy');
      expect((busy as { remainingMs: number }).remainingMs).toBeGreaterThan(500);
      expect(outcomeOf(await bob.status('lease/held'))).toMatchObject({ epoch: 1n, leased: true });
      // The release was not made durable, so after the crash it is treated like any recorded lease: never shortened.
      expect(outcomeOf(await bob.acquire('lease/released', 2n, 50)).status).toBe('busy');
      // The restart lease runs out on the replica's clock.
      await new Promise((r) => setTimeout(r, (busy as { remainingMs: number }).remainingMs + 50));
      expect(outcomeOf(await bob.acquire('lease/held', 2n, 50)).status).toBe('granted');
      expect(outcomeOf(await bob.acquire('lease/released', 2n, 50)).status).toBe('granted');
      await bob.close();
    } finally {
      await local.close();
    }
  });
});

describe('replica shutdown and transport', () => {
  it('on SIGTERM answers the requests in flight, closes connections with 1001, and exits 0', async () => {
    const local = await startLocalCluster({ newStores: true, dir: keys, indices: [1], dataRoot: join(root, 'd-term') });
    const replica = local.replica(1);
    const client = await RawClient.open(replica.url);
    const answers = Array.from({ length: 40 }, (_, k) => client.acquire(`term/${k}`, 1n));
    // Let the frames reach the replica before the signal.
    await new Promise((r) => setTimeout(r, 20));
    const code = await replica.stop();
    expect(code).toBe(0);
    const settled = await Promise.allSettled(answers);
    const granted = settled.filter(
      (s) => s.status === 'fulfilled' && 'outcome' in s.value && s.value.outcome.status === 'granted',
    ).length;
    // Everything sent before the signal is answered; nothing is left half-done.
    expect(granted).toBe(40);
    expect((await client.closed).code).toBe(CloseCode.GOING_AWAY);
    expect(replica.logLines().map((l) => l.msg)).toEqual(expect.arrayContaining(['listening', 'stopping', 'stopped']));
    await local.close();
  });

  it('exits when its launcher goes away (no orphans)', async () => {
    const init = spawnSync(
      process.execPath,
      [CLI_PATH, 'replica', 'init', '--data', join(root, 'd-orphan'), '--cluster', join(keys, 'cluster.json')].concat([
        '--key',
        join(keys, 'replica-1.key'),
      ]),
      { encoding: 'utf8', timeout: 30_000 },
    );
    expect(init.status, init.stderr).toBe(0);
    const child = spawn(
      process.execPath,
      [
        replicaEntryPoint(),
        '--cluster',
        join(keys, 'cluster.json'),
        '--key',
        join(keys, 'replica-1.key'),
        '--data',
        join(root, 'd-orphan'),
        '--listen',
        '127.0.0.1:0',
      ],
      {
        stdio: ['pipe', 'pipe', 'inherit'],
        env: { ...process.env, QUORUMFENCE_EXIT_WITH_STDIN: '1' },
      },
    );
    const exited = new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
    await new Promise<void>((resolve) =>
      child.stdout!.on('data', (chunk: Buffer) => chunk.toString().includes('"listening"') && resolve()),
    );
    child.stdin!.end();
    expect(await exited).toBe(0);
  });

  it('serves wss:// and https:// health with --tls-cert and --tls-key', async () => {
    const tlsDir = join(root, 'tls');
    const cert = makeSelfSignedCert(tlsDir);
    if (cert === undefined) return;
    const local = await startLocalCluster({
      newStores: true,
      dir: keys,
      indices: [1],
      dataRoot: join(root, 'd-tls'),
      extraArgs: ['--tls-cert', cert.certFile, '--tls-key', cert.keyFile],
    });
    try {
      const replica = local.replica(1);
      expect(replica.url).toMatch(/^wss:\/\/127\.0\.0\.1:\d+$/);
      expect(local.cluster.replicas[0]!.endpoint).toBe(replica.url);
      const client = await RawClient.open(replica.url, undefined, { ca: readFileSync(cert.certFile) });
      expect(outcomeOf(await client.acquire('tls/1', 1n)).status).toBe('granted');
      await client.close();
      // Plain ws:// to a TLS port fails.
      await expect(RawClient.connect(replica.url.replace('wss:', 'ws:'), { timeoutMs: 2_000 })).rejects.toThrow();
    } finally {
      await local.close();
    }
  });
});
