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
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import type { LocalCluster } from '../cluster/launcher.js';
import type { LocalProcess } from '../cluster/local-process.js';
import { QuorumFenceClient } from '../client/client.js';
import { generateIdentity } from '../client/identity.js';
import { cpuNow, cpuPerGrant, replicaCounters, type CpuPerGrant } from './counters.js';
import type { MetricsSample } from '../console/replica-health.js';
import { LOOPBACK, type Links } from './network.js';
import { freshNames, LOOP_PLAN, summarise, type BenchSize, type LoopKinds, type Timing } from './measure.js';
import { acquireLoop, reach } from './system-loop.js';
import { startSystem } from './system-processes.js';
import { profileLoop, type LoopProfile } from './system-profile.js';

export type { LoopRate } from './measure.js';
// Part of SystemFigures: its readers take it from here, with the figures.
export type { LoopProfile } from './system-profile.js';

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
