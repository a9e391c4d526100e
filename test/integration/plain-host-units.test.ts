/**
 * The systemd units of docs/operations.md ("On plain hosts"), read from the document: each passes
 * `systemd-analyze verify` with nothing to say, and its ExecStart command runs as written until it listens,
 * with only its two folders (/etc/quorumfence, /var/lib/quorumfence) moved into a temporary one and a fixed
 * port made free. So a flag renamed or removed, or a unit key misspelt, fails here.
 */
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI_PATH, runCli } from '../support/cli.js';
import { fencedBlocks } from '../support/doc-blocks.js';
import { freePortRange, freePorts } from '../support/free-ports.js';
import { lacks, needs } from '../support/system-tools.js';

const OPERATIONS = readFileSync(new URL('../../docs/operations.md', import.meta.url), 'utf8');

interface Unit {
  readonly path: string;
  readonly text: string;
  /** The words of ExecStart after `/usr/bin/env quorumfence`. */
  readonly args: readonly string[];
}

/** The unit files the document shows: ini blocks whose first line names their path under /etc/systemd/system. */
const units: Unit[] = fencedBlocks('docs/operations.md', OPERATIONS)
  .filter((block) => block.language === 'ini')
  .map((block) => {
    const path = /^# (\/etc\/systemd\/system\/[\w-]+\.service)\n/.exec(block.code)?.[1];
    if (path === undefined)
      throw new Error(
        `docs/operations.md:${block.line}: a unit block starts with "# /etc/systemd/system/NAME.service"`,
      );
    const exec = /^ExecStart=\/usr\/bin\/env quorumfence (.+)$/m.exec(block.code)?.[1];
    if (exec === undefined) throw new Error(`docs/operations.md:${block.line}: ExecStart=/usr/bin/env quorumfence ...`);
    return { path, text: block.code, args: exec.split(/\s+/) };
  });

let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'qf-units-'));
  // What the setup commands put in /etc/quorumfence, made the Quickstart's way, on free ports.
  const base = await freePortRange(4);
  const keys = join(dir, 'keys');
  const keygen = await runCli(['keygen', '--replicas', '4', '--out', keys, '--base-port', String(base)]);
  expect(keygen.code, keygen.stderr).toBe(0);
  mkdirSync(join(dir, 'etc'));
  mkdirSync(join(dir, 'var'));
  copyFileSync(join(keys, 'cluster.json'), join(dir, 'etc', 'cluster.json'));
  copyFileSync(join(keys, 'replica-1.key'), join(dir, 'etc', 'replica.key'));
  writeFileSync(join(dir, 'etc', 'operator-secret'), 'an-operator-secret-of-enough-length\n', { mode: 0o600 });
  // The setup's `replica init`, as written there: a replica never makes its signing record itself.
  const init = /^runuser -u quorumfence -- quorumfence (replica init .+)$/m.exec(OPERATIONS)?.[1];
  expect(init, 'docs/operations.md runs "replica init" before the unit first starts').toBeDefined();
  const initialized = await runCli(await onThisMachine(init!.split(/\s+/)));
  expect(initialized.code, initialized.stderr).toBe(0);
}, 60_000);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The ExecStart words with the host's folders moved under the test's, and 0.0.0.0:PORT made a free loopback one. */
async function onThisMachine(args: readonly string[]): Promise<string[]> {
  const [free] = await freePorts(1);
  return args.map((word) =>
    word
      .replace(/^\/etc\/quorumfence\//, `${join(dir, 'etc')}/`)
      .replace(/^\/var\/lib\/quorumfence\//, `${join(dir, 'var')}/`)
      .replace(/^0\.0\.0\.0:\d+$/, `127.0.0.1:${free}`),
  );
}

describe('the systemd units of docs/operations.md', () => {
  it('are there: a replica and the resource', () => {
    expect(units.map((unit) => unit.path)).toEqual([
      '/etc/systemd/system/quorumfence-replica.service',
      '/etc/systemd/system/quorumfence-resource.service',
    ]);
  });

  it.skipIf(lacks('systemd-analyze'))(
    `pass systemd-analyze verify with nothing to say ${needs('systemd-analyze')}`,
    () => {
      for (const unit of units) {
        const file = join(dir, unit.path.split('/').at(-1)!);
        writeFileSync(file, unit.text);
        const verified = spawnSync('systemd-analyze', ['verify', file], { encoding: 'utf8', timeout: 30_000 });
        expect([verified.status, verified.stdout + verified.stderr], unit.path).toEqual([0, '']);
      }
      // The check can fail: a misspelt key is reported.
      const misspelt = join(dir, 'misspelt.service');
      writeFileSync(misspelt, units[0]!.text.replace('RestartSec=', 'RestartSecs='));
      const refused = spawnSync('systemd-analyze', ['verify', misspelt], { encoding: 'utf8', timeout: 30_000 });
      expect(refused.stderr).toMatch(/Unknown key 'RestartSecs'/);
    },
  );

  it.each(units.map((unit) => [unit.path, unit] as const))(
    '%s: its ExecStart command runs as written until it listens, and stops on SIGTERM',
    async (_path, unit) => {
      const child = spawn(process.execPath, [CLI_PATH, ...(await onThisMachine(unit.args))], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout.on('data', (chunk) => (output += chunk));
      child.stderr.on('data', (chunk) => (output += chunk));
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      try {
        await new Promise<void>((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`no "listening" line within 30 s:\n${output}`)), 30_000);
          child.stdout.on('data', () => {
            if (output.includes('"msg":"listening"')) {
              clearTimeout(timer);
              resolve();
            }
          });
          void exited.then((code) => {
            clearTimeout(timer);
            reject(new Error(`exited ${code} before listening:\n${output}`));
          });
        });
        child.kill('SIGTERM');
        expect(await exited, output).toBe(0);
      } finally {
        child.kill('SIGKILL');
      }
    },
    60_000,
  );
});
