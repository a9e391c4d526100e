/**
 * The bench's own start of the whole system: a dealt key, N replica processes
 * and the reference guarded resource under one folder (startSystem), with one
 * replica started its own way when bench --gray asks (the Byzantine replica
 * process, a preloaded library), and restarted alone between faults
 * (restartReplica). Apart from system.ts because it is process plumbing that
 * the system bench, its profiled loops and the gray bench all share, while
 * the figures each takes are their own.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { clusterToJson, withEndpoints } from '../cluster/description.js';
import {
  dealLocalCluster,
  startLocalCluster,
  startLocalResource,
  type LocalCluster,
  type LocalReplica,
} from '../cluster/launcher.js';
import type { LocalProcess } from '../cluster/local-process.js';

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
