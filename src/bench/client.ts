/**
 * Client benchmark (never a test): the SDK against 4 real local replica
 * processes with the default backend.
 *
 *   uncontended     one client, acquire then release, one at a time; the
 *                   acquire's latency, for a resource acquired before (one
 *                   round: the client starts from its last granted epoch) and
 *                   for a resource never seen (a status round, then acquire)
 *   distinct        16 clients in parallel, each on its own resource, looping
 *                   acquire + release: cycles per second
 *   hot             16 clients on one resource, looping acquire (waiting) +
 *                   release: handoffs (successful acquires) per second
 *
 * Clients and replicas share the machine, so the figures include the
 * replicas' durable writes (fsync per grant and per release) and signing.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../cluster/launcher.js';
import { QuorumFenceClient } from '../client/client.js';
import { generateIdentity } from '../client/identity.js';
import { QuorumFenceError } from '../common/errors.js';
import { summarise, type Timing } from './measure.js';

export interface ClientBenchOptions {
  /** Shorter runs (about 10 s in all). */
  readonly quick?: boolean;
  /** Clients for the parallel runs (default 16). */
  readonly clients?: number;
  /** Seconds per parallel run (default 5, quick 2). */
  readonly seconds?: number;
  /** Extra flags for every replica (e.g. ["--signing-workers", "0"]). */
  readonly replicaArgs?: readonly string[];
  /** Called with a line of progress. */
  readonly progress?: (line: string) => void;
}

export interface Rate {
  readonly clients: number;
  readonly operations: number;
  readonly seconds: number;
  readonly perSecond: number;
  /** Latency of one operation (acquire + release, or for `hot` the acquire including its wait), ms. */
  readonly latencyMs: Timing;
}

export interface ClientBenchFigures {
  readonly replicas: number;
  readonly backend: string;
  readonly uncontended: {
    /** Acquire of a resource this client held before: one round. */
    readonly repeatAcquireMs: Timing;
    /** Acquire of a resource never seen: a status round, then the acquire round. */
    readonly firstAcquireMs: Timing;
    /** Release (t replicas confirm, each after a durable write). */
    readonly releaseMs: Timing;
  };
  readonly distinct: Rate;
  readonly hot: Rate;
}

async function withCluster<T>(replicaArgs: readonly string[], fn: (local: LocalCluster) => Promise<T>): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), 'qf-bench-client-'));
  let local: LocalCluster | undefined;
  try {
    dealLocalCluster(join(dir, 'keys'), 4);
    local = await startLocalCluster({ dir: join(dir, 'keys'), dataRoot: join(dir, 'data'), extraArgs: replicaArgs });
    return await fn(local);
  } finally {
    await local?.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

function fail(what: string, reason: string, message: string): never {
  throw new QuorumFenceError('INTERNAL', `benchmark ${what}: acquire refused (${reason}): ${message}`);
}

async function uncontended(local: LocalCluster, iterations: number): Promise<ClientBenchFigures['uncontended']> {
  const client = await QuorumFenceClient.connect(local.cluster, generateIdentity());
  try {
    const repeat: number[] = [];
    const first: number[] = [];
    const release: number[] = [];
    // Warm-up: JIT, first handshakes, the replicas' first writes.
    for (let i = 0; i < 20; i++) {
      const r = await client.acquire('bench/warm', { ttlMs: 10_000 });
      if (!r.ok) fail('warm-up', r.reason, r.message);
      await r.lease.release();
    }
    for (let i = 0; i < iterations; i++) {
      let t0 = performance.now();
      const r = await client.acquire('bench/repeat', { ttlMs: 10_000 });
      if (!r.ok) fail('uncontended', r.reason, r.message);
      if (i > 0) repeat.push(performance.now() - t0);
      t0 = performance.now();
      await r.lease.release();
      release.push(performance.now() - t0);

      t0 = performance.now();
      const fresh = await client.acquire(`bench/fresh/${i}`, { ttlMs: 10_000 });
      if (!fresh.ok) fail('uncontended', fresh.reason, fresh.message);
      first.push(performance.now() - t0);
      await fresh.lease.release();
    }
    return { repeatAcquireMs: summarise(repeat), firstAcquireMs: summarise(first), releaseMs: summarise(release) };
  } finally {
    await client.close();
  }
}

async function parallel(local: LocalCluster, clients: number, seconds: number, hot: boolean): Promise<Rate> {
  const connected = await Promise.all(
    Array.from({ length: clients }, () =>
      // Default options: waiters on the hot resource hear of each release from the replicas.
      QuorumFenceClient.connect(local.cluster, generateIdentity()),
    ),
  );
  try {
    // Warm-up so that the run measures steady state, not the first handshakes and JIT.
    await Promise.all(
      connected.map(async (client, k) => {
        const r = await client.acquire(hot ? 'bench/hot' : `bench/distinct/${k}`, { ttlMs: 10_000, waitMs: 10_000 });
        if (r.ok) await r.lease.release();
      }),
    );
    const latencies: number[] = [];
    let operations = 0;
    const start = performance.now();
    const end = start + seconds * 1000;
    await Promise.all(
      connected.map(async (client, k) => {
        const resource = hot ? 'bench/hot' : `bench/distinct/${k}`;
        while (performance.now() < end) {
          const t0 = performance.now();
          const r = await client.acquire(resource, {
            ttlMs: 10_000,
            waitMs: Math.max(1, Math.ceil(end - performance.now())),
          });
          if (!r.ok) {
            if (r.reason === 'busy' || r.reason === 'timeout') continue;
            fail(hot ? 'hot' : 'distinct', r.reason, r.message);
          }
          if (hot) latencies.push(performance.now() - t0);
          await r.lease.release();
          if (!hot) latencies.push(performance.now() - t0);
          operations++;
        }
      }),
    );
    const elapsed = (performance.now() - start) / 1000;
    return { clients, operations, seconds: elapsed, perSecond: operations / elapsed, latencyMs: summarise(latencies) };
  } finally {
    await Promise.all(connected.map((c) => c.close()));
  }
}

/** Runs every part on fresh clusters and returns the figures. */
export async function benchClient(options: ClientBenchOptions = {}): Promise<ClientBenchFigures> {
  const quick = options.quick ?? false;
  const clients = options.clients ?? 16;
  const seconds = options.seconds ?? (quick ? 2 : 5);
  const progress = options.progress ?? (() => undefined);
  const replicaArgs = options.replicaArgs ?? [];
  return withCluster(replicaArgs, async (local) => {
    progress('client: uncontended acquire ...');
    const single = await uncontended(local, quick ? 100 : 400);
    progress(`client: ${clients} clients, distinct resources ...`);
    const distinct = await parallel(local, clients, seconds, false);
    progress(`client: ${clients} clients, one hot resource ...`);
    const hot = await parallel(local, clients, seconds, true);
    return { replicas: local.cluster.n, backend: local.cluster.backend.name, uncontended: single, distinct, hot };
  });
}

/** The figures as a small table. */
export function formatClientFigures(figures: ClientBenchFigures): string {
  const t = (x: Timing) => `p50 ${x.median.toFixed(2)} ms, p99 ${x.p99.toFixed(2)} ms`;
  const r = (x: Rate) =>
    `${x.perSecond.toFixed(0)}/s (${x.operations} in ${x.seconds.toFixed(1)} s, ${x.clients} clients; ${t(x.latencyMs)})`;
  return [
    `client (${figures.replicas} replicas, ${figures.backend})`,
    `  acquire, resource held before      ${t(figures.uncontended.repeatAcquireMs)}`,
    `  acquire, resource never seen       ${t(figures.uncontended.firstAcquireMs)}`,
    `  release                            ${t(figures.uncontended.releaseMs)}`,
    `  acquire+release, distinct resources ${r(figures.distinct)}`,
    `  handoffs, one hot resource          ${r(figures.hot)}`,
  ].join('\n');
}
