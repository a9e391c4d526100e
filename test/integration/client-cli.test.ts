/**
 * The client verbs as a user runs them: `identity`, `acquire`, `status`,
 * as real processes against real replicas, with one-line errors for the
 * mistakes a user can make.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clusterToJson, withEndpoints } from '../../src/cluster/description.js';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { checkToken } from '../../src/token/admission-token.js';
import { CLI_PATH, runCli } from '../support/cli.js';

let dir: string;
let local: LocalCluster | undefined;
let clusterFile: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'qf-client-cli-'));
  dealLocalCluster(join(dir, 'keys'), 4);
  local = await startLocalCluster({ newStores: true, dir: join(dir, 'keys'), dataRoot: join(dir, 'data') });
  clusterFile = join(dir, 'cluster.json');
  writeFileSync(clusterFile, JSON.stringify(clusterToJson(local.cluster)));
}, 60_000);

afterAll(async () => {
  await local?.close();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

describe('quorumfence identity', () => {
  it('new writes a 0600 key file and refuses to overwrite it; show prints the same public key', async () => {
    const file = join(dir, 'alice.key');
    const made = await runCli(['identity', 'new', file, '--json']);
    expect(made.code).toBe(0);
    const { publicKey } = JSON.parse(made.stdout) as { publicKey: string };
    expect(publicKey).toMatch(/^[0-9a-f]{64}$/);
    expect(statSync(file).mode & 0o777).toBe(0o600);

    const again = await runCli(['identity', 'new', file]);
    expect(again.code).toBe(1);
    expect(again.stderr.trim().split('\n')).toHaveLength(1);
    expect(again.stderr).toContain('FILE_EXISTS');

    const shown = await runCli(['identity', 'show', file]);
    expect(shown.code).toBe(0);
    expect(shown.stdout.trim()).toBe(publicKey);

    // --if-missing (deployments run it at every start) keeps the identity and prints its key; a file that is
    // not an identity is refused, not replaced.
    expect(JSON.parse(made.stdout)).toEqual({ file, publicKey, created: true });
    const kept = await runCli(['identity', 'new', file, '--if-missing', '--json']);
    expect(kept.code, kept.stderr).toBe(0);
    expect(JSON.parse(kept.stdout)).toEqual({ file, publicKey, created: false });
    // In text, too, it says it kept the file (it used to print "wrote").
    const keptText = await runCli(['identity', 'new', file, '--if-missing']);
    expect(keptText.code, keptText.stderr).toBe(0);
    expect(keptText.stdout).toBe(`kept ${file} (it exists; --if-missing)\npublic key ${publicKey}\n`);
    expect((await runCli(['identity', 'show', file])).stdout.trim()).toBe(publicKey);
    const garbage = join(dir, 'not-an-identity.key');
    writeFileSync(garbage, 'not json');
    const refused = await runCli(['identity', 'new', garbage, '--if-missing']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('BAD_KEY_FILE');
    expect(readFileSync(garbage, 'utf8')).toBe('not json');
    const fresh = join(dir, 'fresh.key');
    const made2 = await runCli(['identity', 'new', fresh, '--if-missing', '--json']);
    expect(made2.code).toBe(0);
    expect((JSON.parse(made2.stdout) as { publicKey: string }).publicKey).not.toBe(publicKey);
    const misplaced = await runCli(['identity', 'show', file, '--if-missing']);
    expect([misplaced.code, misplaced.stderr]).toEqual([2, expect.stringContaining('INVALID_OPTION')]);
  });
});

describe('quorumfence resource', () => {
  it('a port in use and a data directory in use: one line each with its code, no stack trace (issue 47, items 5 and 9)', async () => {
    const data = join(dir, 'resource-data');
    const first = spawn(
      process.execPath,
      [CLI_PATH, 'resource', '--cluster', clusterFile, '--data', data, '--listen', '127.0.0.1:0'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let out = '';
        const timer = setTimeout(() => reject(new Error(`no "listening" line: ${out}`)), 20_000);
        first.stdout.on('data', (chunk) => {
          out += chunk;
          const match = /"url":"(http:\/\/[^"]+)"/.exec(out);
          if (match) {
            clearTimeout(timer);
            resolve(match[1]!);
          }
        });
      });
      const port = new URL(url).port;
      const portTaken = await runCli([
        'resource',
        '--cluster',
        clusterFile,
        '--data',
        join(dir, 'resource-other'),
        '--listen',
        `127.0.0.1:${port}`,
      ]);
      expect(portTaken.code).toBe(1);
      expect(portTaken.stderr).toBe(
        `quorumfence resource: cannot listen on 127.0.0.1:${port}: the address is in use (another resource, or another program, listens there); pass another --listen HOST:PORT (IO_ERROR)\n`,
      );
      const dataTaken = await runCli(['resource', '--cluster', clusterFile, '--data', data, '--listen', '127.0.0.1:0']);
      expect(dataTaken.code).toBe(1);
      expect(dataTaken.stderr.trim().split('\n')).toHaveLength(1);
      expect(dataTaken.stderr).toContain(`data directory ${data} is in use by process ${first.pid}`);
      expect(dataTaken.stderr).toMatch(/\(STORE_LOCKED\)\n$/);
      // The first one still serves.
      expect((await fetch(`${url}/healthz`)).status).toBe(200);
    } finally {
      first.kill('SIGTERM');
      await new Promise((resolve) => first.once('exit', resolve));
    }
    // Stopped, it gave the directory back: another resource starts on it.
    const again = spawn(process.execPath, [CLI_PATH, 'resource', '--cluster', clusterFile, '--data', data], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('the second resource did not start')), 20_000);
        again.stdout.on('data', (chunk: Buffer) => {
          if (chunk.toString().includes('listening')) {
            clearTimeout(timer);
            resolve();
          }
        });
        again.once('exit', (code) => reject(new Error(`the second resource exited ${code}`)));
      });
    } finally {
      again.kill('SIGTERM');
    }
  });
});

describe('quorumfence acquire and status', () => {
  it('acquire prints a token that verifies; a second holder is told the resource is busy; status shows the lease', async () => {
    const alice = join(dir, 'acquire-alice.key');
    const bob = join(dir, 'acquire-bob.key');
    expect((await runCli(['identity', 'new', alice])).code).toBe(0);
    expect((await runCli(['identity', 'new', bob])).code).toBe(0);

    const acquired = await runCli([
      'acquire',
      'cli/orders',
      '--cluster',
      clusterFile,
      '--identity',
      alice,
      '--ttl',
      '20s',
      '--json',
    ]);
    expect(acquired.code, acquired.stderr).toBe(0);
    const out = JSON.parse(acquired.stdout) as { ok: boolean; epoch: string; token: string };
    expect(out.ok).toBe(true);
    expect(out.epoch).toBe('1');
    const check = checkToken(out.token, local!.cluster);
    expect(check.ok && check.token.grant.resource).toBe('cli/orders');

    const busy = await runCli(['acquire', 'cli/orders', '--cluster', clusterFile, '--identity', bob]);
    expect(busy.code).toBe(1);
    expect(busy.stderr.trim().split('\n')).toHaveLength(1);
    expect(busy.stderr).toMatch(/busy: .*--wait/);

    const status = await runCli(['status', 'cli/orders', '--cluster', clusterFile, '--identity', bob, '--json']);
    expect(status.code).toBe(0);
    const view = JSON.parse(status.stdout) as {
      epoch: string;
      leased: boolean;
      replicas: { state: string; epoch: string }[];
    };
    expect(view.epoch).toBe('1');
    expect(view.leased).toBe(true);
    expect(view.replicas.map((r) => r.state)).toEqual(['ok', 'ok', 'ok', 'ok']);

    const text = await runCli(['status', 'cli/orders', '--cluster', clusterFile, '--identity', bob]);
    expect(text.code).toBe(0);
    expect(text.stdout).toContain('epoch 1, leased');
  });

  it('acquire --hold keeps the lease until interrupted, then releases it', async () => {
    const carol = join(dir, 'hold-carol.key');
    expect((await runCli(['identity', 'new', carol])).code).toBe(0);
    const child = spawn(
      process.execPath,
      [CLI_PATH, 'acquire', 'cli/held', '--cluster', clusterFile, '--identity', carol, '--ttl', '1s', '--hold'],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      let stderr = '';
      child.stderr.on('data', (chunk) => (stderr += chunk));
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no "holding" line: ${stderr}`)), 15_000);
        child.stderr.on('data', () => {
          if (stderr.includes('holding')) {
            clearTimeout(timer);
            resolve();
          }
        });
      });
      // Longer than the 1 s ttl: only renewals keep it.
      await new Promise((r) => setTimeout(r, 1500));
      const during = await runCli(['status', 'cli/held', '--cluster', clusterFile, '--identity', carol, '--json']);
      expect((JSON.parse(during.stdout) as { leased: boolean }).leased).toBe(true);
      child.kill('SIGINT');
      expect(await exited).toBe(0);
      expect(stderr).toContain('released');
      const after = await runCli(['status', 'cli/held', '--cluster', clusterFile, '--identity', carol, '--json']);
      expect((JSON.parse(after.stdout) as { leased: boolean }).leased).toBe(false);
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('user mistakes give one line that says what to do', async () => {
    const dave = join(dir, 'mistakes-dave.key');
    expect((await runCli(['identity', 'new', dave])).code).toBe(0);

    const noIdentity = await runCli(['acquire', 'x', '--cluster', clusterFile, '--identity', join(dir, 'missing.key')]);
    expect(noIdentity.code).toBe(1);
    expect(noIdentity.stderr.trim().split('\n')).toHaveLength(1);
    expect(noIdentity.stderr).toContain('quorumfence identity new');

    const noCluster = await runCli(['acquire', 'x', '--cluster', join(dir, 'missing.json'), '--identity', dave]);
    expect(noCluster.code).toBe(1);
    expect(noCluster.stderr.trim().split('\n')).toHaveLength(1);
    expect(noCluster.stderr).toContain('keygen');

    // Every endpoint points at a port nothing listens on (the replicas' own ports, shifted to closed ones).
    const deadFile = join(dir, 'dead-cluster.json');
    const dead = withEndpoints(
      local!.cluster,
      local!.cluster.replicas.map((_, k) => `ws://127.0.0.1:${9 + k}`),
    );
    writeFileSync(deadFile, JSON.stringify(clusterToJson(dead)));
    const unreachable = await runCli(['status', 'x', '--cluster', deadFile, '--identity', dave]);
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr.trim().split('\n')).toHaveLength(1);
    expect(unreachable.stderr).toContain('no replica of the cluster is reachable');

    // A name that is not UTF-8 on the command line is refused, not turned into U+FFFD (issue 47, item 9): the
    // bytes come from a shell, since node's own spawn can only pass UTF-8.
    for (const verb of ['acquire', 'status']) {
      const notUtf8 = spawnSync(
        'bash',
        [
          '-c',
          `exec "$0" "$1" ${verb} $'orders/\\xff' --cluster "$2" --identity "$3"`,
          process.execPath,
          CLI_PATH,
          clusterFile,
          dave,
        ],
        { encoding: 'utf8', timeout: 30_000 },
      );
      expect(notUtf8.status, verb).toBe(1);
      expect(notUtf8.stderr.trim().split('\n')).toHaveLength(1);
      expect(notUtf8.stderr).toMatch(/was not well-formed UTF-8 on the command line.*\(RESOURCE_NOT_UTF8\)\n$/);
    }

    const noFlag = await runCli(['acquire', 'x', '--identity', dave]);
    expect(noFlag.code).toBe(2);
    expect(noFlag.stderr).toContain('--cluster is required');
  });
});
