/**
 * The system programs some tests run for real (PostgreSQL, Chromium, promtool, kubectl, docker-compose, etcd, a
 * Docker engine, fish, systemd-analyze, a C compiler), and whether this machine has them. `npm test` must work on a fresh machine
 * with only Node.js (README, first lines), so
 * a test whose program is missing is skipped, and says so in its name ("needs PostgreSQL: not installed, skipped"):
 * vitest reports it as skipped, never as passed. CI installs every one of them (.ci/run) and sets
 * QUORUMFENCE_TEST_REQUIRE_SYSTEM=1, under which nothing is skipped: a missing program fails its tests with the
 * command that installs it.
 */
import { spawnSync } from 'node:child_process';

export type SystemTool =
  | 'postgresql'
  | 'chromium'
  | 'promtool'
  | 'kubectl'
  | 'docker-compose'
  | 'etcd'
  | 'docker'
  | 'fish'
  | 'systemd-analyze'
  | 'cc';

interface ToolInfo {
  /** What a test name calls it. */
  readonly label: string;
  /** Shell commands, each of which must be on PATH (alternatives with `||`). */
  readonly commands: readonly string[];
  /** Debian's package. */
  readonly install: string;
  /** A shell command that must also succeed: the program is there and can work (a daemon answers). */
  readonly probe?: string;
  /** What a test name says when it is missing (default "not installed"). */
  readonly missing?: string;
}

const TOOLS: Record<SystemTool, ToolInfo> = {
  postgresql: { label: 'PostgreSQL', commands: ['pg_lsclusters', 'psql'], install: 'postgresql' },
  chromium: { label: 'Chromium', commands: ['chromium || command -v chromium-browser'], install: 'chromium' },
  promtool: { label: 'promtool', commands: ['promtool'], install: 'prometheus' },
  kubectl: { label: 'kubectl', commands: ['kubectl'], install: 'kubernetes-client' },
  'docker-compose': { label: 'docker-compose', commands: ['docker-compose'], install: 'docker-compose' },
  etcd: { label: 'etcd', commands: ['etcd'], install: 'etcd-server' },
  // The engine, not just its client: dockerd must answer (.ci/run starts it), and compose must be there to drive it.
  docker: {
    label: 'a Docker engine',
    commands: ['docker', 'docker-compose'],
    install: 'docker.io docker-compose, then start dockerd',
    probe: 'docker info',
    missing: 'not installed or not running',
  },
  fish: { label: 'fish', commands: ['fish'], install: 'fish' },
  'systemd-analyze': { label: 'systemd-analyze', commands: ['systemd-analyze'], install: 'systemd' },
  // bench --gray's slow-flush compiles a small preloaded library.
  cc: { label: 'a C compiler', commands: ['cc'], install: 'gcc' },
};

/** Set by CI: every system program must be there, and no test is skipped for want of one. */
export const SYSTEM_TOOLS_REQUIRED = process.env.QUORUMFENCE_TEST_REQUIRE_SYSTEM === '1';

const found = new Map<SystemTool, boolean>();

/** The program is on PATH (looked up once per test file). */
export function hasTool(tool: SystemTool): boolean {
  let has = found.get(tool);
  if (has === undefined) {
    const { commands, probe } = TOOLS[tool];
    has =
      commands.every((command) => spawnSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' }).status === 0) &&
      (probe === undefined || spawnSync('sh', ['-c', probe], { stdio: 'ignore', timeout: 30_000 }).status === 0);
    found.set(tool, has);
  }
  return has;
}

/** Skip the tests that need these programs: one of them is missing and CI's switch is off. */
export function lacks(...tools: SystemTool[]): boolean {
  return !SYSTEM_TOOLS_REQUIRED && tools.some((tool) => !hasTool(tool));
}

/** For a test's name: "(needs PostgreSQL)", or "(needs PostgreSQL: not installed, skipped)" when it will be. */
export function needs(...tools: SystemTool[]): string {
  const labels = tools.map((tool) => TOOLS[tool].label).join(', ');
  if (!lacks(...tools)) return `(needs ${labels})`;
  const why = tools.find((tool) => !hasTool(tool));
  return `(needs ${labels}: ${(why && TOOLS[why].missing) ?? 'not installed'}, skipped)`;
}

/** What to run to install a program (Debian). */
export function installHint(tool: SystemTool): string {
  const { label, install, missing = 'not installed' } = TOOLS[tool];
  return `${label} is ${missing} (Debian: apt-get install ${install}; .ci/run does it)`;
}
