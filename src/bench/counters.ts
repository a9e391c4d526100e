/**
 * What the system bench reads from the processes it runs: CPU time from
 * /proc (the children) and process.cpuUsage() (this process), and counters
 * from the replicas' and the reference resource's /metrics.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type { LocalCluster } from '../cluster/launcher.js';
import { fetchBounded, parseMetrics, type MetricsSample } from '../console/replica-health.js';

const CLOCK_TICKS_PER_SECOND = (() => {
  const result = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
  const ticks = Number(result.stdout?.trim());
  return Number.isFinite(ticks) && ticks > 0 ? ticks : 100;
})();

/** User + system CPU ms of a process, all its threads (0 when it cannot be read: not Linux, or gone). */
export function processCpuMs(pid: number): number {
  return statCpuMs(`/proc/${pid}/stat`);
}

/** The same for a process's main thread alone (its event loop: the thread whose id is the process's). */
export function mainThreadCpuMs(pid: number): number {
  return statCpuMs(`/proc/${pid}/task/${pid}/stat`);
}

function statCpuMs(path: string): number {
  try {
    const stat = readFileSync(path, 'utf8');
    // Fields after the command name (which may contain spaces) start after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS_PER_SECOND;
  } catch {
    return 0;
  }
}

/** The machine's jiffies from /proc/stat: all, idle (with iowait) and stolen (Linux only). */
export function machineCpuTimes(): { total: number; idle: number; steal: number } | undefined {
  try {
    const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    return {
      total: fields.reduce((a, b) => a + b, 0),
      idle: (fields[3] ?? 0) + (fields[4] ?? 0),
      steal: fields[7] ?? 0,
    };
  } catch {
    return undefined;
  }
}

/** User + system CPU ms of this process. */
export function ownCpuMs(): number {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1000;
}

export interface CpuPerGrant {
  readonly replicas: number;
  /** Of `replicas`, their main threads (the rest: the signing thread, V8's GC helpers, libuv's pool with LMDB's commits). */
  readonly replicasMainThread: number;
  readonly resource: number;
  /** Of `resource`, its main thread (the rest: V8's GC helpers, libuv's pool, blst's own pool for batched pairings). */
  readonly resourceMainThread: number;
  readonly client: number;
  /** Of `client`, this process's main thread (0 where /proc cannot be read). */
  readonly clientMainThread: number;
}

export function cpuPerGrant(before: CpuPerGrant, after: CpuPerGrant, grants: number): CpuPerGrant {
  return {
    replicas: (after.replicas - before.replicas) / grants,
    replicasMainThread: (after.replicasMainThread - before.replicasMainThread) / grants,
    resource: (after.resource - before.resource) / grants,
    resourceMainThread: (after.resourceMainThread - before.resourceMainThread) / grants,
    client: (after.client - before.client) / grants,
    clientMainThread: (after.clientMainThread - before.clientMainThread) / grants,
  };
}

export function cpuNow(pids: { replicas: readonly number[]; resource: number }): CpuPerGrant {
  return {
    replicas: pids.replicas.reduce((sum, pid) => sum + processCpuMs(pid), 0),
    replicasMainThread: pids.replicas.reduce((sum, pid) => sum + mainThreadCpuMs(pid), 0),
    resource: processCpuMs(pids.resource),
    resourceMainThread: mainThreadCpuMs(pids.resource),
    client: ownCpuMs(),
    clientMainThread: mainThreadCpuMs(process.pid),
  };
}

/** Every replica's /metrics, read by the console's parser and summed: partials signed, record flushes, signing. */
export async function replicaCounters(local: LocalCluster): Promise<MetricsSample> {
  const samples = await Promise.all(
    local.replicas.map(async (r) =>
      parseMetrics(await fetchBounded(`${r.url.replace(/^ws/, 'http')}/metrics`, 10_000), 0),
    ),
  );
  return samples.reduce((sum, one) => ({
    ...sum,
    grantsSigned: sum.grantsSigned + one.grantsSigned,
    flushSum: sum.flushSum + one.flushSum,
    flushCount: sum.flushCount + one.flushCount,
    signSum: sum.signSum + one.signSum,
    signCount: sum.signCount + one.signCount,
  }));
}

/** The reference resource's batches of pairing checks and the checks they answered, from its /metrics. */
export async function guardBatches(resourceUrl: string): Promise<{ batches: number; checks: number }> {
  const text = await fetchBounded(`${resourceUrl}/metrics`, 10_000);
  const value = (name: string) => Number(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  return {
    batches: value('quorumfence_guard_verify_batches_total'),
    checks: value('quorumfence_guard_verify_batched_checks_total'),
  };
}
