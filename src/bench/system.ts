/**
 * The whole system on this machine: N local replica processes, the reference
 * guarded resource, and clients in this process, as a user would run them.
 *
 *   latency      1 client, uncontended acquire of a resource it held before (p50, p99)
 *   loops        closed loops of acquire + release, and of acquire + one write through
 *                the guard + release: 1 client, 16 clients on distinct resources (a
 *                fresh name each cycle: per-order locks), 16 clients on one hot resource
 *                (each acquire's wait is kept: the hot p99)
 *   cpu          CPU time of every process (replicas, resource, this client process)
 *                per grant during the 1- and 16-client write loops, against the crypto floor
 *   profile      (optional) the write loops again on fresh processes under --cpu-prof:
 *                where each process kind's CPU goes, per grant (profile.ts)
 *
 * CPU is read from /proc for the children and process.cpuUsage() for this
 * process, so it includes everything a grant costs: sockets, JSON, fsync, crypto.
 * With `links` (bench --rtt), the clients reach every replica and the resource
 * through them (network.ts); the bench's own reads of /metrics do not.
 */
import { Agent, request as httpRequest } from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { clusterToJson, withEndpoints, type Cluster } from '../cluster/description.js';
import {
  dealLocalCluster,
  startLocalCluster,
  startLocalResource,
  type LocalCluster,
  type LocalReplica,
} from '../cluster/launcher.js';
import type { LocalProcess } from '../cluster/local-process.js';
import { Session } from 'node:inspector/promises';
import { breakdown, monotonicUs, readProfiles, type CpuProfile, type KindBreakdown } from './profile.js';
import { QuorumFenceClient } from '../client/client.js';
import { verifyBatcherFor } from '../crypto/verify-batch.js';
import { generateIdentity } from '../client/identity.js';
import { cpuNow, cpuPerGrant, guardBatches, replicaCounters, type CpuPerGrant } from './counters.js';
import type { MetricsSample } from '../console/replica-health.js';
import { LOOPBACK, type Links } from './network.js';
import {
  closedLoop,
  freshNames,
  LOOP_PLAN,
  summarise,
  type BenchSize,
  type CycleWindow,
  type LoopCondition,
  type LoopKinds,
  type LoopRate,
  type Timing,
} from './measure.js';

export type { LoopRate } from './measure.js';

export interface SystemFigures {
  readonly replicas: number;
  readonly backend: string;
  readonly signingWorkers: number;
  /** Uncontended acquire, 1 client, resource held before. */
  readonly acquireMs: Timing;
  /**
   * The same acquires at the replicas (their metrics, mean over every replica that granted): the record's write
   * until it is flushed, and the partial's signing, which runs during the flush.
   */
  readonly acquireReplicaMs: { readonly flush: number; readonly sign: number };
  readonly loops: LoopKinds;
  /** CPU ms of all processes per grant during the distinct loop with a guarded write. */
  readonly cpuPerGrantMs: number;
  /** CPU ms per grant by process kind, same loop. */
  readonly cpuBreakdownMs: CpuPerGrant;
  /** The same for the 1-client write loop: no queueing, so the cost of one grant alone. */
  readonly cpuOneBreakdownMs: { readonly replicas: number; readonly resource: number; readonly client: number };
  /** With `profile`: where each process kind spends its CPU, per grant, in the 1- and 16-client loops. */
  readonly profile?: { readonly one: LoopProfile; readonly distinct: LoopProfile };
}

/**
 * A profiled loop. The profile gives the proportions (which functions, which
 * buckets); the amounts are the CPU per grant measured from /proc in the same
 * loop run without the profiler (the profiler's own sampling costs CPU too,
 * cpuUnderProfilerMs, which would otherwise be spread over every bucket).
 */
export interface LoopProfile {
  readonly loop: LoopRate;
  readonly grants: number;
  readonly cpuUnderProfilerMs: CpuPerGrant;
  readonly kinds: {
    readonly replicas: KindBreakdown;
    readonly resource: KindBreakdown;
    readonly client: KindBreakdown;
  };
}

export interface SystemBenchOptions {
  readonly replicas?: number;
  /** How long to run (default full; see LOOP_PLAN). */
  readonly size?: BenchSize;
  /** Clients in the parallel loops (default 16). */
  readonly clients?: number;
  /** Signing threads per replica (default: the replica's own default). */
  readonly signingWorkers?: number;
  readonly progress?: (line: string) => void;
  /** Also profile the 1- and 16-client fenced-write loops (fresh processes under --cpu-prof). */
  readonly profile?: boolean;
  /** How the clients reach the replicas and the resource (default: directly, on loopback). */
  readonly links?: Links;
}

/** The processes a loop runs against, and how its clients reach them. */
export interface Running {
  readonly local: LocalCluster;
  /** The cluster with the endpoints the clients dial (the replicas' own, or routes to them). */
  readonly cluster: Cluster;
  /** Where the clients send their guarded writes. */
  readonly resourceUrl: string;
  /** The resource's own address, for the bench's reads of its /metrics. */
  readonly metricsUrl: string;
}

/** `local` and `resource` as the clients reach them through `links`. */
export async function reach(local: LocalCluster, resource: LocalProcess, links: Links): Promise<Running> {
  const endpoints = await Promise.all(local.cluster.replicas.map((r) => links.route(r.endpoint)));
  return {
    local,
    cluster: withEndpoints(local.cluster, endpoints),
    resourceUrl: await links.route(resource.url),
    metricsUrl: resource.url,
  };
}

/** One guarded write through the reference resource over a keep-alive connection of `agent`. */
async function guardedWrite(
  agent: Agent,
  resourceUrl: string,
  resource: string,
  token: string,
  body: string,
): Promise<void> {
  const status = await new Promise<number>((resolveStatus, reject) => {
    const request = httpRequest(
      `${resourceUrl}/kv/${encodeURIComponent(resource)}/value`,
      { method: 'PUT', agent, headers: { authorization: `QuorumFence ${token}`, 'content-length': body.length } },
      (response) => {
        response.resume();
        response.once('end', () => resolveStatus(response.statusCode ?? 0));
      },
    );
    request.once('error', reject);
    request.end(body);
  });
  if (status !== 200) throw new QuorumFenceError('INTERNAL', `benchmark: the guard refused a write with ${status}`);
}

/**
 * `clients` clients in closed loops of acquire [+ a guarded write] + release for `seconds` (measure.ts,
 * closedLoop), each on `resourceOf(its index)`; with `condition`, under it (bench --gray).
 */
export async function acquireLoop(
  running: Running,
  clients: number,
  seconds: number,
  resourceOf: (k: number) => string,
  write: boolean,
  window?: CycleWindow,
  condition?: LoopCondition,
): Promise<LoopRate> {
  // Default client options throughout: waiters on a hot resource hear of each release from the replicas.
  const { local, resourceUrl, metricsUrl } = running;
  const connected = await Promise.all(
    Array.from({ length: clients }, () => QuorumFenceClient.connect(running.cluster, generateIdentity())),
  );
  // Keep-alive connections to the resource, one per client, as etcd's side gets (global fetch costs the client more CPU).
  const agent = new Agent({ keepAlive: true, maxSockets: clients });
  try {
    const signedBefore = (await replicaCounters(local)).grantsSigned;
    const batcher = verifyBatcherFor(local.cluster.backend);
    const batchesBefore = { batches: batcher.batches, checks: batcher.checks };
    const guardBefore = await guardBatches(metricsUrl);
    const rate = await closedLoop(
      clients,
      seconds,
      async (k, remainingMs) => {
        const resource = resourceOf(k);
        const t0 = performance.now();
        const acquired = await connected[k]!.acquire(resource, {
          ttlMs: 10_000,
          waitMs: remainingMs,
          autoRenew: false,
        });
        const acquireMs = performance.now() - t0;
        if (!acquired.ok) {
          if (acquired.reason === 'busy' || acquired.reason === 'timeout') return undefined;
          throw new QuorumFenceError(
            'INTERNAL',
            `benchmark: acquire refused (${acquired.reason}): ${acquired.message}`,
          );
        }
        if (write) await guardedWrite(agent, resourceUrl, resource, acquired.lease.tokenText, 'x');
        await acquired.lease.release();
        return acquireMs;
      },
      window,
      condition,
    );
    const signed = (await replicaCounters(local)).grantsSigned - signedBefore;
    const guardAfter = await guardBatches(metricsUrl);
    return {
      ...rate,
      // Under a condition, cycles also ran uncounted while it settled: the replicas' count would be shared out wrong.
      ...(condition ? {} : { signaturesPerGrant: signed / (rate.operations + clients) }),
      clientChecksPerBatch: (batcher.checks - batchesBefore.checks) / (batcher.batches - batchesBefore.batches),
      ...(write
        ? {
            guardChecksPerBatch: (guardAfter.checks - guardBefore.checks) / (guardAfter.batches - guardBefore.batches),
          }
        : {}),
    };
  } finally {
    await Promise.all(connected.map((c) => c.close()));
    agent.destroy();
  }
}

/**
 * One replica started differently from the others (bench --gray): another entry point (the Byzantine replica
 * process), more flags, more environment (a library preloaded into it).
 */
export interface OddReplica {
  readonly index: number;
  readonly entry?: string;
  readonly extraArgs?: readonly string[];
  readonly env?: NodeJS.ProcessEnv;
}

/** How the replicas of `dir` are started (every one alike). */
function replicaOptions(
  dir: string,
  signingWorkers: number | undefined,
  nodeArgs: ((process: string) => readonly string[]) | undefined,
) {
  return {
    newStores: true,
    dir: join(dir, 'keys'),
    dataRoot: join(dir, 'data'),
    extraArgs: signingWorkers === undefined ? [] : ['--signing-workers', String(signingWorkers)],
    ...(nodeArgs ? { nodeArgs: (index: number) => nodeArgs(`replica-${index}`) } : {}),
  };
}

/** `odd.index` alone, started its own way (on its signing record, made if missing). */
function startOdd(common: ReturnType<typeof replicaOptions>, odd: OddReplica): Promise<LocalCluster> {
  return startLocalCluster({
    ...common,
    indices: [odd.index],
    extraArgs: [...common.extraArgs, ...(odd.extraArgs ?? [])],
    ...(odd.entry ? { entry: odd.entry } : {}),
    ...(odd.env ? { env: odd.env } : {}),
  });
}

/** One cluster of `replicas` (every index once), the description's endpoints theirs. */
function joined(base: LocalCluster, replicas: readonly LocalReplica[]): LocalCluster {
  const sorted = [...replicas].sort((a, b) => a.index - b.index);
  return {
    cluster: withEndpoints(
      base.cluster,
      sorted.map((r) => r.url),
    ),
    replicas: sorted,
    replica(index) {
      const found = sorted.find((r) => r.index === index);
      if (!found) throw new QuorumFenceError('INVALID_ARGUMENT', `replica ${index} was not started`);
      return found;
    },
    async close() {
      await Promise.all(sorted.map((r) => r.stop()));
    },
  };
}

/** The replicas of `dir`, with `odd` (if any) started its own way; what started is stopped on a failure. */
async function startReplicas(
  dir: string,
  n: number,
  signingWorkers: number | undefined,
  nodeArgs: ((process: string) => readonly string[]) | undefined,
  odd: OddReplica | undefined,
): Promise<LocalCluster> {
  const common = replicaOptions(dir, signingWorkers, nodeArgs);
  if (!odd) return startLocalCluster(common);
  const started = await Promise.allSettled([
    startLocalCluster({
      ...common,
      indices: Array.from({ length: n }, (_, k) => k + 1).filter((i) => i !== odd.index),
    }),
    startOdd(common, odd),
  ]);
  const [others, one] = started;
  if (others.status === 'rejected' || one.status === 'rejected') {
    await Promise.allSettled(started.flatMap((s) => (s.status === 'fulfilled' ? [s.value.close()] : [])));
    throw (started.find((s) => s.status === 'rejected') as PromiseRejectedResult).reason;
  }
  return joined(others.value, [...others.value.replicas, ...one.value.replicas]);
}

/**
 * Replica `odd.index` of a system startSystem started under `dir`, stopped and started again its own way
 * (`odd`), on the same signing record; or as the others are when `odd` gives nothing but the index (bench
 * --gray, between faults). The others keep running. Its address changes: route to it again (reach).
 */
export async function restartReplica(
  dir: string,
  local: LocalCluster,
  signingWorkers: number | undefined,
  odd: OddReplica,
): Promise<LocalCluster> {
  await local.replica(odd.index).stop();
  const one = await startOdd(replicaOptions(dir, signingWorkers, undefined), odd);
  return joined(local, [...local.replicas.filter((r) => r.index !== odd.index), ...one.replicas]);
}

/**
 * Deals a key, starts n replicas and the reference resource under `dir` (node flags per process for profiling;
 * one replica started its own way for bench --gray).
 */
export async function startSystem(
  dir: string,
  n: number,
  signingWorkers: number | undefined,
  nodeArgs?: (process: string) => readonly string[],
  odd?: OddReplica,
): Promise<{ local: LocalCluster; resource: LocalProcess }> {
  dealLocalCluster(join(dir, 'keys'), n);
  const local = await startReplicas(dir, n, signingWorkers, nodeArgs, odd);
  try {
    const clusterFile = join(dir, 'cluster.json');
    writeFileSync(clusterFile, JSON.stringify(clusterToJson(local.cluster)));
    const resource = await startLocalResource({
      clusterFile,
      dataDir: join(dir, 'data', 'resource'),
      ...(nodeArgs ? { nodeArgs: nodeArgs('resource') } : {}),
    });
    return { local, resource };
  } catch (error) {
    await local.close();
    throw error;
  }
}

/**
 * One fenced-write loop on fresh processes under --cpu-prof (the client, in
 * this process, through the inspector); each process kind's self time inside
 * the loop's window, per grant.
 */
async function profileLoop(
  dir: string,
  n: number,
  signingWorkers: number | undefined,
  clients: number,
  seconds: number,
  unprofiledCpu: CpuPerGrant,
  progress: (line: string) => void,
): Promise<LoopProfile> {
  const profiles = join(dir, 'cpuprofiles');
  // 250 us between samples: a grant costs a few ms, so the default 1 ms would see little.
  const nodeArgs = (name: string) => [
    '--cpu-prof',
    '--cpu-prof-interval',
    '250',
    '--cpu-prof-dir',
    join(profiles, name),
  ];
  progress(`system: profiling ${clients} client(s), acquire + guarded write + release ...`);
  const { local, resource } = await startSystem(dir, n, signingWorkers, nodeArgs);
  const session = new Session();
  let clientProfile: CpuProfile;
  let loopRate: LoopRate;
  let window: { fromUs: number; toUs: number };
  let cpu: CpuPerGrant;
  try {
    session.connect();
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: 250 });
    await session.post('Profiler.start');
    const pids = { replicas: local.replicas.map((r) => r.pid), resource: resource.pid };
    let fromUs = monotonicUs();
    let toUs = fromUs;
    let before = cpuNow(pids);
    let after = before;
    loopRate = await acquireLoop(
      await reach(local, resource, LOOPBACK),
      clients,
      seconds,
      freshNames('bench/profile'),
      true,
      {
        opened: () => {
          fromUs = monotonicUs();
          before = cpuNow(pids);
        },
        done: () => {
          after = cpuNow(pids);
          toUs = monotonicUs();
        },
      },
    );
    window = { fromUs, toUs };
    // The loop's warm-up grants (one per client) fall inside the window too.
    cpu = cpuPerGrant(before, after, loopRate.operations + clients);
    clientProfile = (await session.post('Profiler.stop')).profile as unknown as CpuProfile;
  } finally {
    session.disconnect();
    // A graceful stop: node writes each --cpu-prof file as its process (or thread) exits.
    await resource.stop();
    await local.close();
  }
  const grants = loopRate.operations + clients;
  const replicaProfiles = local.replicas.flatMap((r) => readProfiles(join(profiles, `replica-${r.index}`)));
  return {
    loop: loopRate,
    grants,
    cpuUnderProfilerMs: cpu,
    kinds: {
      replicas: breakdown(replicaProfiles, grants, { window, cpuMsPerGrant: unprofiledCpu.replicas }),
      resource: breakdown(readProfiles(join(profiles, 'resource')), grants, {
        window,
        cpuMsPerGrant: unprofiledCpu.resource,
      }),
      client: breakdown([clientProfile], grants, { window, cpuMsPerGrant: unprofiledCpu.client }),
    },
  };
}

export async function benchSystem(options: SystemBenchOptions = {}): Promise<SystemFigures> {
  const n = options.replicas ?? 4;
  const plan = LOOP_PLAN[options.size ?? 'full'];
  const clients = options.clients ?? 16;
  const seconds = plan.seconds;
  const progress = options.progress ?? (() => undefined);
  const dir = mkdtempSync(join(tmpdir(), 'qf-bench-system-'));
  let local: LocalCluster | undefined;
  let resource: LocalProcess | undefined;
  try {
    ({ local, resource } = await startSystem(dir, n, options.signingWorkers));
    const running = await reach(local, resource, options.links ?? LOOPBACK);
    progress('system: uncontended acquire latency ...');
    const client = await QuorumFenceClient.connect(running.cluster, generateIdentity());
    const samples: number[] = [];
    let countersBefore: MetricsSample | undefined;
    try {
      for (let i = 0; i < plan.acquires; i++) {
        const t0 = performance.now();
        const acquired = await client.acquire('bench/latency', { ttlMs: 10_000, autoRenew: false });
        const elapsed = performance.now() - t0;
        if (!acquired.ok) throw new QuorumFenceError('INTERNAL', `benchmark: acquire refused (${acquired.reason})`);
        if (i >= plan.warmupAcquires) samples.push(elapsed);
        await acquired.lease.release();
        if (i === plan.warmupAcquires - 1) countersBefore = await replicaCounters(local);
      }
    } finally {
      await client.close();
    }
    const countersAfter = await replicaCounters(local);
    const acquireReplicaMs = {
      flush:
        (1000 * (countersAfter.flushSum - countersBefore!.flushSum)) /
        (countersAfter.flushCount - countersBefore!.flushCount),
      sign:
        (1000 * (countersAfter.signSum - countersBefore!.signSum)) /
        (countersAfter.signCount - countersBefore!.signCount),
    };

    const pids = { replicas: local.replicas.map((r) => r.pid), resource: resource.pid };
    /** A loop with the CPU of every process per grant during it (warm-up grants, one per client, count too). */
    const measured = async (loopClients: number, resourceOf: (k: number) => string, write: boolean) => {
      let before = cpuNow(pids);
      let after = before;
      const rate = await acquireLoop(running, loopClients, seconds, resourceOf, write, {
        opened: () => (before = cpuNow(pids)),
        done: () => (after = cpuNow(pids)),
      });
      return { rate, cpu: cpuPerGrant(before, after, rate.operations + loopClients) };
    };
    const set = async (write: boolean) => {
      const kind = write ? 'write' : 'plain';
      const what = write ? 'acquire + guarded write + release' : 'acquire + release';
      progress(`system: 1 client, ${what} ...`);
      const one = await measured(1, () => `bench/${kind}/one`, write);
      progress(`system: ${clients} clients on distinct resources, ${what} ...`);
      const distinct = await measured(clients, freshNames(`bench/${kind}/d`), write);
      progress(`system: ${clients} clients on one hot resource, ${what} ...`);
      const hot = await acquireLoop(running, clients, seconds, () => `bench/${kind}/hot`, write);
      return { loops: { one: one.rate, distinct: distinct.rate, hot }, cpuOne: one.cpu, cpu: distinct.cpu };
    };
    const lockRelease = await set(false);
    const fencedWrite = await set(true);
    const breakdown = fencedWrite.cpu;
    const backend = local.cluster.backend.name;
    let profile: SystemFigures['profile'];
    if (options.profile) {
      // Fresh processes for each profiled loop; these ones stop first so they cost nothing meanwhile.
      await resource.stop();
      await local.close();
      resource = undefined;
      local = undefined;
      profile = {
        one: await profileLoop(
          join(dir, 'profile-one'),
          n,
          options.signingWorkers,
          1,
          seconds,
          fencedWrite.cpuOne,
          progress,
        ),
        distinct: await profileLoop(
          join(dir, 'profile-distinct'),
          n,
          options.signingWorkers,
          clients,
          seconds,
          fencedWrite.cpu,
          progress,
        ),
      };
    }
    return {
      replicas: n,
      backend,
      signingWorkers: options.signingWorkers ?? -1,
      acquireMs: summarise(samples),
      acquireReplicaMs,
      loops: { lockRelease: lockRelease.loops, fencedWrite: fencedWrite.loops },
      cpuPerGrantMs: breakdown.replicas + breakdown.resource + breakdown.client,
      cpuBreakdownMs: breakdown,
      cpuOneBreakdownMs: fencedWrite.cpuOne,
      ...(profile ? { profile } : {}),
    };
  } finally {
    await resource?.stop();
    await local?.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
