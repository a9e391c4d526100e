/**
 * quorumfence's side of a gray run: its processes (shared by the faults of a
 * run, the gray replica restarted alone when a fault starts it another way),
 * and each loop run healthy and then under the fault, with what the replicas'
 * /metrics show the fault did. Apart from gray.ts, which runs both sides, and
 * from gray-etcd.ts, etcd's side: each side starts and reads its own
 * processes its own way.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { leaderOf } from '../client/signer-choice.js';
import type { LocalReplica } from '../cluster/launcher.js';
import { fetchBounded, parseMetrics, type MetricsSample } from '../console/replica-health.js';
import { byzantineState } from '../testing/byzantine/control.js';
import { quorumfenceFault, type GrayFault, type GrayFaultKind, type QuorumfenceFault } from './gray-faults.js';
import {
  GRAY_CLIENTS,
  GRAY_LOOPS,
  loopTitle,
  SETTLE_MS,
  type GrayLoopName,
  type GrayOptions,
  type Paired,
  type QuorumfenceGray,
  type QuorumfenceGrayLoop,
} from './gray-figures.js';
import { freshNames, LOOP_PLAN, type LoopCondition } from './measure.js';
import { networkCpuMs, type DelayedNetwork } from './network.js';
import { machineCpuTimes, ownCpuMs, processCpuMs } from './counters.js';
import { buildSlowFlush, type SlowFlush } from './slow-flush.js';
import { acquireLoop, reach, type Running } from './system-loop.js';
import { restartReplica, startSystem, type OddReplica } from './system-processes.js';

const per = (count: number, cycles: number) => (cycles > 0 ? count / cycles : 0);

/** Labelled counters (by type, by reason) per cycle between two readings, summed over replicas read both times. */
function countsPerCycle(
  before: readonly (MetricsSample | undefined)[],
  after: readonly (MetricsSample | undefined)[],
  read: (m: MetricsSample) => Readonly<Record<string, number>>,
  cycles: number,
): Record<string, number> {
  const sums: Record<string, number> = {};
  before.forEach((b, k) => {
    const a = after[k];
    if (!b || !a) return;
    for (const [label, value] of Object.entries(read(a)))
      sums[label] = (sums[label] ?? 0) + value - (read(b)[label] ?? 0);
  });
  return Object.fromEntries(Object.entries(sums).map(([label, sum]) => [label, per(sum, cycles)]));
}

/** CPU ms used so far: each replica's process (0 where /proc could not be read), this process, the proxies'. */
interface CpuReading {
  readonly machine: ReturnType<typeof machineCpuTimes>;
  readonly replicas: readonly number[];
  readonly clients: number;
  readonly proxies: number;
}

/** The share of the machine's CPU time that was busy between two readings (null where /proc/stat is not). */
function busyShare(before: CpuReading['machine'], after: CpuReading['machine']): number | null {
  if (!before || !after || after.total <= before.total) return null;
  return 1 - (after.idle - before.idle) / (after.total - before.total);
}

function cpuPerCycle(before: CpuReading, after: CpuReading, cycles: number): QuorumfenceGrayLoop['cpuMsPerCycle'] {
  return {
    replicas: after.replicas.map((ms, k) =>
      ms > 0 && before.replicas[k]! > 0 ? per(ms - before.replicas[k]!, cycles) : null,
    ),
    clients: per(after.clients - before.clients, cycles),
    proxies: per(after.proxies - before.proxies, cycles),
    machineBusy: busyShare(before.machine, after.machine),
  };
}

/**
 * The first name `base#k` whose resource leader (the protocol's, docs/protocol.md: the replica contended
 * acquires ask first and whose line orders a hot resource) is replica `index`: the 1-client and hot loops run
 * on such a resource, the worst place for a fault, where a client blind to it waits on it first.
 */
export function ledBy(base: string, index: number, n: number): string {
  for (let k = 0; k < 64 * n; k++) if (leaderOf(`${base}#${k}`, n) === index) return `${base}#${k}`;
  throw new QuorumFenceError('INTERNAL', `no name ${base}#k led by replica ${index} of ${n}`);
}

/** A replica's /metrics, or undefined when it does not answer in time (hung). */
async function replicaMetrics(replica: LocalReplica, timeoutMs = 2_000): Promise<MetricsSample | undefined> {
  try {
    return parseMetrics(await fetchBounded(`${replica.url.replace(/^ws/, 'http')}/metrics`, timeoutMs), 0);
  } catch {
    return undefined;
  }
}

/** One quorumfence loop, healthy (`fault` undefined) or under the fault. */
async function quorumfenceLoop(
  running: Running,
  gray: LocalReplica,
  network: DelayedNetwork,
  kind: GrayFaultKind,
  fault: QuorumfenceFault | undefined,
  loop: GrayLoopName,
  prefix: string,
  seconds: number,
  settleMs: number,
  manyClients: number,
): Promise<QuorumfenceGrayLoop> {
  const replicas = running.local.replicas;
  const hungNow = fault !== undefined && kind === 'hung';
  const readAll = () =>
    Promise.all(replicas.map((r) => (hungNow && r === gray ? Promise.resolve(undefined) : replicaMetrics(r))));
  const readSlowed = async () =>
    kind === 'byzantine-slow' ? ((await byzantineState(gray.url)).acts.slow ?? 0) : undefined;
  const readCpu = (): CpuReading => ({
    machine: machineCpuTimes(),
    replicas: replicas.map((r) => processCpuMs(r.pid)),
    clients: ownCpuMs(),
    proxies: networkCpuMs(network),
  });
  // Read when no cycle runs: after the warm-up, before the fault begins; after the last cycle, before it ends.
  let atBegin: [(MetricsSample | undefined)[], number | undefined, CpuReading] | undefined;
  let atEnd: [(MetricsSample | undefined)[], number | undefined, CpuReading] | undefined;
  let stopped: boolean | undefined;
  const condition: LoopCondition = {
    settleMs,
    begin: async () => {
      atBegin = [...(await Promise.all([readAll(), readSlowed()])), readCpu()];
      if (fault) ({ stopped } = await fault.begin(gray, network));
    },
    end: async () => {
      try {
        if (atBegin) atEnd = [...(await Promise.all([readAll(), readSlowed()])), readCpu()];
      } finally {
        await fault?.end(gray, network);
      }
    },
  };
  const clients = loop === 'one' ? 1 : manyClients;
  // The same resource healthy and faulted for the 1-client and hot loops (the runs differ by the fault
  // alone); fresh names of their own for each distinct run.
  const resourceOf =
    loop === 'distinct'
      ? freshNames(`${prefix}/${fault ? 'faulted' : 'healthy'}/d`)
      : (
          (name: string) => () =>
            name
        )(ledBy(`${prefix}/${loop}`, gray.index, replicas.length));
  const rate = await acquireLoop(running, clients, seconds, resourceOf, false, undefined, condition);
  const [before, slowedBefore, cpuBefore] = atBegin!;
  const [after, slowedAfter, cpuAfter] = atEnd!;
  // Every cycle since the fault began: those of the settling time too, as the readings span them.
  const cycles = rate.operations + (rate.settlingOperations ?? 0);
  const grayIndex = replicas.indexOf(gray);
  const delta = (k: number, read: (m: MetricsSample) => number) =>
    before[k] && after[k] ? read(after[k]) - read(before[k]) : undefined;
  const all = replicas.reduce((sum, _, k) => sum + (delta(k, (m) => m.grantsSigned) ?? 0), 0);
  const graySigned = delta(grayIndex, (m) => m.grantsSigned);
  const flushes = delta(grayIndex, (m) => m.flushCount);
  const flushSeconds = delta(grayIndex, (m) => m.flushSum);
  return {
    rate,
    partialsPerCycle: {
      gray: graySigned === undefined ? null : per(graySigned, cycles),
      all: per(all, cycles),
    },
    cpuMsPerCycle: cpuPerCycle(cpuBefore, cpuAfter, cycles),
    requestsPerCycle: countsPerCycle(before, after, (m) => m.requests, cycles),
    refusalsPerCycle: countsPerCycle(before, after, (m) => m.refusals, cycles),
    ...(kind === 'slow-flush' && flushes ? { grayFlushMs: (1000 * flushSeconds!) / flushes } : {}),
    ...(slowedBefore !== undefined && slowedAfter !== undefined ? { slowedAnswers: slowedAfter - slowedBefore } : {}),
    ...(stopped === undefined ? {} : { stopped }),
  };
}

/**
 * quorumfence's processes, shared by the faults of one run: started at the first fault, the gray replica
 * alone restarted when a fault starts it another way (the Byzantine replica process, the preloaded library)
 * or back as the others are; everything started afresh after a fault that failed. Every fault still runs each
 * loop healthy and then faulted on the same processes; sharing them spares a start of the whole system per
 * fault (the largest part of a smoke run).
 */
export class QuorumfenceProcesses {
  private readonly dir = mkdtempSync(join(tmpdir(), 'qf-bench-gray-'));
  private system: Awaited<ReturnType<typeof startSystem>> | undefined;
  /** The running system's folder (keys, stores): a fresh one per start, since a start deals new keys. */
  private systemDir = '';
  private starts = 0;
  /** How the gray replica runs now (JSON of its OddReplica, or '' as the others). */
  private grayStartedAs = '';
  private slowFlush: SlowFlush | undefined;

  constructor(private readonly options: GrayOptions) {}

  /** The slow-flush library, built once per run. */
  flushLibrary(): SlowFlush {
    this.slowFlush ??= buildSlowFlush(this.dir);
    return this.slowFlush;
  }

  /** The system with the gray replica started as `odd` says (as the others without it), and the clients' routes. */
  async running(odd: OddReplica | undefined, network: DelayedNetwork, progress: (line: string) => void) {
    const index = this.options.grayReplica;
    const startedAs = odd ? JSON.stringify(odd) : '';
    if (!this.system) {
      progress(`starting ${this.options.replicas} replicas ...`);
      this.systemDir = join(this.dir, `system-${++this.starts}`);
      this.system = await startSystem(this.systemDir, this.options.replicas, undefined, undefined, odd);
      this.grayStartedAs = startedAs;
    } else if (startedAs !== this.grayStartedAs) {
      progress(`restarting replica ${index} ...`);
      const local = await restartReplica(this.systemDir, this.system.local, undefined, odd ?? { index });
      this.system = { ...this.system, local };
      this.grayStartedAs = startedAs;
    }
    return {
      running: await reach(this.system.local, this.system.resource, network),
      gray: this.system.local.replica(index),
    };
  }

  /** Stops every process (the next fault starts afresh). */
  async stop(): Promise<void> {
    const system = this.system;
    this.system = undefined;
    this.grayStartedAs = '';
    await system?.resource.stop();
    await system?.local.close();
  }

  async close(): Promise<void> {
    try {
      await this.stop();
    } finally {
      rmSync(this.dir, { recursive: true, force: true });
    }
  }
}

export async function grayQuorumfence(
  fault: GrayFault,
  options: GrayOptions,
  network: DelayedNetwork,
  processes: QuorumfenceProcesses,
  progress: (line: string) => void,
): Promise<QuorumfenceGray> {
  const index = options.grayReplica;
  const seconds = LOOP_PLAN[options.size].seconds;
  const settleMs = SETTLE_MS[options.size];
  const tag = (line: string) => progress(`quorumfence, ${fault.name} on replica ${index}: ${line}`);
  try {
    const switches = quorumfenceFault(fault, index, fault.kind === 'slow-flush' ? processes.flushLibrary() : undefined);
    const { running, gray } = await processes.running(switches.odd, network, tag);
    const loops = {} as Record<GrayLoopName, Paired<QuorumfenceGrayLoop>>;
    for (const loop of GRAY_LOOPS) {
      const run = async (state: 'healthy' | 'faulted') => {
        tag(`${loopTitle(loop, GRAY_CLIENTS[options.size])}, ${state} ...`);
        return quorumfenceLoop(
          running,
          gray,
          network,
          fault.kind,
          state === 'faulted' ? switches : undefined,
          loop,
          `bench/gray/${fault.kind}`,
          seconds,
          settleMs,
          GRAY_CLIENTS[options.size],
        );
      };
      const healthy = await run('healthy');
      loops[loop] = { healthy, faulted: await run('faulted') };
    }
    return { replicas: options.replicas, grayReplica: index, loops };
  } catch (error) {
    // A fault that failed may leave a process stopped or slowed: the next one starts on fresh processes.
    await processes.stop();
    throw error;
  }
}
