/**
 * A whole local deployment for fault scenarios and chaos runs: N replica
 * processes (honest ones from the production entry point, Byzantine ones from
 * `nodes/byzantine-replica.js`), a fault proxy in front of every replica for
 * each group of clients, and the reference resource (`nodes/resource.js`)
 * as the guard. Clients of group g use `clusterFor(g)`, whose endpoints are
 * that group's proxies, so partitions can be whole (every group) or per group
 * (a majorities ring).
 *
 * Replicas get the process's local operator secret (localOperatorSecret), so
 * their admin endpoint (POST /admin/freeze) serves this process. After a
 * reshare, `startGeneration` starts the new set of replicas beside the old
 * one and `switchTo` points every proxy at them (docs/resharing.md).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { clusterToJson, withEndpoints, type Cluster } from '../cluster/description.js';
import { dealLocalCluster, replicaEntryPoint, startLocalCluster, type LocalReplica } from '../cluster/launcher.js';
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

/** One set of replica processes: the first one dealt at start, or the set a reshare produced. */
export interface ReplicaGeneration {
  /** The description with the replicas' own endpoints (membershipVersion is the share generation). */
  readonly cluster: Cluster;
  /** Folder with this generation's cluster.json and replica-<i>.key. */
  readonly keysDir: string;
  /** Replica i keeps its signing record in dataRoot/replica-<i>. */
  readonly dataRoot: string;
  replica(index: number): LocalReplica;
  close(): Promise<void>;
}

/** Starts one generation's honest and Byzantine replicas, in parallel; what started is stopped on a failure. */
async function startReplicas(options: {
  keysDir: string;
  dataRoot: string;
  byzantine: readonly number[];
  n: number;
  replicaArgs: readonly string[];
  byzantineArgs: (index: number) => readonly string[];
  /** The key was just dealt: make the records (a reshare's new set has them from inheritance instead). */
  newStores: boolean;
}): Promise<ReplicaGeneration> {
  const honestIndices = Array.from({ length: options.n }, (_, k) => k + 1).filter(
    (i) => !options.byzantine.includes(i),
  );
  // The local operator secret opens each replica's POST /admin/freeze to this process (a reshare's live freeze).
  const env = { [OPERATOR_SECRET_ENV]: localOperatorSecret() };
  const started = await Promise.allSettled([
    startLocalCluster({
      newStores: options.newStores,
      dir: options.keysDir,
      dataRoot: options.dataRoot,
      indices: honestIndices,
      extraArgs: options.replicaArgs,
      env,
    }),
    options.byzantine.length === 0
      ? Promise.resolve(undefined)
      : startLocalCluster({
          newStores: options.newStores,
          dir: options.keysDir,
          dataRoot: options.dataRoot,
          indices: options.byzantine,
          entry: byzantineEntryPoint(),
          extraArgs: (index) => [...options.replicaArgs, ...options.byzantineArgs(index)],
          env,
        }),
  ]);
  const [honest, byz] = started;
  if (honest.status === 'rejected' || byz.status === 'rejected') {
    if (honest.status === 'fulfilled') await honest.value.close();
    if (byz.status === 'fulfilled') await byz.value?.close();
    throw (started.find((s) => s.status === 'rejected') as PromiseRejectedResult).reason;
  }
  const h = honest.value;
  const b = byz.value;
  const replica = (index: number) => (options.byzantine.includes(index) ? b!.replica(index) : h.replica(index));
  const urls = Array.from({ length: options.n }, (_, k) => replica(k + 1).url);
  return {
    cluster: withEndpoints(h.cluster, urls),
    keysDir: options.keysDir,
    dataRoot: options.dataRoot,
    replica,
    async close() {
      await Promise.allSettled([h.close(), b?.close()]);
    },
  };
}

export class ScenarioCluster {
  readonly n: number;
  readonly f: number;
  readonly byzantine: readonly number[];
  readonly honestIndices: readonly number[];
  /** proxies[group][index - 1]. */
  readonly proxies: readonly (readonly FaultProxy[])[];
  readonly resource: ResourceProcess;
  /** The first generation's keys (the resource's cluster.json is here). */
  readonly keysDir: string;
  /** The generation clients reach through the proxies. */
  #current: ReplicaGeneration;
  /** The description clients follow: the current generation's, endorsed after a reshare. */
  #direct: Cluster;
  /** Every generation started, for close(). */
  readonly #generations: ReplicaGeneration[] = [];
  readonly #options: ScenarioClusterOptions;
  readonly #dir: string;

  private constructor(fields: {
    options: ScenarioClusterOptions;
    generation: ReplicaGeneration;
    proxies: FaultProxy[][];
    resource: ResourceProcess;
  }) {
    const { options } = fields;
    this.n = options.n;
    this.f = (options.n - 1) / 3;
    this.byzantine = options.byzantine;
    this.honestIndices = Array.from({ length: options.n }, (_, k) => k + 1).filter(
      (i) => !options.byzantine.includes(i),
    );
    this.proxies = fields.proxies;
    this.resource = fields.resource;
    this.#current = fields.generation;
    this.#direct = fields.generation.cluster;
    this.#generations.push(fields.generation);
    this.#options = options;
    this.#dir = options.dir;
    this.keysDir = join(options.dir, 'keys');
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
    const started = await Promise.allSettled([
      startReplicas({
        keysDir: keys,
        dataRoot: join(dir, 'data'),
        byzantine: options.byzantine,
        n,
        replicaArgs: options.replicaArgs ?? [],
        byzantineArgs: options.byzantineArgs ?? (() => []),
        newStores: true,
      }),
      startResourceProcess({
        clusterFile: join(keys, 'cluster.json'),
        dataDir: join(dir, 'resource'),
        args: options.resourceArgs ?? [],
      }),
    ]);
    const [replicas, resource] = started;
    if (replicas.status === 'rejected' || resource.status === 'rejected') {
      if (replicas.status === 'fulfilled') await replicas.value.close();
      if (resource.status === 'fulfilled') await resource.value.stop();
      throw (started.find((s) => s.status === 'rejected') as PromiseRejectedResult).reason;
    }
    const generation = replicas.value;
    const urls = Array.from({ length: n }, (_, k) => generation.replica(k + 1).url);
    const proxies: FaultProxy[][] = [];
    for (let g = 0; g < (options.groups ?? 1); g++) {
      proxies.push(
        await Promise.all(
          urls.map((target, k) => startFaultProxy({ target, seed: (options.seed ?? 1) * 1000 + g * 100 + k })),
        ),
      );
    }
    return new ScenarioCluster({ options, generation, proxies, resource: resource.value });
  }

  /** The current description with the replicas' own endpoints (endorsed once a reshare switched to it). */
  get direct(): Cluster {
    return this.#direct;
  }

  /** The generation clients reach now. */
  get current(): ReplicaGeneration {
    return this.#current;
  }

  /** The cluster as clients of `group` see it: every endpoint is that group's proxy. */
  clusterFor(group = 0): Cluster {
    return withEndpoints(this.#direct, this.proxyUrls(group));
  }

  /** The endpoints of `group`'s proxies, in replica order. */
  proxyUrls(group = 0): string[] {
    return this.proxies[group]!.map((p) => p.url);
  }

  /** Writes clusterFor(group) as a cluster.json for a separate process (a holder) and returns its path. */
  writeClusterFile(group = 0): string {
    const path = join(this.#dir, `cluster-group-${group}.json`);
    writeFileDurably(path, JSON.stringify(clusterToJson(this.clusterFor(group)), null, 2) + '\n');
    return path;
  }

  /** Replica `index` of the current generation. */
  replica(index: number): LocalReplica {
    return this.#current.replica(index);
  }

  /**
   * Starts a new generation of replicas (a reshare's new set) from `keysDir` (cluster.json and
   * replica-<i>.key), with the same flags, the same Byzantine indices, and records in `dataRoot` (which a
   * reshare fills by inheritance first). Clients do not reach it until `switchTo`.
   */
  async startGeneration(options: {
    keysDir: string;
    dataRoot: string;
    byzantineArgs?: (index: number) => readonly string[];
  }): Promise<ReplicaGeneration> {
    const generation = await startReplicas({
      keysDir: options.keysDir,
      dataRoot: options.dataRoot,
      byzantine: this.byzantine,
      n: this.n,
      replicaArgs: this.#options.replicaArgs ?? [],
      byzantineArgs: options.byzantineArgs ?? this.#options.byzantineArgs ?? (() => []),
      newStores: false,
    });
    this.#generations.push(generation);
    return generation;
  }

  /**
   * Makes `generation` the current one: every proxy sends new connections to its replicas, and clients
   * that follow `description` (its endorsed description) reach it. Returns the previous generation, still
   * running, for the caller to read and stop.
   * @throws QuorumFenceError INVALID_ARGUMENT when the description is not the generation's
   */
  switchTo(generation: ReplicaGeneration, description: Cluster): ReplicaGeneration {
    if (description.idHex !== generation.cluster.idHex || description.n !== this.n)
      throw new QuorumFenceError('INVALID_ARGUMENT', 'the description is not of this deployment');
    const previous = this.#current;
    for (const set of this.proxies) set.forEach((proxy, k) => proxy.retarget(generation.replica(k + 1).url));
    this.#current = generation;
    this.#direct = description;
    return previous;
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
    await Promise.allSettled([...this.#generations.map((g) => g.close()), this.resource.stop()]);
  }
}
