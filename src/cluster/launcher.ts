/**
 * Starts and stops a local cluster of real replica processes, for tests, the
 * demo, chaos runs and benchmarks. Each replica is `node dist/nodes/replica.js`
 * on 127.0.0.1 (or the given host) at a port the OS picks; the launcher reads
 * the actual url from the replica's "listening" log line, waits for /healthz,
 * and hands back the cluster description rebuilt with those endpoints. A
 * freshly dealt cluster's replicas get their empty signing records from it
 * (`newStores`), as `keygen --data` makes them: a replica never makes its own.
 *
 * The process handling (listening line, health, no orphans) is
 * local-process.ts; this file knows what a replica and a resource need.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { QuorumFenceError } from '../common/errors.js';
import { writeFileDurably } from '../common/files.js';
import { OPERATOR_SECRET_ENV, localOperatorSecret } from '../common/operator-secret.js';
import { systemRandom } from '../crypto/random.js';
import { dealKey } from '../crypto/threshold.js';
import { describeDealtKey, loadClusterFile, localEndpoints, withEndpoints, type Cluster } from './description.js';
import { replicaKeyJson } from './replica-key.js';
import { listenAddress, localProcess, type LocalProcess } from './local-process.js';

export interface StartLocalClusterOptions {
  /** Folder with cluster.json and replica-<i>.key (as `quorumfence keygen` or `dealLocalCluster` write them). */
  readonly dir: string;
  /** Start replicas 1..n (default: all of them). */
  readonly n?: number;
  /** Start exactly these replica indices instead. */
  readonly indices?: readonly number[];
  /** Replica i keeps its signing record in dataRoot/replica-<i>. */
  readonly dataRoot: string;
  /** Listen address (default 127.0.0.1). */
  readonly host?: string;
  /** More flags for every replica, or per replica. */
  readonly extraArgs?: readonly string[] | ((index: number) => readonly string[]);
  /** Extra environment for the children. */
  readonly env?: NodeJS.ProcessEnv;
  /** Flags for node itself, per replica (the benchmark's --cpu-prof). */
  readonly nodeArgs?: (index: number) => readonly string[];
  /** How long one replica may take to listen and pass /healthz (default 30 s: a loaded 2-core CI box). */
  readonly startTimeoutMs?: number;
  /** The replica entry point (default: dist/nodes/replica.js of this package). */
  readonly entry?: string;
  /**
   * Make the empty signing record of each started replica whose data directory does not exist yet, with
   * `quorumfence replica init --cluster --key`: the key was just dealt (as dealLocalCluster does), so nothing was
   * signed with it. Without it, a replica with no record refuses to start (STORE_MISSING), as it always does: what
   * was signed before must never be signed again. A restart (the same dataRoot) finds the records there.
   */
  readonly newStores?: boolean;
}

export interface LocalReplica extends LocalProcess {
  readonly index: number;
  readonly dataDir: string;
}

export interface LocalCluster {
  /** The cluster description with the actual endpoints of the started replicas. */
  readonly cluster: Cluster;
  readonly replicas: readonly LocalReplica[];
  replica(index: number): LocalReplica;
  /** Kills every replica (SIGTERM, then SIGKILL) and waits for the exits. */
  close(): Promise<void>;
}

function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    const parent = dirname(dir);
    if (parent === dir)
      throw new QuorumFenceError('IO_ERROR', 'cannot find the package root (package.json) above the launcher');
    dir = parent;
  }
}

/** The compiled replica entry point of this package. */
export function replicaEntryPoint(): string {
  return join(packageRoot(), 'dist', 'nodes', 'replica.js');
}

/** The compiled `quorumfence` command of this package. */
export function commandEntryPoint(): string {
  return join(packageRoot(), 'dist', 'nodes', 'quorumfence.js');
}

/** How long `replica init` may take to make a record (a node start and one LMDB transaction; a loaded CI box). */
const INIT_TIMEOUT_MS = 60_000;

/**
 * `quorumfence replica init --cluster --key` for a replica whose data directory does not exist yet: the real
 * command makes its empty signing record.
 * @throws QuorumFenceError INTERNAL naming the command's error
 */
function initSigningRecord(replica: LocalReplica, options: StartLocalClusterOptions): Promise<void> {
  const dir = resolve(options.dir);
  const args = [
    commandEntryPoint(),
    'replica',
    'init',
    '--data',
    replica.dataDir,
    '--cluster',
    join(dir, 'cluster.json'),
    '--key',
    join(dir, `replica-${replica.index}.key`),
  ];
  return new Promise((resolveInit, reject) => {
    execFile(
      process.execPath,
      args,
      { timeout: INIT_TIMEOUT_MS, env: { ...process.env, ...options.env } },
      (error, _out, err) => {
        if (!error) return resolveInit();
        reject(
          new QuorumFenceError(
            'INTERNAL',
            `replica ${replica.index}: "quorumfence replica init" failed: ${String(err).trim() || error.message}`,
          ),
        );
      },
    );
  });
}

/** The compiled reference resource entry point of this package. */
export function resourceEntryPoint(): string {
  return join(packageRoot(), 'dist', 'nodes', 'resource.js');
}

/**
 * Deals a fresh key for an n-replica cluster and writes cluster.json and
 * replica-<i>.key into `dir` (endpoints are placeholders; the launcher
 * replaces them with the actual ones). For tests and demos.
 * @throws QuorumFenceError FILE_EXISTS, IO_ERROR
 */
export function dealLocalCluster(dir: string, n = 4): { clusterPath: string; keyPaths: string[] } {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const key = dealKey(n, 2 * ((n - 1) / 3) + 1, systemRandom);
  const description = describeDealtKey(key, localEndpoints(n));
  const keyPaths = key.shares.map((share) => {
    const path = join(dir, `replica-${share.index}.key`);
    writeFileDurably(path, JSON.stringify(replicaKeyJson(description.clusterId, share), null, 2) + '\n', {
      mode: 0o600,
      exclusive: true,
    });
    return path;
  });
  const clusterPath = join(dir, 'cluster.json');
  writeFileDurably(clusterPath, JSON.stringify(description, null, 2) + '\n', { exclusive: true });
  return { clusterPath, keyPaths };
}

function startReplicaProcess(
  index: number,
  options: StartLocalClusterOptions,
  entry: string,
  host: string,
): LocalReplica {
  const dir = resolve(options.dir);
  const dataDir = join(resolve(options.dataRoot), `replica-${index}`);
  const extra = typeof options.extraArgs === 'function' ? options.extraArgs(index) : (options.extraArgs ?? []);
  const server = localProcess({
    name: `replica ${index}`,
    entry,
    args: (port) => [
      '--cluster',
      join(dir, 'cluster.json'),
      '--key',
      join(dir, `replica-${index}.key`),
      '--data',
      dataDir,
      '--listen',
      listenAddress(host, port),
      ...extra,
    ],
    env: options.env,
    ...(options.nodeArgs ? { nodeArgs: options.nodeArgs(index) } : {}),
    startTimeoutMs: options.startTimeoutMs,
  });
  return Object.assign(server, { index, dataDir });
}

/**
 * Starts the replicas (in parallel) and resolves when all are healthy (with `newStores`, making the signing
 * records they lack first). On any failure, kills the ones that started and rejects with the failing replica's
 * stderr in the message.
 * @throws QuorumFenceError TIMEOUT, INTERNAL (a replica exited: STORE_MISSING among others), and loadClusterFile's
 *   and createSigningRecord's errors
 */
export async function startLocalCluster(options: StartLocalClusterOptions): Promise<LocalCluster> {
  const base = loadClusterFile(join(resolve(options.dir), 'cluster.json'));
  const indices = options.indices ?? Array.from({ length: options.n ?? base.n }, (_, k) => k + 1);
  for (const i of indices) {
    if (!Number.isInteger(i) || i < 1 || i > base.n)
      throw new QuorumFenceError('INVALID_ARGUMENT', `replica index ${i} is not in 1..${base.n}`);
  }
  const entry = options.entry ?? replicaEntryPoint();
  if (!existsSync(entry))
    throw new QuorumFenceError(
      'IO_ERROR',
      `replica entry point ${entry} is missing; build first (npx tsc -p tsconfig.json)`,
    );
  const replicas = indices.map((i) => startReplicaProcess(i, options, entry, options.host ?? '127.0.0.1'));
  if (options.newStores)
    await Promise.all(replicas.filter((r) => !existsSync(r.dataDir)).map((r) => initSigningRecord(r, options)));
  const started = await Promise.allSettled(replicas.map((r) => r.start()));
  const failed = started.find((s) => s.status === 'rejected');
  if (failed) {
    await Promise.all(replicas.map((r) => r.kill('SIGKILL')));
    throw (failed as PromiseRejectedResult).reason;
  }
  const endpoints = base.replicas.map((r) => replicas.find((p) => p.index === r.index)?.url ?? r.endpoint);
  const cluster = withEndpoints(base, endpoints);
  return {
    cluster,
    replicas,
    replica(index) {
      const found = replicas.find((r) => r.index === index);
      if (!found) throw new QuorumFenceError('INVALID_ARGUMENT', `replica ${index} was not started`);
      return found;
    },
    async close() {
      await Promise.all(replicas.map((r) => r.stop()));
    },
  };
}

export interface StartLocalResourceOptions {
  /** The cluster description the resource checks tokens against. */
  readonly clusterFile: string;
  /** Data, barriers and guard log live here. */
  readonly dataDir: string;
  /** Listen address (default 127.0.0.1, port picked by the OS). */
  readonly host?: string;
  readonly port?: number;
  readonly extraArgs?: readonly string[];
  readonly env?: NodeJS.ProcessEnv;
  /** Flags for node itself (the benchmark's --cpu-prof). */
  readonly nodeArgs?: readonly string[];
  readonly startTimeoutMs?: number;
}

/**
 * Starts the reference guarded resource (`quorumfence resource`) as a local
 * process and resolves once it is healthy; `url` is its http:// base.
 * @throws QuorumFenceError TIMEOUT, INTERNAL (it exited), IO_ERROR (not built)
 */
export async function startLocalResource(options: StartLocalResourceOptions): Promise<LocalProcess> {
  const entry = resourceEntryPoint();
  if (!existsSync(entry))
    throw new QuorumFenceError(
      'IO_ERROR',
      `resource entry point ${entry} is missing; build first (npx tsc -p tsconfig.json)`,
    );
  const host = options.host ?? '127.0.0.1';
  const resource = localProcess({
    name: 'resource',
    entry,
    // `port` is 0 before the first start (then the requested port, or one the OS picks) and the bound port after.
    args: (port) => [
      '--cluster',
      resolve(options.clusterFile),
      '--data',
      resolve(options.dataDir),
      '--listen',
      listenAddress(host, port || (options.port ?? 0)),
      ...(options.extraArgs ?? []),
    ],
    // The resource shows tokens in /log only to its operator: this process (localOperatorSecret).
    env: { [OPERATOR_SECRET_ENV]: localOperatorSecret(), ...options.env },
    ...(options.nodeArgs ? { nodeArgs: options.nodeArgs } : {}),
    startTimeoutMs: options.startTimeoutMs,
  });
  await resource.start();
  return resource;
}
