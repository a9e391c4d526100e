/**
 * docker-compose.yml, exercised without a Docker engine (none runs here and no
 * image can be pulled): Debian's docker-compose validates the file, and this
 * test runs every service's command and environment, as written in the file,
 * as a local process. Each service gets its own loopback address; service
 * names (and network aliases) resolve to those addresses; named volumes become
 * folders; `depends_on` conditions and health checks are honoured; the image's
 * ENTRYPOINT comes from nodes/Dockerfile. The demo workers must finish with
 * the refusal the story expects, with the honest and the byzantine profile.
 * The keys come from the key ceremony the file runs; afterwards no file
 * outside replica i's volume holds share i. The operator console runs beside
 * them, published on the host's loopback address only, and in the honest
 * profile sees all four replicas with a margin of 1.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { fromHex } from '../../src/common/bytes.js';
import { filesHoldingShare } from '../support/share-scan.js';
import { lacks, needs } from '../support/system-tools.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const compose = parse(readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8')) as {
  services: Record<string, Service>;
  volumes: Record<string, unknown>;
};
const dockerfile = readFileSync(join(ROOT, 'nodes', 'Dockerfile'), 'utf8');
const imageEntrypoint = JSON.parse(/^ENTRYPOINT\s+(\[.*\])\s*$/m.exec(dockerfile)![1]!) as string[];

interface Service {
  command?: string[];
  ports?: string[];
  entrypoint?: string[];
  environment?: Record<string, string>;
  volumes?: string[];
  profiles?: string[];
  healthcheck?: { test: string[] };
  depends_on?: Record<string, { condition: string }>;
  networks?: { default?: { aliases?: string[] } };
  restart?: string;
}

const root = mkdtempSync(join(tmpdir(), 'qf-compose-'));
const children = new Set<ChildProcess>();
afterAll(() => {
  for (const child of children) child.kill('SIGKILL');
  rmSync(root, { recursive: true, force: true });
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The services a profile runs: those without profiles, plus those naming it. */
function servicesFor(profile: string): string[] {
  return Object.entries(compose.services)
    .filter(([, s]) => !s.profiles || s.profiles.includes(profile))
    .map(([name]) => name);
}

interface Running {
  child: ChildProcess;
  exited: Promise<number | null>;
  output: () => string;
  /** What it printed first (its start-up lines), however much it printed since. */
  head: () => string;
}

async function runProfile(profile: string, baseOctet: number): Promise<Record<string, Running>> {
  const names = servicesFor(profile);
  const address = new Map<string, string>();
  names.forEach((name, k) => address.set(name, `127.0.${baseOctet}.${k + 2}`));
  for (const name of names)
    for (const alias of compose.services[name]!.networks?.default?.aliases ?? [])
      address.set(alias, address.get(name)!);
  const volumes = join(root, profile);

  /** What the container would see, translated for a local process of `service`. */
  const translate = (service: string, arg: string): string => {
    let out = arg;
    for (const mount of compose.services[service]!.volumes ?? []) {
      const [volume, path] = mount.split(':') as [string, string];
      if (out === path || out.startsWith(path + '/')) out = join(volumes, volume) + out.slice(path.length);
    }
    // Inside a container, 0.0.0.0 and 127.0.0.1 are the container itself.
    out = out.replace(/\b(0\.0\.0\.0|127\.0\.0\.1)\b/g, address.get(service)!);
    for (const [host, ip] of address) out = out.replace(new RegExp(`(//|^)${host}(?=:)`, 'g'), `$1${ip}`);
    return out;
  };
  const local = (service: string, argv: string[]): string[] => {
    const [program, ...rest] = argv;
    expect(program).toBe('node');
    return rest.map((a, k) => (k === 0 && a.startsWith('dist/') ? join(ROOT, a) : translate(service, a)));
  };

  const running: Record<string, Running> = {};
  const healthy = async (service: string) => {
    const test = compose.services[service]!.healthcheck!.test;
    expect(test[0]).toBe('CMD');
    for (let attempt = 0; attempt < 150; attempt++) {
      if (spawnSync(process.execPath, local(service, test.slice(1)), { timeout: 5000 }).status === 0) return;
      const exited = await Promise.race([running[service]!.exited.then(() => true), sleep(200).then(() => false)]);
      if (exited) throw new Error(`${service} exited before it was healthy:\n${running[service]!.output()}`);
    }
    throw new Error(`${service} never became healthy:\n${running[service]!.output()}`);
  };
  const start = async (service: string) => {
    const s = compose.services[service]!;
    for (const [dependency, { condition }] of Object.entries(s.depends_on ?? {})) {
      if (!running[dependency]) throw new Error(`${service} depends on ${dependency}, which was not started first`);
      if (condition === 'service_completed_successfully') expect(await running[dependency]!.exited).toBe(0);
      else if (condition === 'service_healthy') await healthy(dependency);
      else throw new Error(`condition ${condition} is not handled here`);
    }
    for (const mount of s.volumes ?? []) mkdirSync(join(volumes, mount.split(':')[0]!), { recursive: true });
    const argv = local(service, [...(s.entrypoint ?? imageEntrypoint), ...(s.command ?? [])]);
    const child = spawn(process.execPath, argv, {
      env: { ...process.env, ...s.environment },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.add(child);
    let output = '';
    child.stdout!.on('data', (chunk) => (output += chunk));
    child.stderr!.on('data', (chunk) => (output += chunk));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    running[service] = { child, exited, output: () => output.slice(-4000), head: () => output.slice(0, 4000) };
  };

  // Compose starts a service once its dependencies' conditions hold; this does the same, in file order.
  const pending = [...names];
  const order: string[] = [];
  while (pending.length > 0) {
    const next = pending.findIndex((name) =>
      Object.keys(compose.services[name]!.depends_on ?? {}).every((d) => order.includes(d)),
    );
    expect(next).toBeGreaterThanOrEqual(0);
    order.push(pending.splice(next, 1)[0]!);
  }
  // Spawning does not wait for health: only a dependant's conditions do, as in compose.
  for (const name of order) await start(name);
  return running;
}

describe('docker-compose.yml', () => {
  it.skipIf(lacks('docker-compose'))(
    `is valid for docker-compose (static check, no engine needed) ${needs('docker-compose')}`,
    () => {
      const version = spawnSync('docker-compose', ['version'], { encoding: 'utf8' });
      if (version.error) {
        throw new Error(
          'docker-compose is not installed; install it (Debian: apt-get install docker-compose) to validate the compose file',
        );
      }
      for (const profiles of ['honest', 'byzantine']) {
        const result = spawnSync('docker-compose', ['config', '-q'], {
          cwd: ROOT,
          encoding: 'utf8',
          env: { ...process.env, COMPOSE_PROFILES: profiles },
        });
        expect(result.stderr).toBe('');
        expect(result.status).toBe(0);
      }
    },
  );

  it('has the services the deployment promises', () => {
    expect(Object.keys(compose.services).sort()).toEqual(
      [
        'replica-1-init',
        'replica-2-init',
        'replica-3-init',
        'replica-4-init',
        'dkg-propose',
        'replica-1-dkg',
        'replica-2-dkg',
        'replica-3-dkg',
        'replica-4-dkg',
        'replica-1',
        'replica-2',
        'replica-3',
        'replica-4',
        'replica-4-byzantine',
        'resource',
        'console-identity',
        'console',
        'worker-a',
        'worker-b',
      ].sort(),
    );
    expect(readFileSync(join(ROOT, '.env'), 'utf8')).toMatch(/^COMPOSE_PROFILES=honest$/m);
    expect(dockerfile).toMatch(/npm ci --omit=dev/);
    expect(dockerfile).toMatch(/^USER quorumfence$/m);
  });

  it("no service but replica i (its init, ceremony and server) mounts replica i's secrets volume; the resource and workers mount only public volumes", () => {
    for (const [name, service] of Object.entries(compose.services)) {
      for (const mount of service.volumes ?? []) {
        const match = /^replica-(\d)-data$/.exec(mount.split(':')[0]!);
        if (match)
          expect(name, `${name} mounts ${mount}`).toMatch(new RegExp(`^replica-${match[1]}(-init|-dkg|-byzantine)?$`));
      }
    }
    for (const name of ['resource', 'worker-a', 'worker-b', 'console']) {
      const mounts = (compose.services[name]!.volumes ?? []).map((m) => m.split(':')[0]);
      expect(
        mounts.every((m) => m === 'cluster' || m === 'resource-data' || m === 'console-identity'),
        `${name}: ${mounts.join(', ')}`,
      ).toBe(true);
    }
    // Only the console and the step that makes its identity mount the identity.
    for (const [name, service] of Object.entries(compose.services))
      if ((service.volumes ?? []).some((m) => m.startsWith('console-identity:')))
        expect(['console', 'console-identity']).toContain(name);
  });

  it('publishes the console (no login) on the host loopback address only', () => {
    const ports = compose.services.console!.ports ?? [];
    expect(ports.length).toBeGreaterThan(0);
    for (const port of ports) expect(port).toMatch(/^127\.0\.0\.1:\d+:\d+$/);
  });

  it.each([
    ['honest', 11],
    ['byzantine', 12],
  ])(
    'runs every service of the %s profile as local processes; the workers finish with the expected refusal',
    async (profile, octet) => {
      const running = await runProfile(profile, octet);
      const workers = Object.keys(running).filter((name) => name.startsWith('worker-'));
      expect(workers).toEqual(['worker-a', 'worker-b']);
      const codes = await Promise.all(workers.map((w) => running[w]!.exited));
      const outputs = workers.map((w) => running[w]!.output());
      expect(codes, outputs.join('\n')).toEqual([0, 0]);
      expect(outputs[0]).toMatch(/worker A: write epoch=1 status=200 outcome=accepted/);
      // B's epoch is above A's; usually 2, higher when its attempts met replicas whose copies of A's lease had
      // not all run out yet (each such attempt releases what it won and moves on). A's stale write is refused
      // with exactly B's epoch as the barrier.
      const epochB = /worker B: write epoch=(\d+) status=200 outcome=accepted/.exec(outputs[1]!)?.[1];
      expect(epochB, outputs[1]).toBeDefined();
      expect(Number(epochB)).toBeGreaterThanOrEqual(2);
      expect(outputs[0]).toMatch(new RegExp(`worker A: write epoch=1 status=409 outcome=stale barrier=${epochB}\\b`));
      // The long-running services are still up when the workers are done.
      for (const name of Object.keys(running).filter(
        (n) => (n.startsWith('replica') && !/-(init|dkg)$/.test(n)) || n === 'resource' || n === 'console',
      )) {
        expect(running[name]!.child.exitCode, `${name}:\n${running[name]!.output()}`).toBeNull();
      }
      // The console answers on its service address; with four honest replicas it reaches them all (bounded wait).
      const consoleUrl = /serving (http:\/\/[^/\s]+)\//.exec(running.console!.head())?.[1];
      expect(consoleUrl, running.console!.head()).toBeDefined();
      if (profile === 'honest') {
        let state: { margin: number; replicas: { reachable: boolean }[] } | undefined;
        for (let attempt = 0; attempt < 100; attempt++) {
          const response = await fetch(`${consoleUrl}/api/state`, { signal: AbortSignal.timeout(5_000) });
          state = (await response.json()) as typeof state;
          if (state!.margin === 1 && state!.replicas.every((r) => r.reachable)) break;
          await sleep(200);
        }
        expect(state?.replicas.map((r) => r.reachable)).toEqual([true, true, true, true]);
        expect(state?.margin).toBe(1);
      }
      for (const { child } of Object.values(running)) child.kill('SIGTERM');
      await Promise.all(Object.values(running).map((r) => r.exited));
      // Every file the ceremony and the services wrote: share i only in replica i's volume.
      const volumes = join(root, profile);
      for (let i = 1; i <= 4; i++) {
        const dir = join(volumes, `replica-${i}-data`);
        const key = JSON.parse(readFileSync(join(dir, 'replica.key'), 'utf8')) as { secretShare: string };
        expect(filesHoldingShare(volumes, dir, fromHex(key.secretShare, 32, 'secretShare'), 4)).toEqual([]);
      }
    },
  );
});
