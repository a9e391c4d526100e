/**
 * Starts and stops a local cluster of real replica processes, for tests, the
 * demo, chaos runs and benchmarks. Each replica is `node dist/nodes/replica.js`
 * on 127.0.0.1 (or the given host) at a port the OS picks; the launcher reads
 * the actual url from the replica's "listening" log line, waits for /healthz,
 * and hands back the cluster description rebuilt with those endpoints.
 *
 * No orphans: children get QUORUMFENCE_EXIT_WITH_STDIN=1 and a stdin pipe,
 * so they stop when this process dies, even by SIGKILL; `close()` and this
 * process's exit kill whatever is left.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { get as httpGet } from 'node:http';
import { get as httpsGet } from 'node:https';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { QuorumFenceError } from '../common/errors.js';
import { writeFileDurably } from '../common/files.js';
import { systemRandom } from '../crypto/random.js';
import { dealKey } from '../crypto/threshold.js';
import { describeDealtKey, loadClusterFile, localEndpoints, withEndpoints, type Cluster } from './description.js';
import { replicaKeyJson } from './replica-key.js';

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
  /** How long one replica may take to listen and pass /healthz (default 30 s: a loaded 2-core CI box). */
  readonly startTimeoutMs?: number;
  /** The replica entry point (default: dist/nodes/replica.js of this package). */
  readonly entry?: string;
}

export interface LocalReplica {
  readonly index: number;
  readonly dataDir: string;
  /** ws:// or wss:// url; stays the same across restarts (same port). */
  readonly url: string;
  readonly healthUrl: string;
  readonly port: number;
  /** The current process id (changes on restart). */
  readonly pid: number;
  readonly running: boolean;
  /** SIGTERM and wait for the exit (SIGKILL after 15 s); resolves with the exit code. */
  stop(): Promise<number | null>;
  /** Send a signal (default SIGKILL) and wait for the exit. */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Stop it if running, then start it again on the same port. */
  restart(): Promise<void>;
  /** The last lines the process wrote to stderr (for error messages). */
  stderrTail(): string;
  /** Every JSON log line the current process wrote to stdout so far. */
  logLines(): readonly Record<string, unknown>[];
}

export interface LocalCluster {
  /** The cluster description with the actual endpoints of the started replicas. */
  readonly cluster: Cluster;
  readonly replicas: readonly LocalReplica[];
  replica(index: number): LocalReplica;
  /** Kills every replica (SIGTERM, then SIGKILL) and waits for the exits. */
  close(): Promise<void>;
}

const DEFAULT_START_TIMEOUT_MS = 30_000;
const STOP_GRACE_MS = 15_000;
/** Enough stderr to show a stack trace, bounded so a chatty child cannot grow the parent. */
const TAIL_BYTES = 8 * 1024;
const MAX_LOG_LINES = 1_000;

const live = new Set<ChildProcess>();
let exitHookInstalled = false;
function track(child: ChildProcess): void {
  live.add(child);
  child.once('exit', () => live.delete(child));
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once('exit', () => {
      for (const c of live) c.kill('SIGKILL');
    });
  }
}

function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    const parent = dirname(dir);
    if (parent === dir) throw new QuorumFenceError('IO_ERROR', 'cannot find the package root (package.json) above the launcher');
    dir = parent;
  }
}

/** The compiled replica entry point of this package. */
export function replicaEntryPoint(): string {
  return join(packageRoot(), 'dist', 'nodes', 'replica.js');
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
    writeFileDurably(path, JSON.stringify(replicaKeyJson(description.clusterId, share), null, 2) + '\n', { mode: 0o600, exclusive: true });
    return path;
  });
  const clusterPath = join(dir, 'cluster.json');
  writeFileDurably(clusterPath, JSON.stringify(description, null, 2) + '\n', { exclusive: true });
  return { clusterPath, keyPaths };
}

function getHealth(url: string): Promise<number> {
  return new Promise((resolveStatus) => {
    const get = url.startsWith('https:') ? httpsGet : httpGet;
    // Health only: a local self-signed test certificate is fine here.
    const req = get(url, { timeout: 2_000, rejectUnauthorized: false }, (res) => {
      res.resume();
      resolveStatus(res.statusCode ?? 0);
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolveStatus(0));
  });
}

class ReplicaProcess implements LocalReplica {
  readonly index: number;
  readonly dataDir: string;
  url = '';
  healthUrl = '';
  port = 0;
  #child: ChildProcess | undefined;
  #exited: Promise<number | null> = Promise.resolve(null);
  #stderr = '';
  #logs: Record<string, unknown>[] = [];
  readonly #args: (port: number) => string[];
  readonly #options: StartLocalClusterOptions;
  readonly #entry: string;
  readonly #host: string;

  constructor(index: number, options: StartLocalClusterOptions, entry: string, host: string) {
    this.index = index;
    this.#options = options;
    this.#entry = entry;
    this.#host = host;
    this.dataDir = join(resolve(options.dataRoot), `replica-${index}`);
    const extra = typeof options.extraArgs === 'function' ? options.extraArgs(index) : (options.extraArgs ?? []);
    this.#args = (port) => [
      this.#entry,
      '--cluster',
      join(resolve(options.dir), 'cluster.json'),
      '--key',
      join(resolve(options.dir), `replica-${index}.key`),
      '--data',
      this.dataDir,
      '--listen',
      `${host.includes(':') ? `[${host}]` : host}:${port}`,
      ...extra,
    ];
  }

  get pid(): number {
    return this.#child?.pid ?? 0;
  }

  get running(): boolean {
    return this.#child !== undefined && this.#child.exitCode === null && this.#child.signalCode === null;
  }

  stderrTail(): string {
    return this.#stderr.trim();
  }

  logLines(): readonly Record<string, unknown>[] {
    return this.#logs;
  }

  async start(): Promise<void> {
    if (this.running) throw new QuorumFenceError('INVALID_ARGUMENT', `replica ${this.index} is already running`);
    const timeoutMs = this.#options.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS;
    this.#stderr = '';
    this.#logs = [];
    const child = spawn(process.execPath, this.#args(this.port), {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...process.env, QUORUMFENCE_EXIT_WITH_STDIN: '1', ...this.#options.env },
    });
    this.#child = child;
    track(child);
    this.#exited = new Promise((r) => child.once('exit', (code, signal) => r(code ?? (signal ? -1 : null))));
    child.stdin!.on('error', () => undefined);
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (chunk: string) => {
      this.#stderr = (this.#stderr + chunk).slice(-TAIL_BYTES);
    });
    const listening = new Promise<string>((resolveUrl, reject) => {
      let buffered = '';
      child.stdout!.setEncoding('utf8');
      child.stdout!.on('data', (chunk: string) => {
        buffered += chunk;
        let newline;
        while ((newline = buffered.indexOf('\n')) >= 0) {
          const line = buffered.slice(0, newline);
          buffered = buffered.slice(newline + 1);
          let entry: Record<string, unknown>;
          try {
            entry = JSON.parse(line) as Record<string, unknown>;
          } catch {
            continue; // Not a log line.
          }
          if (this.#logs.length < MAX_LOG_LINES) this.#logs.push(entry);
          if (entry.msg === 'listening' && typeof entry.url === 'string') resolveUrl(entry.url);
        }
      });
      void this.#exited.then((code) =>
        reject(
          new QuorumFenceError('INTERNAL', `replica ${this.index} exited (${code}) before listening: ${this.stderrTail().split('\n').slice(-5).join(' | ') || '(no stderr)'}`, {
            index: this.index,
            exitCode: code,
            stderr: this.stderrTail(),
          }),
        ),
      );
    });
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new QuorumFenceError('TIMEOUT', `replica ${this.index} did not become healthy within ${timeoutMs} ms; stderr: ${this.stderrTail().slice(-2000) || '(empty)'}`, {
              index: this.index,
            }),
          ),
        timeoutMs,
      );
    });
    try {
      const url = await Promise.race([listening, timeout]);
      this.url = url;
      this.port = Number(new URL(url).port);
      this.healthUrl = url.replace(/^ws/, 'http') + '/healthz';
      // Health after the listening line: the replica logs it only when ready, but /healthz is the contract.
      await Promise.race([
        (async () => {
          while ((await getHealth(this.healthUrl)) !== 200) {
            if (!this.running) throw new QuorumFenceError('INTERNAL', `replica ${this.index} exited while starting: ${this.stderrTail().slice(-2000)}`);
            await new Promise((r) => setTimeout(r, 50));
          }
        })(),
        timeout,
        this.#exited.then(() => {
          throw new QuorumFenceError('INTERNAL', `replica ${this.index} exited while starting: ${this.stderrTail().slice(-2000)}`);
        }),
      ]);
    } catch (error) {
      child.kill('SIGKILL');
      await this.#exited;
      throw error;
    } finally {
      clearTimeout(timer);
    }
  }

  async stop(): Promise<number | null> {
    if (!this.running) return this.#exited;
    this.#child!.kill('SIGTERM');
    const timer = setTimeout(() => this.#child?.kill('SIGKILL'), STOP_GRACE_MS);
    try {
      return await this.#exited;
    } finally {
      clearTimeout(timer);
    }
  }

  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    if (!this.running) return;
    this.#child!.kill(signal);
    await this.#exited;
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }
}

/**
 * Starts the replicas (in parallel) and resolves when all are healthy. On any
 * failure, kills the ones that started and rejects with the failing replica's
 * stderr in the message.
 * @throws QuorumFenceError TIMEOUT, INTERNAL (a replica exited), and loadClusterFile's errors
 */
export async function startLocalCluster(options: StartLocalClusterOptions): Promise<LocalCluster> {
  const base = loadClusterFile(join(resolve(options.dir), 'cluster.json'));
  const indices = options.indices ?? Array.from({ length: options.n ?? base.n }, (_, k) => k + 1);
  for (const i of indices) {
    if (!Number.isInteger(i) || i < 1 || i > base.n) throw new QuorumFenceError('INVALID_ARGUMENT', `replica index ${i} is not in 1..${base.n}`);
  }
  const entry = options.entry ?? replicaEntryPoint();
  if (!existsSync(entry)) throw new QuorumFenceError('IO_ERROR', `replica entry point ${entry} is missing; build first (npx tsc -p tsconfig.json)`);
  const replicas = indices.map((i) => new ReplicaProcess(i, options, entry, options.host ?? '127.0.0.1'));
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
