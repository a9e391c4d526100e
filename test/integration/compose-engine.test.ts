/**
 * docker-compose.yml run for real, in a Docker engine: the image is built from this checkout's build by
 * deploy/docker/local-image.sh (its base made from Debian packages when no Node image is there), and
 * docker-compose brings the deployment up as a user would, with its published ports on loopback ports of
 * this test's choosing. Checked, with real containers:
 *  - the key ceremony completes, the four replicas, the resource and the console become healthy, and
 *    share i is in no volume but replica i's;
 *  - the story, whatever the scheduling: worker B is started first and worker A paused as it starts, and
 *    still A's stale write is refused (409) with B's larger epoch as the barrier, and both exit 0;
 *  - from the host, through the published ports: `host-cluster` prints a cluster.json that the CLI and the
 *    SDK use; `docker kill` of one replica leaves acquires working and the console at margin 0; started
 *    again, that replica still refuses an epoch it signed before (its watermarks survived);
 *  - `down`, then `up` with the volumes kept under the byzantine profile (replica-4 replaced by a liar holding
 *    its key): the story plays again above the old epochs, the acquires succeed, the liar is named, and the
 *    guard log with every token the host was given shows no epoch granted twice;
 *  - `down -v` leaves no container, network or volume of the project, and the test's image is removed.
 * Without an engine (not installed, or dockerd not running) the tests are skipped and say so; CI starts one.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromHex } from '../../src/common/bytes.js';
import { loadClusterFile, type Cluster } from '../../src/cluster/description.js';
import { QuorumFenceClient } from '../../src/client/client.js';
import { generateIdentity } from '../../src/client/identity.js';
import { parseGuardLogEntry, type GuardLogEntry } from '../../src/guard/log.js';
import { checkHistory, formatViolation } from '../../src/testing/history-checker.js';
import { freePorts } from '../support/free-ports.js';
import { outcomeOf, RawClient } from '../support/raw-client.js';
import { filesHoldingShare } from '../support/share-scan.js';
import { hasTool, installHint, lacks, needs } from '../support/system-tools.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const COMPOSE_FILE = join(ROOT, 'docker-compose.yml');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Ran {
  readonly status: number | null;
  readonly stdout: Buffer;
  readonly stderr: string;
}

/** Runs a program to its end (killed after `timeoutMs`), collecting its output. */
function run(
  command: string,
  args: readonly string[],
  options: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: ROOT,
      env: options.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 120_000);
    child.on('error', reject);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout: Buffer.concat(out), stderr: err.slice(-8000) });
    });
  });
}

/** Runs a program that must succeed; its stdout as text. */
async function must(command: string, args: readonly string[], options: Parameters<typeof run>[2] = {}) {
  const ran = await run(command, args, options);
  if (ran.status !== 0)
    throw new Error(`${command} ${args.join(' ')} exited ${ran.status}:\n${ran.stderr}\n${ran.stdout.toString()}`);
  return ran.stdout.toString();
}

/** What a probe throws when waiting longer cannot help (a container exited). */
class GaveUp extends Error {}

/**
 * Polls `probe` until it returns a value (not undefined), at most `timeoutMs`; fails naming `what`. A probe's
 * error counts as "not yet" (a server still starting), except GaveUp, which ends the wait at once.
 */
async function waitFor<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      if (error instanceof GaveUp) throw error;
      last = error;
    }
    if (Date.now() > deadline)
      throw new Error(`${what}: not within ${timeoutMs} ms${last ? ` (${String(last)})` : ''}`);
    await sleep(500);
  }
}

const id = randomBytes(4).toString('hex');
const IMAGE = `quorumfence:compose-test-${id}`;
const root = mkdtempSync(join(tmpdir(), 'qf-compose-engine-'));

interface Ports {
  readonly replicas: readonly number[];
  readonly resource: number;
  readonly console: number;
}

/** One compose project: docker-compose.yml under its own name, profile and published ports. */
class Project {
  readonly name: string;
  readonly env: NodeJS.ProcessEnv;
  readonly secret = randomBytes(24).toString('base64url');
  /** Every token the host was given by this project's cluster, for the history check. */
  readonly tokens: string[] = [];

  constructor(
    suffix: string,
    public profile: 'honest' | 'byzantine',
    readonly ports: Ports,
  ) {
    this.name = `qf-compose-${id}-${suffix}`;
    this.env = {
      ...process.env,
      // The docker CLI keeps its settings here, not in the home directory.
      DOCKER_CONFIG: join(root, 'docker-config'),
      COMPOSE_PROFILES: profile,
      QUORUMFENCE_IMAGE: IMAGE,
      QUORUMFENCE_PUBLISH_ADDRESS: '127.0.0.1',
      QUORUMFENCE_OPERATOR_SECRET: this.secret,
      QUORUMFENCE_RESOURCE_PORT: String(ports.resource),
      QUORUMFENCE_CONSOLE_PORT: String(ports.console),
      ...Object.fromEntries(ports.replicas.map((port, k) => [`QUORUMFENCE_REPLICA_${k + 1}_PORT`, String(port)])),
    };
  }

  /** The same project (its volumes, keys and secret) run from now on under another profile. */
  useProfile(profile: 'honest' | 'byzantine'): void {
    this.profile = profile;
    this.env.COMPOSE_PROFILES = profile;
  }

  compose(args: readonly string[], timeoutMs = 600_000): Promise<string> {
    return must('docker-compose', ['-p', this.name, '-f', COMPOSE_FILE, ...args], { env: this.env, timeoutMs });
  }

  get replicaServices(): string[] {
    return ['replica-1', 'replica-2', 'replica-3', this.profile === 'honest' ? 'replica-4' : 'replica-4-byzantine'];
  }

  /** The container of a service (not a `run`'s), or undefined when there is none. */
  async container(service: string): Promise<string | undefined> {
    const ids = await must('docker', [
      'ps',
      '-aq',
      '--filter',
      `label=com.docker.compose.project=${this.name}`,
      '--filter',
      `label=com.docker.compose.service=${service}`,
      '--filter',
      'label=com.docker.compose.oneoff=False',
    ]);
    return ids.split('\n').find((line) => line.trim() !== '');
  }

  async state(service: string): Promise<{ Status: string; ExitCode: number; Health?: { Status: string } }> {
    const container = await this.container(service);
    if (!container) throw new Error(`${this.name}: no container for ${service}`);
    return JSON.parse(await must('docker', ['inspect', '-f', '{{json .State}}', container])) as Awaited<
      ReturnType<Project['state']>
    >;
  }

  async logs(service: string): Promise<string> {
    const container = await this.container(service);
    if (!container) return `(no container for ${service})`;
    const ran = await run('docker', ['logs', container]);
    return ran.stdout.toString() + ran.stderr;
  }

  async healthy(service: string, timeoutMs = 300_000): Promise<void> {
    await waitFor(`${service} healthy`, timeoutMs, async () => {
      const state = await this.state(service);
      // Exited, or crashed and being restarted (restart: unless-stopped): it will not get healthy by waiting.
      if (state.Status === 'exited' || state.Status === 'restarting')
        throw new GaveUp(`${service} ${state.Status}: ${await this.logs(service)}`);
      return state.Health?.Status === 'healthy' ? true : undefined;
    });
  }

  /** Waits for a one-shot service's container to exit; its exit code and output. */
  async finished(service: string, timeoutMs: number): Promise<{ code: number; output: string }> {
    const state = await waitFor(`${service} exits`, timeoutMs, async () => {
      const s = await this.state(service);
      return s.Status === 'exited' ? s : undefined;
    });
    return { code: state.ExitCode, output: await this.logs(service) };
  }

  /** What the project has left in the engine, by kind. */
  async leftovers(): Promise<{ containers: string[]; networks: string[]; volumes: string[] }> {
    const label = `label=com.docker.compose.project=${this.name}`;
    const list = async (args: string[]) => (await must('docker', args)).split('\n').filter((line) => line !== '');
    return {
      containers: await list(['ps', '-aq', '--filter', label]),
      networks: await list(['network', 'ls', '-q', '--filter', label]),
      volumes: await list(['volume', 'ls', '-q', '--filter', label]),
    };
  }

  /** The resource's guard log, tokens included (the operator secret). */
  async guardLog(): Promise<GuardLogEntry[]> {
    const entries: GuardLogEntry[] = [];
    for (let after = 0, page = 0; page < 100; page++) {
      const response = await fetch(`http://127.0.0.1:${this.ports.resource}/log?after=${after}&limit=500`, {
        headers: { authorization: `Bearer ${this.secret}` },
        signal: AbortSignal.timeout(10_000),
      });
      const body = (await response.json()) as { entries: unknown[]; tokens: string };
      expect(body.tokens).toBe('included');
      const parsed = body.entries.map(parseGuardLogEntry);
      if (parsed.length === 0) break;
      entries.push(...parsed);
      after = parsed[parsed.length - 1]!.seq;
    }
    return entries;
  }

  async consoleState(): Promise<{ margin: number; replicas: { replica: number; reachable: boolean }[] }> {
    const response = await fetch(`http://127.0.0.1:${this.ports.console}/api/state`, {
      signal: AbortSignal.timeout(10_000),
    });
    return (await response.json()) as Awaited<ReturnType<Project['consoleState']>>;
  }

  /** `host-cluster`'s cluster.json (the replicas at their published ports), written to a file. */
  async hostCluster(): Promise<{ path: string; cluster: Cluster }> {
    const path = join(root, `${this.name}-cluster.json`);
    writeFileSync(path, await this.compose(['run', '--rm', '-T', 'host-cluster'], 120_000));
    return { path, cluster: loadClusterFile(path) };
  }

  async down(volumes: boolean): Promise<void> {
    await this.compose(['down', '--remove-orphans', ...(volumes ? ['-v'] : [])], 300_000);
  }
}

/** The story's two workers' outcome, from their output. */
function storyOf(a: string, b: string) {
  const first = /worker A: write epoch=(\d+) status=200 outcome=accepted/.exec(a);
  const stale = /worker A: write epoch=(\d+) status=409 outcome=stale barrier=(\d+)/.exec(a);
  const taken = /worker B: write epoch=(\d+) status=200 outcome=accepted/.exec(b);
  expect(first, a).not.toBeNull();
  expect(stale, a).not.toBeNull();
  expect(taken, b).not.toBeNull();
  return {
    epochA: BigInt(first![1]!),
    staleEpoch: BigInt(stale![1]!),
    barrier: BigInt(stale![2]!),
    epochB: BigInt(taken![1]!),
  };
}

/** Waits for both workers, which must exit 0; the story's epochs, checked. */
async function storyPlayed(project: Project) {
  const a = await project.finished('worker-a', 300_000);
  // A failed: B may wait minutes for a write that never comes; its output so far says why.
  if (a.code !== 0) throw new Error(`worker-a exited ${a.code}:\n${a.output}\n${await project.logs('worker-b')}`);
  const b = await project.finished('worker-b', 300_000);
  expect([a.code, b.code], `${a.output}\n${b.output}`).toEqual([0, 0]);
  const story = storyOf(a.output, b.output);
  expect(story.staleEpoch).toBe(story.epochA);
  expect(story.epochB).toBeGreaterThan(story.epochA);
  // Refused with exactly B's epoch as the barrier: B wrote before A's second write.
  expect(story.barrier).toBe(story.epochB);
  return story;
}

/** Acquires and releases through the SDK from the host; the epochs and the faults clients saw. */
async function acquireFromHost(project: Project, cluster: Cluster, resources: readonly string[]) {
  const client = await QuorumFenceClient.connect(cluster, generateIdentity());
  try {
    const results = [];
    for (const resource of resources) {
      // After a restart the replicas count every recorded lease as running for their longest lease (60 s).
      const result = await client.acquire(resource, { ttlMs: 5_000, waitMs: 90_000 });
      expect(result.ok, result.ok ? '' : `${result.reason}: ${result.message}`).toBe(true);
      if (!result.ok) continue;
      project.tokens.push(result.lease.tokenText);
      results.push({ resource, epoch: result.lease.epoch, faults: result.faults });
      await result.lease.release();
    }
    return results;
  } finally {
    await client.close();
  }
}

const engine = !lacks('docker');
let ports: Ports;
let project: Project;
let imageBuilt = false;

afterAll(async () => {
  if (engine) {
    if (project) await project.down(true).catch(() => undefined);
    if (imageBuilt) await run('docker', ['rmi', IMAGE]);
  }
  rmSync(root, { recursive: true, force: true });
}, 600_000);

describe.skipIf(lacks('docker'))(`docker-compose.yml in a Docker engine ${needs('docker')}`, () => {
  beforeAll(async () => {
    // Required (CI) but missing: fail saying what to install and start.
    if (!hasTool('docker')) throw new Error(installHint('docker'));
    const [resource, consolePort, ...replicas] = await freePorts(6);
    ports = { resource: resource!, console: consolePort!, replicas };
    project = new Project('story', 'honest', ports);
    mkdirSync(join(root, 'docker-config'));
    // From the cached base (CI's .ci/run made it): seconds; with no base yet, debootstrap takes minutes.
    const built = await run(join(ROOT, 'deploy', 'docker', 'local-image.sh'), [], {
      env: { ...project.env },
      timeoutMs: 1_200_000,
    });
    expect(built.status, built.stderr).toBe(0);
    expect(built.stdout.toString().trim()).toBe(IMAGE);
    imageBuilt = true;
  }, 1_260_000);

  it('the key ceremony completes; the four replicas, the resource and the console become healthy', async () => {
    await project.compose(['up', '-d', ...project.replicaServices, 'resource', 'console']);
    for (const oneShot of ['replica-1-init', 'replica-2-init', 'replica-3-init', 'replica-4-init', 'dkg-propose'])
      expect((await project.finished(oneShot, 300_000)).code, oneShot).toBe(0);
    for (let i = 1; i <= 4; i++) {
      const dkg = await project.finished(`replica-${i}-dkg`, 300_000);
      expect(dkg.code, dkg.output).toBe(0);
    }
    for (const service of [...project.replicaServices, 'resource', 'console']) await project.healthy(service);

    // Share i is in replica i's volume and in no other file of any volume.
    const volumes = join(root, 'volumes');
    mkdirSync(volumes);
    const names = ['cluster', 'resource-data', 'console-identity', ...[1, 2, 3, 4].map((i) => `replica-${i}-data`)];
    const archive = await run(
      'docker',
      [
        'run',
        '--rm',
        '--network',
        'none',
        '--entrypoint',
        'tar',
        ...names.flatMap((name) => ['-v', `${project.name}_${name}:/volumes/${name}:ro`]),
        IMAGE,
        '-C',
        '/volumes',
        '-cf',
        '-',
        '.',
      ],
      { timeoutMs: 120_000 },
    );
    expect(archive.status, archive.stderr).toBe(0);
    writeFileSync(join(root, 'volumes.tar'), archive.stdout);
    await must('tar', ['-xf', join(root, 'volumes.tar'), '-C', volumes]);
    for (let i = 1; i <= 4; i++) {
      const dir = join(volumes, `replica-${i}-data`);
      const key = JSON.parse(readFileSync(join(dir, 'replica.key'), 'utf8')) as { secretShare: string };
      expect(filesHoldingShare(volumes, dir, fromHex(key.secretShare, 32, 'secretShare'), 4)).toEqual([]);
    }
    rmSync(volumes, { recursive: true, force: true });
    rmSync(join(root, 'volumes.tar'));
  }, 900_000);

  it('the story, with worker B started first and worker A paused as it starts: A is refused 409, B takes over with a larger epoch, both exit 0', async () => {
    // --no-deps: the rest is up and healthy (the previous test), and B must start alone.
    await project.compose(['up', '-d', '--no-deps', 'worker-b']);
    // B waits on the story's state (A's write), not on a clock: it has not acquired while A is absent.
    await waitFor('worker B waiting for A', 120_000, async () =>
      /worker B: waiting for=a write by A/.test(await project.logs('worker-b')) ? true : undefined,
    );
    await project.compose(['up', '-d', '--no-deps', 'worker-a']);
    const workerA = (await project.container('worker-a'))!;
    const paused = await run('docker', ['pause', workerA]);
    if (paused.status === 0) {
      try {
        await sleep(5_000);
        const b = await project.logs('worker-b');
        expect(b).toMatch(/worker B: waiting for=a write by A/);
        // B goes on only after it saw A's write (on a loaded machine A may have written before the pause landed;
        // otherwise B is still waiting).
        const acquiredAt = b.search(/worker B: acquired/);
        if (acquiredAt >= 0) {
          const sawAt = b.search(/worker B: saw value="A /);
          expect(sawAt).toBeGreaterThanOrEqual(0);
          expect(sawAt).toBeLessThan(acquiredAt);
        }
      } finally {
        await must('docker', ['unpause', workerA]);
      }
    } else {
      // Only when A finished before the pause could land; B had to wait for it all the same.
      expect(paused.stderr).toMatch(/not running/);
    }
    await storyPlayed(project);
  }, 900_000);

  it('from the host through the published ports: host-cluster, the CLI and the SDK acquire', async () => {
    const { path, cluster } = await project.hostCluster();
    expect(cluster.replicas.map((r) => r.endpoint)).toEqual(ports.replicas.map((p) => `ws://127.0.0.1:${p}`));
    const health = await run(process.execPath, [join(ROOT, 'dist/nodes/quorumfence.js'), 'health', '--cluster', path]);
    expect(health.stdout.toString(), health.stderr).toMatch(/4 of 4 replicas healthy, 3 needed: margin 1/);
    const identity = join(root, 'host-identity.json');
    await must(process.execPath, [join(ROOT, 'dist/nodes/quorumfence.js'), 'identity', 'new', identity]);
    const acquired = JSON.parse(
      await must(process.execPath, [
        join(ROOT, 'dist/nodes/quorumfence.js'),
        'acquire',
        'compose/host',
        '--cluster',
        path,
        '--identity',
        identity,
        '--ttl',
        '2s',
        '--json',
      ]),
    ) as { ok: boolean; epoch: string; token: string; signers: number[] };
    expect(acquired.ok).toBe(true);
    expect(acquired.signers).toHaveLength(3);
    project.tokens.push(acquired.token);
    const results = await acquireFromHost(project, cluster, ['compose/host-sdk', 'demo/orders']);
    expect(results.map((r) => r.faults)).toEqual([[], []]);
  }, 300_000);

  it('docker kill of one replica: acquires still work and the console shows margin 0; started again, it keeps its watermarks', async () => {
    const { cluster } = await project.hostCluster();
    const replica2 = `ws://127.0.0.1:${ports.replicas[1]}`;
    // An epoch replica 2 signs for one holder before it is killed.
    const first = await RawClient.open(replica2);
    try {
      expect(outcomeOf(await first.acquire('compose/watermark', 1n, 10_000)).status).toBe('granted');
    } finally {
      await first.close();
    }
    const container = (await project.container('replica-2'))!;
    await must('docker', ['kill', container]);
    expect((await project.state('replica-2')).Status).toBe('exited');
    const state = await waitFor('console margin 0', 120_000, async () => {
      const s = await project.consoleState();
      return s.margin === 0 ? s : undefined;
    });
    expect(state.replicas.map((r) => r.reachable)).toEqual([true, false, true, true]);
    const down = await acquireFromHost(project, cluster, ['compose/kill-1', 'compose/kill-2', 'demo/orders']);
    expect(down).toHaveLength(3);
    // Killed, not restarted behind the test's back (restart: unless-stopped leaves a killed container down).
    expect((await project.state('replica-2')).Status).toBe('exited');

    await must('docker', ['start', container]);
    await project.healthy('replica-2');
    // Another holder asking replica 2 for the epoch it signed before the kill is refused: stale.
    const second = await RawClient.open(replica2);
    try {
      const outcome = outcomeOf(await second.acquire('compose/watermark', 1n));
      expect(outcome).toMatchObject({ status: 'stale', epoch: 1n });
      // It answers: an epoch nobody signed is granted.
      expect(outcomeOf(await second.acquire('compose/watermark-fresh', 1n)).status).toBe('granted');
    } finally {
      await second.close();
    }
    await waitFor('console margin 1 again', 120_000, async () =>
      (await project.consoleState()).margin === 1 ? true : undefined,
    );
    expect(await acquireFromHost(project, cluster, ['compose/kill-1'])).toHaveLength(1);
  }, 600_000);

  it('down, then up with the volumes kept and the byzantine profile (replica-4 replaced by a liar with its key): the story plays again above the old epochs, acquires succeed, the liar is named, and no epoch is granted twice', async () => {
    const before = await project.guardLog();
    const highest = (resource: string, log: readonly GuardLogEntry[]) =>
      log
        .filter((e) => e.resource === resource && e.accepted)
        .reduce((top, e) => (BigInt(e.epoch!) > top ? BigInt(e.epoch!) : top), 0n);
    const ordersBefore = highest('demo/orders', before);
    expect(ordersBefore).toBeGreaterThan(0n);

    await project.down(false);
    const kept = await project.leftovers();
    expect(kept.containers).toEqual([]);
    expect(kept.volumes.length).toBeGreaterThanOrEqual(7);
    // The same volumes (keys, records, the guard's barriers): one deployment restarted, with one replica turned liar,
    // instead of a second ceremony for the byzantine profile alone.
    project.useProfile('byzantine');
    await project.compose(['up', '-d']);
    for (const service of [...project.replicaServices, 'resource']) await project.healthy(service);
    const story = await storyPlayed(project);
    expect(story.epochA).toBeGreaterThan(ordersBefore);

    const { cluster } = await project.hostCluster();
    const again = await acquireFromHost(project, cluster, ['compose/host', 'compose/kill-1', 'compose/host-sdk']);
    expect(again).toHaveLength(3);
    // A client stops listening once t partials verify, so a liar that answers last goes unseen: a bounded
    // number of acquires, until one names it.
    const faults = again.flatMap((result) => result.faults);
    for (let round = 0; round < 40 && !faults.some((f) => f.replica === 4); round++) {
      const [result] = await acquireFromHost(project, cluster, ['compose/ledger']);
      expect(result).toBeDefined();
      faults.push(...result!.faults);
    }
    expect(
      faults.some((f) => f.replica === 4),
      'the liar is named',
    ).toBe(true);
    expect(faults.filter((f) => f.replica !== 4)).toEqual([]);

    const after = await project.guardLog();
    expect(after.length).toBeGreaterThan(before.length);
    const check = checkHistory({ guardLogs: [after], capturedTokens: project.tokens }, cluster);
    expect(check.ok ? [] : check.violations.map(formatViolation)).toEqual([]);
    // The host's tokens and the workers' accepted writes: one token per (resource, epoch).
    expect(check.stats.tokensChecked).toBeGreaterThan(project.tokens.length);
  }, 1_200_000);

  it('down -v leaves no container, network or volume of the project', async () => {
    await project.down(true);
    expect(await project.leftovers()).toEqual({ containers: [], networks: [], volumes: [] });
  }, 300_000);

  it("removes the image it built: the project's images are gone", async () => {
    await must('docker', ['rmi', IMAGE]);
    imageBuilt = false;
    expect((await run('docker', ['image', 'inspect', IMAGE])).status).not.toBe(0);
  }, 120_000);
});
