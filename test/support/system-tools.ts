/**
 * The system programs some tests run for real (PostgreSQL, Chromium, promtool, kubectl, docker-compose, etcd, fish, systemd-analyze), and
 * whether this machine has them. `npm test` must work on a fresh machine with only Node.js (README, first lines), so
 * a test whose program is missing is skipped, and says so in its name ("needs PostgreSQL: not installed, skipped"):
 * vitest reports it as skipped, never as passed. CI installs every one of them (.ci/run) and sets
 * QUORUMFENCE_TEST_REQUIRE_SYSTEM=1, under which nothing is skipped: a missing program fails its tests with the
 * command that installs it.
 */
import { spawnSync } from 'node:child_process';

export type SystemTool =
  'postgresql' | 'chromium' | 'promtool' | 'kubectl' | 'docker-compose' | 'etcd' | 'fish' | 'systemd-analyze';

interface ToolInfo {
  /** What a test name calls it. */
  readonly label: string;
  /** Shell commands, each of which must be on PATH (alternatives with `||`). */
  readonly commands: readonly string[];
  /** Debian's package. */
  readonly install: string;
}

const TOOLS: Record<SystemTool, ToolInfo> = {
  postgresql: { label: 'PostgreSQL', commands: ['pg_lsclusters', 'psql'], install: 'postgresql' },
  chromium: { label: 'Chromium', commands: ['chromium || command -v chromium-browser'], install: 'chromium' },
  promtool: { label: 'promtool', commands: ['promtool'], install: 'prometheus' },
  kubectl: { label: 'kubectl', commands: ['kubectl'], install: 'kubernetes-client' },
  'docker-compose': { label: 'docker-compose', commands: ['docker-compose'], install: 'docker-compose' },
  etcd: { label: 'etcd', commands: ['etcd'], install: 'etcd-server' },
  fish: { label: 'fish', commands: ['fish'], install: 'fish' },
  'systemd-analyze': { label: 'systemd-analyze', commands: ['systemd-analyze'], install: 'systemd' },
};

/** Set by CI: every system program must be there, and no test is skipped for want of one. */
export const SYSTEM_TOOLS_REQUIRED = process.env.QUORUMFENCE_TEST_REQUIRE_SYSTEM === '1';

const found = new Map<SystemTool, boolean>();

/** The program is on PATH (looked up once per test file). */
export function hasTool(tool: SystemTool): boolean {
  let has = found.get(tool);
  if (has === undefined) {
    has = TOOLS[tool].commands.every(
      (command) => spawnSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' }).status === 0,
    );
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
  return lacks(...tools) ? `(needs ${labels}: not installed, skipped)` : `(needs ${labels})`;
}

/** What to run to install a program (Debian). */
export function installHint(tool: SystemTool): string {
  return `${TOOLS[tool].label} is not installed (Debian: apt-get install ${TOOLS[tool].install}; .ci/run installs it)`;
}
