/**
 * A whole local deployment for fault scenarios and chaos runs: N replica
 * processes (honest ones from the production entry point, Byzantine ones from
 * `nodes/byzantine-replica.js`), a fault proxy in front of every replica for
 * each group of clients, and the reference resource (`nodes/resource.js`)
 * as the guard. Clients of group g use `clusterFor(g)`, whose endpoints are
 * that group's proxies, so partitions can be whole (every group) or per group
 * (a majorities ring).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { clusterToJson, withEndpoints, type Cluster } from '../cluster/description.js';
import {
  dealLocalCluster,
  replicaEntryPoint,
  startLocalCluster,
  type LocalCluster,
  type LocalReplica,
} from '../cluster/launcher.js';
import { QuorumFenceError } from '../common/errors.js';
import { writeFileDurably } from '../common/files.js';
import { OPERATOR_SECRET_ENV, localOperatorSecret } from '../common/operator-secret.js';
import { byzantineEntryPoint } from './byzantine/control.js';
import { startFaultProxy, type FaultProxy } from './fault-proxy.js';

export interface ScenarioClusterOptions {
  /** Working directory: keys/, data/, resource/ and cluster files go here. */
  readonly dir: string;
  /** 3f+1. */
  readonly n: number;
  /** Indices run by the Byzantine entry point (usually the last f). */
  readonly byzantine: readonly number[];
  /** Flags for every replica process (e.g. --signing-workers 0 --max-ttl 5s). */
  readonly replicaArgs?: readonly string[];
  /** Extra flags for Byzantine replica i (e.g. --behaviour no-record --other-key ...). */
  readonly byzantineArgs?: (index: number) => readonly string[];
  /** Client groups, each with its own proxy per replica (default 1). */
  readonly groups?: number;
  readonly seed?: number;
  /** Extra flags for the reference resource. */
  readonly resourceArgs?: readonly string[];
}

export interface ResourceProcess {
  readonly url: string;
  readonly pid: number;
  stop(): Promise<void>;
}

/** Start-up of a resource is node + LMDB + the BLS backend: a second; 30 s tolerates a loaded machine. */
const RESOURCE_START_TIMEOUT_MS = 30_000;

/**
 * Starts the reference resource from this package's dist, reads its url from
 * the `listening` line. It exits with this process (stdin pipe).
 * @throws QuorumFenceError TIMEOUT, INTERNAL
 */
export function startResourceProcess(options: {
  clusterFile: string;
  dataDir: string;
  args?: readonly string[];
}): Promise<ResourceProcess> {
  const entry = join(dirname(replicaEntryPoint()), 'resource.js');
  if (!existsSync(entry))
    throw new QuorumFenceError('IO_ERROR', `${entry} is missing; build first (npx tsc -p tsconfig.json)`);
  const child: ChildProcess = spawn(
    process.execPath,
    [
      entry,
      '--cluster',
      options.clusterFile,
      '--data',
      options.dataDir,
      '--listen',
      '127.0.0.1:0',
      ...(options.args ?? []),
    ],
    {
      stdio: ['pipe', 'pipe', 'pipe'],
      // The resource shows tokens in /log only to its operator: this process (localOperatorSecret).
      env: { ...process.env, QUORUMFENCE_EXIT_WITH_STDIN: '1', [OPERATOR_SECRET_ENV]: localOperatorSecret() },
    },
  );
  child.stdin!.on('error', () => undefined);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  process.once('exit', () => child.kill('SIGKILL'));
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr = (stderr + chunk).slice(-4096)));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(
        new QuorumFenceError('TIMEOUT', `the resource did not start in ${RESOURCE_START_TIMEOUT_MS} ms: ${stderr}`),
      );
    }, RESOURCE_START_TIMEOUT_MS);
    void exited.then(() => {
      clearTimeout(timer);
      reject(new QuorumFenceError('INTERNAL', `the resource exited before listening: ${stderr}`));
    });
    createInterface({ input: child.stdout! }).on('line', (line) => {
      let entry: Record<string, unknown>;
      try {
        entry = JSON.parse(line) as Record<string, unknown>;
      } catch {
        return;
      }
      if (entry.msg !== 'listening' || typeof entry.url !== 'string') return;
      clearTimeout(timer);
      resolve({
        url: entry.url,
        pid: child.pid ?? 0,
        async stop() {
          if (child.exitCode !== null || child.signalCode !== null) return;
          child.kill('SIGTERM');
          const force = setTimeout(() => child.kill('SIGKILL'), 10_000);
          await exited;
          clearTimeout(force);
        },
      });
    });
  });
}

export class ScenarioCluster {
  readonly n: number;
  readonly f: number;
  readonly byzantine: readonly number[];
  readonly honestIndices: readonly number[];
  /** The cluster with the replicas' own endpoints. */
  readonly direct: Cluster;
  /** proxies[group][index - 1]. */
  readonly proxies: readonly (readonly FaultProxy[])[];
  readonly resource: ResourceProcess;
  readonly keysDir: string;
  readonly #honest: LocalCluster;
  readonly #byz: LocalCluster | undefined;
  readonly #dir: string;

  private constructor(fields: {
    n: number;
    byzantine: readonly number[];
    direct: Cluster;
    proxies: FaultProxy[][];
    resource: ResourceProcess;
    honest: LocalCluster;
    byz: LocalCluster | undefined;
    dir: string;
  }) {
    this.n = fields.n;
    this.f = (fields.n - 1) / 3;
    this.byzantine = fields.byzantine;
    this.honestIndices = Array.from({ length: fields.n }, (_, k) => k + 1).filter((i) => !fields.byzantine.includes(i));
    this.direct = fields.direct;
    this.proxies = fields.proxies;
    this.resource = fields.resource;
    this.#honest = fields.honest;
    this.#byz = fields.byz;
    this.#dir = fields.dir;
    this.keysDir = join(fields.dir, 'keys');
  }

  /**
   * Deals keys into dir/keys and starts everything (in parallel).
   * @throws whatever the launcher or the resource throws (what started is stopped first)
   */
  static async start(options: ScenarioClusterOptions): Promise<ScenarioCluster> {
    const { dir, n } = options;
    mkdirSync(dir, { recursive: true });
    const keys = join(dir, 'keys');
    if (!existsSync(join(keys, 'cluster.json'))) dealLocalCluster(keys, n);
    const honestIndices = Array.from({ length: n }, (_, k) => k + 1).filter((i) => !options.byzantine.includes(i));
    const started = await Promise.allSettled([
      startLocalCluster({
        dir: keys,
        dataRoot: join(dir, 'data'),
        indices: honestIndices,
        extraArgs: options.replicaArgs ?? [],
      }),
      options.byzantine.length === 0
        ? Promise.resolve(undefined)
        : startLocalCluster({
            dir: keys,
            dataRoot: join(dir, 'data'),
            indices: options.byzantine,
            entry: byzantineEntryPoint(),
            extraArgs: (index) => [...(options.replicaArgs ?? []), ...(options.byzantineArgs?.(index) ?? [])],
          }),
      startResourceProcess({
        clusterFile: join(keys, 'cluster.json'),
        dataDir: join(dir, 'resource'),
        args: options.resourceArgs ?? [],
      }),
    ]);
    const [honest, byz, resource] = started;
    if (started.some((s) => s.status === 'rejected')) {
      if (honest.status === 'fulfilled') await honest.value.close();
      if (byz.status === 'fulfilled') await byz.value?.close();
      if (resource.status === 'fulfilled') await resource.value.stop();
      throw (started.find((s) => s.status === 'rejected') as PromiseRejectedResult).reason;
    }
    const h = (honest as PromiseFulfilledResult<LocalCluster>).value;
    const b = (byz as PromiseFulfilledResult<LocalCluster | undefined>).value;
    const urls = Array.from({ length: n }, (_, k) =>
      options.byzantine.includes(k + 1) ? b!.replica(k + 1).url : h.replica(k + 1).url,
    );
    const direct = withEndpoints(h.cluster, urls);
    const proxies: FaultProxy[][] = [];
    for (let g = 0; g < (options.groups ?? 1); g++) {
      proxies.push(
        await Promise.all(
          urls.map((target, k) => startFaultProxy({ target, seed: (options.seed ?? 1) * 1000 + g * 100 + k })),
        ),
      );
    }
    return new ScenarioCluster({
      n,
      byzantine: options.byzantine,
      direct,
      proxies,
      resource: (resource as PromiseFulfilledResult<ResourceProcess>).value,
      honest: h,
      byz: b,
      dir,
    });
  }

  /** The cluster as clients of `group` see it: every endpoint is that group's proxy. */
  clusterFor(group = 0): Cluster {
    return withEndpoints(
      this.direct,
      this.proxies[group]!.map((p) => p.url),
    );
  }

  /** Writes clusterFor(group) as a cluster.json for a separate process (a holder) and returns its path. */
  writeClusterFile(group = 0): string {
    const path = join(this.#dir, `cluster-group-${group}.json`);
    writeFileDurably(path, JSON.stringify(clusterToJson(this.clusterFor(group)), null, 2) + '\n');
    return path;
  }

  replica(index: number): LocalReplica {
    return this.byzantine.includes(index) ? this.#byz!.replica(index) : this.#honest.replica(index);
  }

  /** Partitions replica `index` from every group (or only `group`). */
  partition(index: number, on: boolean, group?: number): void {
    this.proxies.forEach((set, g) => {
      if (group === undefined || g === group) set[index - 1]!.partition(on);
    });
  }

  /** Heals every partition and clears every link fault. */
  heal(): void {
    for (const set of this.proxies) for (const proxy of set) proxy.setFaults({});
  }

  async close(): Promise<void> {
    await Promise.allSettled(this.proxies.flat().map((p) => p.close()));
    await Promise.allSettled([this.#honest.close(), this.#byz?.close(), this.resource.stop()]);
  }
}
