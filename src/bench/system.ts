/**
 * The whole system on this machine: N local replica processes, the reference
 * guarded resource, and clients in this process, as a user would run them.
 *
 *   latency      1 client, uncontended acquire of a resource it held before (p50, p99)
 *   loops        closed loops of acquire + one write through the guard + release:
 *                1 client, 16 clients on distinct resources, 16 clients on one hot resource
 *   cpu          CPU time of every process (replicas, resource, this client process)
 *                per grant during the 16-client distinct loop, against the crypto floor
 *
 * CPU is read from /proc for the children and process.cpuUsage() for this
 * process, so it includes everything a grant costs: sockets, JSON, fsync, crypto.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { clusterToJson } from '../cluster/description.js';
import { dealLocalCluster, startLocalCluster, startLocalResource, type LocalCluster } from '../cluster/launcher.js';
import type { LocalProcess } from '../cluster/local-process.js';
import { QuorumFenceClient } from '../client/client.js';
import { generateIdentity } from '../client/identity.js';
import { closedLoop, summarise, type LoopKinds, type LoopRate, type LoopSet, type Timing } from './measure.js';

export type { LoopRate } from './measure.js';

export interface SystemFigures {
  readonly replicas: number;
  readonly backend: string;
  readonly signingWorkers: number;
  /** Uncontended acquire, 1 client, resource held before. */
  readonly acquireMs: Timing;
  readonly loops: LoopKinds;
  /** CPU ms of all processes per grant during the distinct loop with a guarded write. */
  readonly cpuPerGrantMs: number;
  /** CPU ms per grant by process kind, same loop. */
  readonly cpuBreakdownMs: { readonly replicas: number; readonly resource: number; readonly client: number };
}

export interface SystemBenchOptions {
  readonly replicas?: number;
  readonly quick?: boolean;
  /** Clients in the parallel loops (default 16). */
  readonly clients?: number;
  /** Signing threads per replica (default: the replica's own default). */
  readonly signingWorkers?: number;
  readonly progress?: (line: string) => void;
}

const CLOCK_TICKS_PER_SECOND = (() => {
  const result = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
  const ticks = Number(result.stdout?.trim());
  return Number.isFinite(ticks) && ticks > 0 ? ticks : 100;
})();

/** User + system CPU ms of a process (0 when it cannot be read: not Linux, or gone). */
export function processCpuMs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may contain spaces) start after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS_PER_SECOND;
  } catch {
    return 0;
  }
}

function ownCpuMs(): number {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1000;
}

interface CpuPerGrant {
  readonly replicas: number;
  readonly resource: number;
  readonly client: number;
}

function cpuNow(pids: { replicas: readonly number[]; resource: number }): CpuPerGrant {
  return {
    replicas: pids.replicas.reduce((sum, pid) => sum + processCpuMs(pid), 0),
    resource: processCpuMs(pids.resource),
    client: ownCpuMs(),
  };
}

async function guardedWrite(resourceUrl: string, resource: string, token: string, body: string): Promise<void> {
  const response = await fetch(`${resourceUrl}/kv/${encodeURIComponent(resource)}/value`, {
    method: 'PUT',
    headers: { authorization: `QuorumFence ${token}` },
    body,
  });
  await response.arrayBuffer();
  if (response.status !== 200)
    throw new QuorumFenceError('INTERNAL', `benchmark: the guard refused a write with ${response.status}`);
}

async function loop(
  local: LocalCluster,
  resourceUrl: string,
  clients: number,
  seconds: number,
  resourceOf: (k: number) => string,
  write: boolean,
): Promise<LoopRate> {
  // Default client options throughout: waiters on a hot resource hear of each release from the replicas.
  const connected = await Promise.all(
    Array.from({ length: clients }, () => QuorumFenceClient.connect(local.cluster, generateIdentity())),
  );
  try {
    return await closedLoop(clients, seconds, async (k, remainingMs) => {
      const resource = resourceOf(k);
      const t0 = performance.now();
      const acquired = await connected[k]!.acquire(resource, { ttlMs: 10_000, waitMs: remainingMs, autoRenew: false });
      const acquireMs = performance.now() - t0;
      if (!acquired.ok) {
        if (acquired.reason === 'busy' || acquired.reason === 'timeout') return undefined;
        throw new QuorumFenceError('INTERNAL', `benchmark: acquire refused (${acquired.reason}): ${acquired.message}`);
      }
      if (write) await guardedWrite(resourceUrl, resource, acquired.lease.tokenText, 'x');
      await acquired.lease.release();
      return acquireMs;
    });
  } finally {
    await Promise.all(connected.map((c) => c.close()));
  }
}

export async function benchSystem(options: SystemBenchOptions = {}): Promise<SystemFigures> {
  const n = options.replicas ?? 4;
  const quick = options.quick ?? false;
  const clients = options.clients ?? 16;
  const seconds = quick ? 2 : 6;
  const progress = options.progress ?? (() => undefined);
  const dir = mkdtempSync(join(tmpdir(), 'qf-bench-system-'));
  let local: LocalCluster | undefined;
  let resource: LocalProcess | undefined;
  try {
    dealLocalCluster(join(dir, 'keys'), n);
    progress(`system: starting ${n} replicas and the resource ...`);
    local = await startLocalCluster({
      dir: join(dir, 'keys'),
      dataRoot: join(dir, 'data'),
      extraArgs: options.signingWorkers === undefined ? [] : ['--signing-workers', String(options.signingWorkers)],
    });
    const clusterFile = join(dir, 'cluster.json');
    writeFileSync(clusterFile, JSON.stringify(clusterToJson(local.cluster)));
    resource = await startLocalResource({ clusterFile, dataDir: join(dir, 'data', 'resource') });

    progress('system: uncontended acquire latency ...');
    const client = await QuorumFenceClient.connect(local.cluster, generateIdentity());
    const samples: number[] = [];
    try {
      for (let i = 0; i < (quick ? 150 : 600); i++) {
        const t0 = performance.now();
        const acquired = await client.acquire('bench/latency', { ttlMs: 10_000, autoRenew: false });
        const elapsed = performance.now() - t0;
        if (!acquired.ok) throw new QuorumFenceError('INTERNAL', `benchmark: acquire refused (${acquired.reason})`);
        if (i >= 30) samples.push(elapsed); // the first ones warm the JIT and connections
        await acquired.lease.release();
      }
    } finally {
      await client.close();
    }

    const set = async (write: boolean): Promise<{ loops: LoopSet; cpu: CpuPerGrant }> => {
      const kind = write ? 'write' : 'plain';
      const what = write ? 'acquire + guarded write + release' : 'acquire + release';
      progress(`system: 1 client, ${what} ...`);
      const one = await loop(local!, resource!.url, 1, seconds, () => `bench/${kind}/one`, write);
      progress(`system: ${clients} clients on distinct resources, ${what} ...`);
      const pids = { replicas: local!.replicas.map((r) => r.pid), resource: resource!.pid };
      const before = cpuNow(pids);
      const distinct = await loop(local!, resource!.url, clients, seconds, (k) => `bench/${kind}/d/${k}`, write);
      const after = cpuNow(pids);
      // The loop's warm-up grants count too: one per client.
      const grants = distinct.operations + clients;
      const cpu = {
        replicas: (after.replicas - before.replicas) / grants,
        resource: (after.resource - before.resource) / grants,
        client: (after.client - before.client) / grants,
      };
      progress(`system: ${clients} clients on one hot resource, ${what} ...`);
      const hot = await loop(local!, resource!.url, clients, seconds, () => `bench/${kind}/hot`, write);
      return { loops: { one, distinct, hot }, cpu };
    };
    const lockRelease = await set(false);
    const fencedWrite = await set(true);
    const breakdown = fencedWrite.cpu;
    return {
      replicas: n,
      backend: local.cluster.backend.name,
      signingWorkers: options.signingWorkers ?? -1,
      acquireMs: summarise(samples),
      loops: { lockRelease: lockRelease.loops, fencedWrite: fencedWrite.loops },
      cpuPerGrantMs: breakdown.replicas + breakdown.resource + breakdown.client,
      cpuBreakdownMs: breakdown,
    };
  } finally {
    await resource?.stop();
    await local?.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
