/**
 * Every code block of README.md, docs/*.md and src/*\/README.md marked runnable (docs/README.md, "Runnable
 * examples") runs as written, each in a fresh project made by `npm init -y` (CommonJS by default, as a new
 * user's is) where the package is installed, as its own process with a timeout, against real replicas: a block
 * either starts its own cluster (the Quickstart) or, marked `cluster`, uses the one this suite starts once. A
 * TypeScript block is type-checked (strict, with the package's own declarations) before it runs. The blocks
 * are read from the markdown here, so an example that stops matching the code fails this test, named by file
 * and line. And every command block of README.md and docs/ (shell, JavaScript, TypeScript) is either run here
 * or listed below (NOT_RUN) with the reason it cannot run on one machine and the test that runs its equivalent;
 * a command block that is neither fails the test.
 */
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
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
import {
  EXAMPLE_PORTS,
  examplePortsIn,
  mapPorts,
  repositoryBlocks,
  repositoryCommandBlocks,
  uncoveredBlocks,
  type DocBlock,
  type NotRunBlock,
} from '../support/doc-blocks.js';
import { freePortRange, freePorts } from '../support/free-ports.js';
import { itInLongTier } from '../support/tier.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/**
 * One block's whole run: the Quickstart starts five servers and waits for them, the key ceremony four members
 * and four replicas, on a 2-core box others load too (the ceremony's took 93 s at load average 15).
 */
const BLOCK_TIMEOUT_MS = 150_000;
/** After a block ends, how long what it left running (servers started with &) has to stop on SIGTERM. */
const STOP_GRACE_MS = 10_000;
/** What a failure shows of the block's output. */
const OUTPUT_TAIL = 6_000;

const blocks = repositoryBlocks(ROOT);

/**
 * Runnable blocks that run only in the long tier (test/support/tier.ts): minutes on a loaded 2-core box. npm test
 * runs the same commands, as operators type them, in the file named.
 */
const LONG_TIER_BLOCKS: readonly Required<Pick<NotRunBlock, 'file' | 'starts' | 'runBy'>>[] = [
  {
    file: 'README.md',
    starts: '# each member i makes its node key',
    runBy: 'test/integration/cli-dkg.test.ts',
  },
];
const inLongTier = (block: DocBlock) =>
  LONG_TIER_BLOCKS.some((entry) => entry.file === block.file && block.code.trimStart().startsWith(entry.starts));
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

/**
 * The command blocks of README.md and docs/ that this test does not run, each with the reason it cannot run on
 * one machine here and, where one exists, the test that runs the same commands (or their equivalent) instead.
 * A block is named by its first line: line numbers move as the documents change.
 */
const NOT_RUN: readonly NotRunBlock[] = [
  {
    file: 'README.md',
    starts: 'npm install && npm start',
    reason:
      'the repository itself: npm start builds and plays the demo, which demo.test.ts runs (the build done first); npm test is this suite',
    runBy: 'test/integration/demo.test.ts',
  },
  {
    file: 'README.md',
    starts: 'npm ci && npm run build && deploy/docker/local-image.sh',
    reason:
      'needs a Docker engine and minutes of image building; compose-engine.test.ts builds the image this way and runs the story in a real engine (compose.test.ts runs every service as local processes)',
    runBy: 'test/integration/compose-engine.test.ts',
  },
  {
    file: 'README.md',
    starts: 'kubectl apply -k deploy/kubernetes',
    reason: 'needs a Kubernetes cluster; deploy-tools.test.ts renders the manifests with kubectl kustomize',
    runBy: 'test/integration/deploy-tools.test.ts',
  },
  {
    file: 'README.md',
    starts: 'npm run bench -- --rtt 0,2ms,20ms',
    reason:
      'a benchmark runs for minutes on a quiet machine; bench-sections.test.ts runs every section at its smallest size',
    runBy: 'test/integration/bench-sections.test.ts',
  },
  {
    file: 'docs/performance.md',
    starts: 'npm run bench -- system etcd                # quorumfence and etcd side by side',
    reason:
      'a benchmark runs for minutes on a quiet machine; bench-sections.test.ts runs every section at its smallest size',
    runBy: 'test/integration/bench-sections.test.ts',
  },
  {
    file: 'docs/performance.md',
    starts: 'npm run bench -- system etcd --rtt 2ms --out bench-results/gray.json',
    reason:
      'a benchmark runs for minutes on a quiet machine; bench-sections.test.ts runs every gray fault at its smallest size',
    runBy: 'test/integration/bench-sections.test.ts',
  },
  {
    file: 'docs/testing.md',
    starts: 'npm run build',
    reason:
      'the simulator from a clone (quorumfence-dev is not in the package); simulate.test.ts runs this command and checks the digest published beside it',
    runBy: 'test/simulation/simulate.test.ts',
  },
  {
    file: 'docs/guard-postgres.md',
    starts: "import pg from 'pg';",
    reason:
      'a fragment of a service (its cluster, token and request come from around it) against a PostgreSQL server; the PostgreSQL guard tests make these calls',
    runBy: 'test/integration/postgres-guard-statement.test.ts',
  },
  {
    file: 'docs/resharing.md',
    starts: '# on each surviving old replica, stopped',
    reason:
      'one command per member on several hosts, with placeholders (<i>, /data/...); cli-reshare.test.ts runs these steps in order on real processes',
    runBy: 'test/integration/cli-reshare.test.ts',
  },
  {
    file: 'docs/resharing.md',
    starts: '# every old replica frozen and exported as above',
    reason:
      'one command per member on several hosts, with placeholders; cli-reshare.test.ts takes live replicas 7 -> 4 with dealers outside the new set',
    runBy: 'test/integration/cli-reshare.test.ts',
  },
  {
    file: 'docs/operations.md',
    starts: 'useradd --system',
    reason:
      "changes the host it runs on (a system user, /etc, systemd); plain-host-units.test.ts verifies the units with systemd-analyze and runs each one's ExecStart",
    runBy: 'test/integration/plain-host-units.test.ts',
  },
  {
    file: 'docs/operations.md',
    starts: '# make-certificates',
    reason: 'run as written by deploy-tools.test.ts, which then checks the certificates as the scrape does',
    runBy: 'test/integration/deploy-tools.test.ts',
  },
  ...[
    'kubectl apply -f deploy/kubernetes/namespace.yaml',
    'for i in 1 2 3 4; do kubectl -n quorumfence logs',
    'quorumfence dkg propose --member card-1.json',
    'for i in 1 2 3 4; do kubectl -n quorumfence exec',
    'kubectl -n quorumfence port-forward',
    'kubectl -n quorumfence logs quorumfence-replica-2-0',
  ].map((starts) => ({
    file: 'docs/operations.md',
    starts,
    reason:
      'needs a Kubernetes cluster; deploy-tools.test.ts renders the manifests and kubernetes-manifests.test.ts validates them offline',
    runBy: 'test/integration/deploy-tools.test.ts',
  })),
];

/** A fresh project made as a new user makes one (`npm init -y`: CommonJS by default), nothing installed. */
function freshProject(): string {
  const dir = join(work, `block-${++counter}`);
  mkdirSync(dir);
  execFileSync('npm', ['init', '-y'], { cwd: dir, env: npmEnvironment(), stdio: 'ignore', timeout: 60_000 });
  return dir;
}

/** npm as the blocks run it: never asking a registry for what its cache holds, never printing notices. */
function npmEnvironment(): NodeJS.ProcessEnv {
  return { ...process.env, npm_config_offline: 'true', npm_config_update_notifier: 'false', npm_config_fund: 'false' };
}

/**
 * The folder a block runs in: a fresh `npm init -y` project where `quorumfence` is installed
 * (node_modules/quorumfence and its commands on PATH) or, for a `checkout=PATH` block (which installs the
 * package itself), nothing installed and a clone of this repository at PATH.
 */
function installedDirectory(block: DocBlock): string {
  if (block.checkout !== undefined) {
    // The block makes its project itself, from an empty folder.
    const dir = join(work, `block-${++counter}`);
    mkdirSync(dir);
    const clone = resolve(dir, block.checkout);
    if (!existsSync(clone)) {
      mkdirSync(dirname(clone), { recursive: true });
      symlinkSync(ROOT, clone, 'dir');
    }
    return dir;
  }
  const dir = freshProject();
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

/**
 * Type-checks a TypeScript example as a user's project would compile it: strict, Node's ES module rules, the
 * package's own declarations (and @types/node) from where it is installed.
 * @returns the compiler's diagnostics, one per line; empty when it type-checks
 */
function typeCheck(file: string): string {
  const program = ts.createProgram([file], {
    strict: true,
    noEmit: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    types: ['node'],
    typeRoots: [join(ROOT, 'node_modules', '@types')],
    skipLibCheck: true,
  });
  return ts
    .getPreEmitDiagnostics(program)
    .map((d) => {
      const where = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start) : undefined;
      const at = where ? `${d.file!.fileName}:${where.line + 1}:${where.character + 1}: ` : '';
      return `${at}${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
    })
    .join('\n');
}

/** The script of a js or ts block, written where the prose names it; returns the .mjs file node runs. */
function writeScript(block: DocBlock, dir: string, code: string): { run: string } | { typeErrors: string } {
  const name = block.script ?? (block.language === 'ts' ? 'example.mts' : 'example.mjs');
  writeFileSync(join(dir, name), code);
  if (block.language === 'js') return { run: name };
  const typeErrors = typeCheck(join(dir, name));
  if (typeErrors !== '') return { typeErrors };
  // What tsc emits for an .mts: the same module with its types stripped, as .mjs beside it.
  const run = name.replace(/\.mts$/, '.mjs');
  const output = ts.transpileModule(code, {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
    reportDiagnostics: false,
  }).outputText;
  writeFileSync(join(dir, run), output);
  return { run };
}

/** Runs one block in `dir` as its own process group; whatever it started is stopped after it ends. */
async function runBlock(block: DocBlock, dir: string, code: string): Promise<BlockRun> {
  let argv: string[];
  const env: NodeJS.ProcessEnv = {
    ...npmEnvironment(),
    PATH: `${join(dir, 'node_modules', '.bin')}:${process.env.PATH ?? ''}`,
  };
  delete env.QUORUMFENCE_CLUSTER;
  delete env.QUORUMFENCE_IDENTITY;
  if (block.checkout !== undefined) {
    // It installs the package as a user does: npm resolves its dependencies from the registry's metadata, which
    // the cache of an `npm ci` does not hold (their tarballs it does).
    delete env.npm_config_offline;
    env.npm_config_prefer_offline = 'true';
  }
  if (block.language === 'sh') {
    writeFileSync(join(dir, 'example.sh'), code);
    argv = ['bash', '-euo', 'pipefail', 'example.sh'];
  } else {
    const script = writeScript(block, dir, code);
    if ('typeErrors' in script)
      return { code: 2, signal: null, output: `type errors:\n${script.typeErrors}`, timedOut: false };
    if (block.lock === undefined) argv = [process.execPath, script.run];
    else {
      // As the prose runs it: `npx quorumfence lock RESOURCE -- node SCRIPT`, the Quickstart's files in the environment.
      argv = [join(dir, 'node_modules', '.bin', 'quorumfence'), 'lock', block.lock, '--', 'node', script.run];
      env.QUORUMFENCE_CLUSTER = 'cluster/cluster.json';
      env.QUORUMFENCE_IDENTITY = 'me.key';
    }
  }
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
    expect(readme.length, blocks.map((b) => `${b.file}:${b.line}`).join('\n')).toBeGreaterThanOrEqual(8);
  });

  it('every command block of README.md and docs/ is run here, or listed with its reason and the test that runs it instead', () => {
    const { unlisted, stale } = uncoveredBlocks(repositoryCommandBlocks(ROOT), NOT_RUN);
    expect(
      unlisted.map((b) => `${b.file}:${b.line} (${b.language ?? 'unlabelled'}): ${b.code.split('\n')[0]}`),
      'mark it runnable (docs/README.md, "Runnable examples"), or list it in NOT_RUN with why it cannot run here',
    ).toEqual([]);
    expect(
      stale.map((entry) => `${entry.file}: ${entry.starts}`),
      'NOT_RUN entries that name no single block',
    ).toEqual([]);
    for (const entry of NOT_RUN) {
      expect(entry.reason.length, entry.starts).toBeGreaterThan(20);
      if (entry.runBy !== undefined) expect(existsSync(join(ROOT, entry.runBy)), entry.runBy).toBe(true);
    }
  });

  it("the long tier's blocks each name one runnable block, and the test that runs their commands exists", () => {
    for (const entry of LONG_TIER_BLOCKS) {
      const named = blocks.filter((b) => b.file === entry.file && b.code.trimStart().startsWith(entry.starts));
      expect(
        named.map((b) => `${b.file}:${b.line}`),
        entry.starts,
      ).toHaveLength(1);
      expect(existsSync(join(ROOT, entry.runBy)), entry.runBy).toBe(true);
    }
  });

  async function runsAsWritten(block: DocBlock): Promise<void> {
    const dir = installedDirectory(block);
    const run = await runBlock(block, dir, mapPorts(block.code, await portsFor(block)));
    expect(run.code, describeFailure(block, run)).toBe(0);
  }

  it.each(blocks.filter((block) => !inLongTier(block)).map((block) => [`${block.file}:${block.line}`, block] as const))(
    '%s runs as written',
    async (_name, block) => runsAsWritten(block),
    BLOCK_TIMEOUT_MS + STOP_GRACE_MS + 30_000,
  );
  for (const block of blocks.filter(inLongTier))
    itInLongTier(
      `${block.file}:${block.line} runs as written`,
      () => runsAsWritten(block),
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
        script: undefined,
        checkout: undefined,
        code: 'true\nfalse\necho after\n',
      },
      {
        file: 'planted.md',
        line: 9,
        language: 'js',
        cluster: false,
        lock: undefined,
        script: undefined,
        checkout: undefined,
        code: "import { loadClusterFile } from 'quorumfence/client';\nconsole.log(loadClusterFile, clusterId);\n",
      },
      {
        file: 'planted.md',
        line: 15,
        language: 'ts',
        cluster: false,
        lock: undefined,
        script: undefined,
        checkout: undefined,
        code: "import { LmdbGuard } from 'quorumfence/guard/lmdb';\nconst guard: LmdbGuard = await LmdbGuard.open('./data', undefined as never);\n",
      },
      {
        // Runs, but does not type-check: the token may be undefined (the Guards example once said `!` and ran
        // as plain JavaScript).
        file: 'planted.md',
        line: 21,
        language: 'ts',
        cluster: false,
        lock: undefined,
        script: 'guard.mts',
        checkout: undefined,
        code: "import { tokenToText } from 'quorumfence/token';\nconst token: string = process.env.QUORUMFENCE_TOKEN;\nconsole.log(token, tokenToText);\n",
      },
      {
        // ES module syntax in a .js file of a CommonJS project, as `node guard.js` after `npm init -y` would run it.
        file: 'planted.md',
        line: 27,
        language: 'sh',
        cluster: false,
        lock: undefined,
        script: undefined,
        checkout: undefined,
        code: "printf '%s\\n' \"import { createTokenVerifier } from 'quorumfence/verify';\" 'console.log(createTokenVerifier);' > guard.js\nnode guard.js\n",
      },
    ];
    const outputs: string[] = [];
    for (const block of broken) {
      const run = await runBlock(block, installedDirectory(block), block.code);
      expect(run.code, block.code).not.toBe(0);
      expect(describeFailure(block, run)).toMatch(new RegExp(`^planted\\.md:${block.line} `));
      outputs.push(run.output);
    }
    // Each failed for the reason planted: a type error, and ES module syntax in a CommonJS project's .js file.
    expect(outputs[3]).toMatch(
      /type errors:\n.*guard\.mts:2:\d+: Type 'string \| undefined' is not assignable to type 'string'/,
    );
    expect(outputs[4]).toContain('Cannot use import statement outside a module');
  }, 240_000);
});
