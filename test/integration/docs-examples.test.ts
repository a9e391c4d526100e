/**
 * Every code block of README.md, docs/*.md and src/*\/README.md marked runnable (docs/README.md, "Runnable
 * examples") runs as written, each in a fresh empty directory where the package is installed, as its own
 * process with a timeout, against real replicas: a block either starts its own cluster (the Quickstart) or,
 * marked `cluster`, uses the one this suite starts once. The blocks are read from the markdown here, so an
 * example that stops matching the code fails this test, named by file and line.
 */
import { spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createIdentityFile } from '../../src/client/identity.js';
import { clusterToJson } from '../../src/cluster/description.js';
import {
  dealLocalCluster,
  startLocalCluster,
  startLocalResource,
  type LocalCluster,
} from '../../src/cluster/launcher.js';
import type { LocalProcess } from '../../src/cluster/local-process.js';
import { CLI_PATH, DEV_CLI_PATH } from '../support/cli.js';
import { EXAMPLE_PORTS, examplePortsIn, mapPorts, repositoryBlocks, type DocBlock } from '../support/doc-blocks.js';
import { freePortRange, freePorts } from '../support/free-ports.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** One block's whole run: the Quickstart starts five servers and waits for them on a loaded 2-core box. */
const BLOCK_TIMEOUT_MS = 90_000;
/** After a block ends, how long what it left running (servers started with &) has to stop on SIGTERM. */
const STOP_GRACE_MS = 10_000;
/** What a failure shows of the block's output. */
const OUTPUT_TAIL = 6_000;

const blocks = repositoryBlocks(ROOT);
let work: string;
let shared: { local: LocalCluster; resource: LocalProcess; clusterFile: string } | undefined;
let counter = 0;

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'qf-docs-'));
  if (!blocks.some((b) => b.cluster)) return;
  dealLocalCluster(join(work, 'keys'), 4);
  const local = await startLocalCluster({ newStores: true, dir: join(work, 'keys'), dataRoot: join(work, 'data') });
  const clusterFile = join(work, 'cluster.json');
  writeFileSync(clusterFile, JSON.stringify(clusterToJson(local.cluster), null, 2) + '\n');
  const resource = await startLocalResource({ clusterFile, dataDir: join(work, 'data', 'resource') });
  shared = { local, resource, clusterFile };
}, 120_000);

afterAll(async () => {
  await shared?.resource.stop();
  await shared?.local.close();
  rmSync(work, { recursive: true, force: true });
}, 60_000);

/** A fresh directory where `quorumfence` is installed: node_modules/quorumfence and its commands on PATH. */
function installedDirectory(block: DocBlock): string {
  const dir = join(work, `block-${++counter}`);
  mkdirSync(join(dir, 'node_modules', '.bin'), { recursive: true });
  symlinkSync(ROOT, join(dir, 'node_modules', 'quorumfence'), 'dir');
  for (const [name, entry] of [
    ['quorumfence', CLI_PATH],
    ['quorumfence-dev', DEV_CLI_PATH],
  ] as const) {
    const shim = join(dir, 'node_modules', '.bin', name);
    writeFileSync(shim, `#!/bin/sh\nexec "${process.execPath}" "${entry}" "$@"\n`);
    chmodSync(shim, 0o755);
  }
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'docs-example', private: true, type: 'module' }));
  if (block.cluster) {
    mkdirSync(join(dir, 'cluster'));
    writeFileSync(join(dir, 'cluster', 'cluster.json'), JSON.stringify(clusterToJson(shared!.local.cluster), null, 2));
    createIdentityFile(join(dir, 'me.key'));
  }
  return dir;
}

/** Where each example port the block names goes: the shared cluster's servers, or free ports. */
async function portsFor(block: DocBlock): Promise<Map<number, number>> {
  const used = new Set(examplePortsIn(block.code));
  const map = new Map<number, number>();
  if (block.cluster) {
    EXAMPLE_PORTS.replicas.forEach((port, k) => map.set(port, shared!.local.replica(k + 1).port));
    map.set(EXAMPLE_PORTS.resource, shared!.resource.port);
  }
  for (const group of [EXAMPLE_PORTS.replicas, EXAMPLE_PORTS.ceremony]) {
    if (!group.some((port) => used.has(port) && !map.has(port))) continue;
    // Consecutive, as keygen --base-port counts them.
    const base = await freePortRange(group.length);
    group.forEach((port, k) => map.set(port, base + k));
  }
  const single = [EXAMPLE_PORTS.resource, EXAMPLE_PORTS.console].filter((port) => used.has(port) && !map.has(port));
  const free = await freePorts(single.length);
  single.forEach((port, k) => map.set(port, free[k]!));
  return new Map([...map].filter(([port]) => used.has(port)));
}

interface BlockRun {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly output: string;
  readonly timedOut: boolean;
}

/** Signals a whole process group and waits (bounded) until it is gone. */
async function stopGroup(pid: number): Promise<void> {
  const alive = () => {
    try {
      process.kill(-pid, 0);
      return true;
    } catch {
      return false;
    }
  };
  if (!alive()) return;
  process.kill(-pid, 'SIGTERM');
  const deadline = Date.now() + STOP_GRACE_MS;
  while (alive() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  if (alive()) process.kill(-pid, 'SIGKILL');
}

/** Runs one block in `dir` as its own process group; whatever it started is stopped after it ends. */
async function runBlock(block: DocBlock, dir: string, code: string): Promise<BlockRun> {
  let argv: string[];
  if (block.language === 'sh') {
    writeFileSync(join(dir, 'example.sh'), code);
    argv = ['bash', '-euo', 'pipefail', 'example.sh'];
  } else {
    const source =
      block.language === 'ts'
        ? ts.transpileModule(code, {
            compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
            reportDiagnostics: false,
          }).outputText
        : code;
    writeFileSync(join(dir, 'example.mjs'), source);
    argv =
      block.lock === undefined
        ? [process.execPath, 'example.mjs']
        : [
            process.execPath,
            CLI_PATH,
            'lock',
            block.lock,
            '--cluster',
            'cluster/cluster.json',
            '--identity',
            'me.key',
            '--',
            process.execPath,
            'example.mjs',
          ];
  }
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PATH: `${join(dir, 'node_modules', '.bin')}:${process.env.PATH ?? ''}`,
    // npx finds the installed command and never asks a registry.
    npm_config_offline: 'true',
    npm_config_update_notifier: 'false',
  };
  delete env.QUORUMFENCE_CLUSTER;
  delete env.QUORUMFENCE_IDENTITY;
  const child = spawn(argv[0]!, argv.slice(1), { cwd: dir, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-OUTPUT_TAIL);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
  }, BLOCK_TIMEOUT_MS);
  const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
  // 'exit', not 'close': servers the block started with & hold its output open until they are stopped.
  const [exitCode, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (c, s) => resolve([c, s]));
  });
  clearTimeout(timer);
  if (child.pid !== undefined) await stopGroup(child.pid);
  await closed;
  return { code: exitCode, signal, output, timedOut };
}

function describeFailure(block: DocBlock, run: BlockRun): string {
  const how = run.timedOut ? `did not finish in ${BLOCK_TIMEOUT_MS} ms` : `exited ${run.code ?? run.signal}`;
  return `${block.file}:${block.line} (${block.language} runnable${block.cluster ? ' cluster' : ''}) ${how}\n--- output (last ${OUTPUT_TAIL} characters) ---\n${run.output}`;
}

describe('runnable documentation', () => {
  it('finds the marked blocks: the README examples among them', () => {
    const readme = blocks.filter((b) => b.file === 'README.md');
    expect(readme.length, blocks.map((b) => `${b.file}:${b.line}`).join('\n')).toBeGreaterThanOrEqual(6);
  });

  it.each(blocks.map((block) => [`${block.file}:${block.line}`, block] as const))(
    '%s runs as written',
    async (_name, block) => {
      const dir = installedDirectory(block);
      const run = await runBlock(block, dir, mapPorts(block.code, await portsFor(block)));
      expect(run.code, describeFailure(block, run)).toBe(0);
    },
    BLOCK_TIMEOUT_MS + STOP_GRACE_MS + 30_000,
  );

  it('a broken example fails, named by its file and line (the runner does not pass what it cannot run)', async () => {
    const broken: DocBlock[] = [
      {
        file: 'planted.md',
        line: 3,
        language: 'sh',
        cluster: false,
        lock: undefined,
        code: 'true\nfalse\necho after\n',
      },
      {
        file: 'planted.md',
        line: 9,
        language: 'js',
        cluster: false,
        lock: undefined,
        code: "import { loadClusterFile } from 'quorumfence/client';\nconsole.log(loadClusterFile, clusterId);\n",
      },
      {
        file: 'planted.md',
        line: 15,
        language: 'ts',
        cluster: false,
        lock: undefined,
        code: "import { LmdbGuard } from 'quorumfence/guard/lmdb';\nconst guard: LmdbGuard = await LmdbGuard.open('./data', undefined as never);\n",
      },
    ];
    for (const block of broken) {
      const run = await runBlock(block, installedDirectory(block), block.code);
      expect(run.code, block.code).not.toBe(0);
      expect(describeFailure(block, run)).toMatch(new RegExp(`^planted\\.md:${block.line} `));
    }
  });
});
