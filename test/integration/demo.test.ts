/**
 * `npm start` as a user runs it: the demo exits 0, shows the stale write
 * refused and the liar named; with --keep it stays up until Ctrl-C and then
 * leaves no process behind.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { fileURLToPath } from 'node:url';

const DEMO = fileURLToPath(new URL('../../dist/nodes/demo.js', import.meta.url));
const root = mkdtempSync(join(tmpdir(), 'qf-demo-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function run(args: string[], onOutput?: (text: string, child: ReturnType<typeof spawn>) => void) {
  const child = spawn(process.execPath, [DEMO, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => {
    stdout += chunk;
    onOutput?.(stdout, child);
  });
  child.stderr.on('data', (chunk) => (stderr += chunk));
  // A bound, not a target: the kept demo stays up while the test runs its printed commands.
  const timer = setTimeout(() => child.kill('SIGKILL'), 180_000);
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    }),
  );
}

function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port }, () => {
      socket.destroy();
      resolve(true);
    });
    socket.on('error', () => resolve(false));
  });
}

describe('npm start (the demo)', () => {
  it('refuses the stale write, survives a malicious replica, names it, and exits 0', async () => {
    const result = await run(['--dir', join(root, 'once')]);
    expect(result.stderr).toBe('');
    expect(result.code, result.stdout).toBe(0);
    // B's epoch is above A's, not necessarily the next one: B's attempt while A held the lease released its
    // epoch at the replicas it asked, and a released grant is not granted again (docs/protocol.md). The stale
    // write is refused at B's epoch, whatever it is.
    const epochOfB = /worker B {2}acquired demo\/orders at epoch (\d+) once A's lease had run out/.exec(
      result.stdout,
    )?.[1];
    expect(Number(epochOfB), result.stdout).toBeGreaterThan(1);
    expect(result.stdout).toContain(
      `PUT demo/orders total=101 with epoch 1 → 409 stale: barrier is ${epochOfB}, REFUSED`,
    );
    // Every token's epoch is the last one of its resource plus one, or the skip is explained right there.
    const epochs = [
      ...result.stdout.matchAll(
        /acquired demo\/orders at epoch (\d+)|demo\/ledger epoch +(\d+) → PUT|(skipped, not lost)/g,
      ),
    ];
    const last = new Map<string, number>([
      ['demo/orders', 0],
      ['demo/ledger', 0],
    ]);
    epochs.forEach((match, k) => {
      if (match[3]) return;
      const resource = match[1] ? 'demo/orders' : 'demo/ledger';
      const epoch = Number(match[1] ?? match[2]);
      const previous = last.get(resource);
      if (epoch > previous! + 1) expect(epochs[k - 1]?.[3], `${resource} ${previous} → ${epoch}`).toBeDefined();
      last.set(resource, epoch);
    });
    expect(last.get('demo/ledger'), result.stdout).toBeGreaterThan(0);
    expect(result.stdout).toContain(
      'take turns on demo/ledger, another resource: its epochs and its barrier are its own',
    );
    expect(result.stdout).toMatch(/stale write refused by the resource: yes/);
    expect(result.stdout).toMatch(/acquires with a malicious replica: (\d+) of \1 succeeded/);
    expect(result.stdout).toMatch(/replica 4 lied in [1-9]\d* of \d+ requests \((equivocate|garbage) \d+/);
    expect(result.stdout).toMatch(/history check .*: clean/);
    expect(result.stdout).toMatch(/liar named: replica 4\n/);
  });

  it('with --keep stays up; a second demo on its folder refuses and deletes nothing; the printed commands run as printed; Ctrl-C stops every process', async () => {
    const dir = join(root, 'keep');
    let ports: number[] = [];
    let interrupted = false;
    // A finished demo leaves its folder to the next run.
    const result = await run(['--dir', dir, '--rounds', '2'], undefined);
    expect(result.code, result.stdout).toBe(0);
    let second: Awaited<ReturnType<typeof run>> | undefined;
    let printed: ReturnType<typeof spawnSync> | undefined;
    let openWhileKept: boolean[] = [];
    let filesBefore: string[] = [];
    let filesAfter: string[] = [];
    let checked: () => void = () => undefined;
    const checksDone = new Promise<void>((resolve) => (checked = resolve));
    const kept = await run(['--dir', dir, '--rounds', '2', '--keep'], (text, child) => {
      if (interrupted || !text.includes('Press Ctrl-C')) return;
      interrupted = true;
      void (async () => {
        try {
          filesBefore = readdirSync(dir).sort();
          // Issue 47, item 1: a second `npm start -- --keep` used to delete the running demo's keys and stores.
          second = await run(['--dir', dir, '--rounds', '2', '--keep']);
          filesAfter = readdirSync(dir).sort();
          // Every command the demo printed, as printed, one after the other in one shell (the export carries over).
          const commands =
            /in this folder, these run\none after the other.*\n((?: {2}.*\n)+)/.exec(text)?.[1] ?? 'false';
          printed = spawnSync('bash', ['-euo', 'pipefail', '-c', commands.replace(/^ {2}/gm, '')], {
            encoding: 'utf8',
            timeout: 120_000,
          });
          const cluster = JSON.parse(readFileSync(join(dir, 'cluster.json'), 'utf8')) as {
            replicas: { endpoint: string }[];
          };
          ports = cluster.replicas.map((r) => Number(new URL(r.endpoint).port));
          openWhileKept = await Promise.all(ports.map(portOpen));
        } finally {
          checked();
          child.kill('SIGINT');
        }
      })();
    });
    await checksDone;
    expect(filesAfter).toEqual(filesBefore);
    expect(filesBefore).toEqual(expect.arrayContaining(['cluster.json', 'data', 'keys', 'me.key']));
    expect(second?.code).toBe(1);
    expect(second?.stdout).toBe('');
    expect(second?.stderr).toMatch(
      /^quorumfence-dev demo: a demo is running in .*keep \(process \d+\) and would lose its keys and stores; stop it first \(Ctrl-C in its terminal\), or run this one beside it with --dir OTHER .*\(STORE_LOCKED\)\n$/,
    );
    expect(printed?.status, `${String(printed?.stdout)}\n${String(printed?.stderr)}`).toBe(0);
    // The lock line's write went through the fence: the value is the one it PUT.
    const resourceUrl = /^ {2}curl -fsS (http:\/\/[^ ]+)\/log$/m.exec(kept.stdout)?.[1];
    expect(resourceUrl, kept.stdout).toBeDefined();
    expect(String(printed?.stdout)).toContain('valid token');
    expect(openWhileKept).toEqual([true, true, true, true]);
    expect(kept.stdout).toMatch(/export QUORUMFENCE_CLUSTER=.*cluster\.json QUORUMFENCE_IDENTITY=.*me\.key\n/);
    expect(kept.stdout).toContain('npm run -s quorumfence -- status demo/orders\n');
    expect(kept.code).toBe(130);
    expect(await Promise.all(ports.map(portOpen))).toEqual([false, false, false, false]);
    // Stopped, it gave its folder back: the next demo starts there.
    const after = await run(['--dir', dir, '--rounds', '1']);
    expect(after.code, after.stdout + after.stderr).toBe(0);
  }, 300_000);
});
