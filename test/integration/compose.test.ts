/**
 * docker-compose.yml without a Docker engine: Debian's docker-compose validates the file for both
 * profiles, and the file's promises are checked as written: its services, which volumes each one
 * mounts (share i only in replica i's), the console on the host's loopback address only, the story's
 * workers waiting on its state rather than on a clock, and the image's two build paths. The
 * `host-cluster` program is run on a real cluster.json. The deployment itself runs in a real engine in
 * compose-engine.test.ts (which replaced this file's imitation of every service as a local process).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { dealLocalCluster } from '../../src/cluster/launcher.js';
import { loadClusterFile } from '../../src/cluster/description.js';
import { lacks, needs } from '../support/system-tools.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const compose = parse(readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8')) as {
  services: Record<string, Service>;
  volumes: Record<string, unknown>;
};
const dockerfile = readFileSync(join(ROOT, 'nodes', 'Dockerfile'), 'utf8');

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
afterAll(() => rmSync(root, { recursive: true, force: true }));

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
        'host-cluster',
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
    for (const name of ['resource', 'worker-a', 'worker-b', 'console', 'host-cluster']) {
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
    // Its host port may come from a variable; its address may not.
    for (const port of ports) expect(port).toMatch(/^127\.0\.0\.1:(\d+|\$\{QUORUMFENCE_CONSOLE_PORT:-\d+\}):\d+$/);
  });

  it('the story waits on its own state: B acquires after A has written, A writes again once superseded', () => {
    const a = compose.services['worker-a']!.command!;
    const b = compose.services['worker-b']!.command!;
    expect(a).toContain('--until-superseded');
    expect(a.join(' ')).toMatch(/--expect stale/);
    expect(b.join(' ')).toMatch(/--after-write-by A\b/);
    expect(b.join(' ')).toMatch(/--expect accepted/);
    // No clock in the story: a start delay is a guess about the engine's scheduling.
    for (const command of [a, b]) expect(command).not.toContain('--start-after');
  });

  it('the worker refuses story options that cannot go together (INVALID_OPTION, exit 2), before connecting', () => {
    const worker = join(ROOT, 'dist', 'nodes', 'quorumfence-dev.js');
    const base = [
      'worker',
      '--name',
      'A',
      '--cluster',
      join(root, 'absent.json'),
      '--resource',
      'r',
      '--guard',
      'http://127.0.0.1:1',
    ];
    for (const [extra, message] of [
      [['--until-superseded'], /--until-superseded needs --pause/],
      [['--after-write-by', ''], /--after-write-by was given an empty value/],
      [['--after-timeout', '5s'], /--after-timeout goes with --after-write-by/],
    ] as const) {
      const refused = spawnSync(process.execPath, [worker, ...base, ...extra], { encoding: 'utf8' });
      expect(refused.stderr).toMatch(message);
      expect(refused.stderr).toMatch(/\(INVALID_OPTION\)/);
      expect(refused.status).toBe(2);
    }
  });

  it("builds one image two ways: the usual multi-stage build last, and the prebuilt stage before npm ci's", () => {
    const stages = [...dockerfile.matchAll(/^FROM\s+\S+\s+AS\s+(\S+)$/gm)].map((m) => m[1]);
    expect(stages).toEqual(['runtime-base', 'prebuilt', 'build', 'runtime']);
    expect(dockerfile).toMatch(/^ARG BASE_IMAGE=node:\S+$/m);
    const script = readFileSync(join(ROOT, 'deploy', 'docker', 'local-image.sh'), 'utf8');
    expect(script).toMatch(/--target prebuilt/);
    expect(script).toMatch(/debootstrap --variant=minbase trixie/);
    expect(script).toMatch(/apt-get install[^\n]* nodejs npm/);
  });

  it("host-cluster's program prints the description at the published endpoints; a wrong list changes nothing", () => {
    dealLocalCluster(join(root, 'keys'), 4);
    const path = join(root, 'keys', 'cluster.json');
    const before = readFileSync(path, 'utf8');
    const program = join(ROOT, 'dist', 'nodes', 'published-cluster.js');
    const endpoints = [1, 2, 3, 4].map((i) => `ws://127.0.0.1:${17100 + i}`);
    const printed = spawnSync(process.execPath, [program, '--cluster', path, '--endpoints', endpoints.join(',')], {
      encoding: 'utf8',
    });
    expect(printed.stderr).toBe('');
    expect(printed.status).toBe(0);
    writeFileSync(join(root, 'published.json'), printed.stdout);
    const published = loadClusterFile(join(root, 'published.json'));
    expect(published.idHex).toBe(loadClusterFile(path).idHex);
    expect(published.replicas.map((r) => r.endpoint)).toEqual(endpoints);

    for (const [list, code, status] of [
      [endpoints.slice(0, 3).join(','), 'INVALID_OPTION', 2],
      [[...endpoints.slice(0, 3), 'http://127.0.0.1:1'].join(','), 'BAD_CLUSTER', 1],
    ] as const) {
      const refused = spawnSync(process.execPath, [program, '--cluster', path, '--endpoints', list], {
        encoding: 'utf8',
      });
      expect(refused.stdout).toBe('');
      expect(refused.stderr).toMatch(new RegExp(`^published-cluster: .*\\(${code}\\)\n$`));
      expect(refused.status).toBe(status);
    }
    expect(readFileSync(path, 'utf8')).toBe(before);
  });
});
