/**
 * A real PostgreSQL server for tests: finds the local cluster (Debian's
 * `pg_lsclusters`), starts it when it is down and we are root
 * (`pg_ctlcluster <version> <name> start`), and gives each test file a fresh
 * database, dropped afterwards.
 *
 * Administration runs as the `postgres` OS user over the unix socket (peer
 * authentication, as Debian sets it up). Tests connect over TCP to 127.0.0.1
 * as a login role made for them, with a password: that works whatever OS user
 * runs the tests. The password guards nothing but a throwaway test role on a
 * local server.
 *
 * When PostgreSQL is not installed the helpers throw with the command that
 * installs it; the tests that use them are skipped before that, saying so in
 * their names, unless CI's QUORUMFENCE_TEST_REQUIRE_SYSTEM=1 says they must
 * run (test/support/system-tools.ts).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import pg from 'pg';

export const INSTALL_HINT =
  'PostgreSQL is required for the PostgreSQL guard tests. Install and start it with:\n' +
  '  apt-get install -y postgresql && pg_ctlcluster <version> main start   (as root; `pg_lsclusters` shows the version)';

const TEST_ROLE = 'quorumfence_test';
const TEST_PASSWORD = 'quorumfence_test';
const SOCKET_DIR = '/var/run/postgresql';
/** Starting a cluster takes a second or two; 30 s covers a slow CI machine. */
const READY_TIMEOUT_MS = 30_000;

interface LocalCluster {
  readonly version: string;
  readonly name: string;
  readonly port: number;
  readonly online: boolean;
}

function has(command: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' }).status === 0;
}

function findCluster(): LocalCluster {
  if (!has('pg_lsclusters') || !has('psql')) throw new Error(INSTALL_HINT);
  const lines = execFileSync('pg_lsclusters', ['--no-header'], { encoding: 'utf8' }).trim().split('\n').filter(Boolean);
  if (lines.length === 0) throw new Error(`no PostgreSQL cluster exists (pg_lsclusters lists none).\n${INSTALL_HINT}`);
  const clusters = lines.map((line) => {
    const [version, name, port, status] = line.trim().split(/\s+/);
    return { version: version!, name: name!, port: Number(port), online: status === 'online' };
  });
  return clusters.find((c) => c.online) ?? clusters[0]!;
}

function isRoot(): boolean {
  return typeof process.getuid === 'function' && process.getuid() === 0;
}

function waitReady(port: number): void {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (spawnSync('pg_isready', ['-q', '-h', SOCKET_DIR, '-p', String(port)]).status === 0) return;
    if (Date.now() > deadline)
      throw new Error(`PostgreSQL on port ${port} did not become ready in ${READY_TIMEOUT_MS} ms`);
    spawnSync('sleep', ['0.2']);
  }
}

/** Runs SQL as the postgres superuser over the unix socket. */
function adminSql(port: number, sql: string): string {
  const args = ['-h', SOCKET_DIR, '-p', String(port), '-v', 'ON_ERROR_STOP=1', '-qAtX', '-c', sql];
  const result = isRoot()
    ? spawnSync('runuser', ['-u', 'postgres', '--', 'psql', ...args], { encoding: 'utf8' })
    : spawnSync('psql', ['-U', 'postgres', ...args], { encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`psql failed (${sql.slice(0, 80)}…): ${result.stderr || result.error}`);
  return result.stdout;
}

let server: LocalCluster | undefined;

/**
 * Makes sure a server runs and the test role exists; returns the port.
 * @throws Error with INSTALL_HINT when PostgreSQL is missing
 */
export function ensurePostgres(): number {
  if (server) return server.port;
  let cluster = findCluster();
  if (!cluster.online) {
    if (!isRoot())
      throw new Error(
        `PostgreSQL ${cluster.version}/${cluster.name} is down; start it with: sudo pg_ctlcluster ${cluster.version} ${cluster.name} start`,
      );
    const started = spawnSync('pg_ctlcluster', [cluster.version, cluster.name, 'start'], { encoding: 'utf8' });
    // Another test file may have started it at the same moment; readiness below decides.
    if (started.status !== 0 && !/already running/i.test(started.stderr)) {
      throw new Error(`pg_ctlcluster ${cluster.version} ${cluster.name} start failed: ${started.stderr}`);
    }
    cluster = { ...cluster, online: true };
  }
  waitReady(cluster.port);
  adminSql(
    cluster.port,
    `DO $$ BEGIN CREATE ROLE ${TEST_ROLE} LOGIN CREATEDB PASSWORD '${TEST_PASSWORD}'; ` +
      `EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`,
  );
  server = cluster;
  return cluster.port;
}

export interface TestDatabase {
  readonly name: string;
  readonly config: pg.PoolConfig;
  /** A new pool on the database (the caller ends it). */
  pool(max?: number): pg.Pool;
  /** Drops the database, closing any connection still open on it. */
  drop(): Promise<void>;
}

/** A fresh, empty database owned by the test role. */
export function createTestDatabase(label = 'guard'): TestDatabase {
  const port = ensurePostgres();
  const name = `qf_${label.replace(/[^a-z0-9_]/g, '_')}_${process.pid}_${randomBytes(4).toString('hex')}`;
  adminSql(port, `CREATE DATABASE ${name} OWNER ${TEST_ROLE}`);
  const config: pg.PoolConfig = { host: '127.0.0.1', port, user: TEST_ROLE, password: TEST_PASSWORD, database: name };
  return {
    name,
    config,
    pool: (max = 10) => new pg.Pool({ ...config, max }),
    drop: async () => {
      adminSql(port, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    },
  };
}
