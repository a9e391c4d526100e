/**
 * The lock a user would pick instead: a 3-member etcd cluster on loopback,
 * driven through its lock API exactly as a fencing user would (lock, read the
 * lock key's create revision as the fencing token, unlock), over etcd's
 * HTTP/JSON gateway with keep-alive connections. (The gateway adds an
 * in-process hop over a native gRPC client; the README says so beside the
 * figures.) etcd keeps its default durability (fsync on every commit), as
 * quorumfence does.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:net';
import { QuorumFenceError } from '../common/errors.js';
import { summarise, type Timing } from './measure.js';
import type { LoopRate } from './system.js';

export interface EtcdCluster {
  readonly clientUrls: readonly string[];
  close(): Promise<void>;
}

/** The etcd binary on PATH, or undefined. */
export function findEtcd(): string | undefined {
  const result = spawnSync('sh', ['-c', 'command -v etcd'], { encoding: 'utf8' });
  const path = result.stdout.trim();
  return result.status === 0 && path ? path : undefined;
}

async function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** The fields of etcd gateway answers the bench reads. */
interface EtcdAnswer {
  error?: unknown;
  ID?: string;
  key?: string;
  kvs?: { create_revision: string }[];
}

async function post(url: string, body: unknown, signal?: AbortSignal): Promise<EtcdAnswer> {
  const response = await fetch(url, {
    method: 'POST',
    body: JSON.stringify(body),
    headers: { 'content-type': 'application/json' },
    signal,
  });
  const json = (await response.json()) as EtcdAnswer;
  if (!response.ok || json.error)
    throw new QuorumFenceError('INTERNAL', `etcd ${url}: ${response.status} ${JSON.stringify(json).slice(0, 200)}`);
  return json;
}

/** Starts a 3-member etcd cluster on 127.0.0.1 and waits until it elects a leader. */
export async function startEtcdCluster(
  options: { members?: number; startTimeoutMs?: number } = {},
): Promise<EtcdCluster> {
  const binary = findEtcd();
  if (!binary) throw new QuorumFenceError('IO_ERROR', 'etcd is not on PATH (Debian: apt-get install etcd-server)');
  const members = options.members ?? 3;
  const dir = mkdtempSync(join(tmpdir(), 'qf-bench-etcd-'));
  const host = '127.0.0.1';
  const ports = await Promise.all(Array.from({ length: members * 2 }, () => freePort(host)));
  const names = Array.from({ length: members }, (_, k) => `etcd-${k + 1}`);
  const peerUrl = (k: number) => `http://${host}:${ports[2 * k + 1]}`;
  const clientUrls = names.map((_, k) => `http://${host}:${ports[2 * k]}`);
  const initialCluster = names.map((name, k) => `${name}=${peerUrl(k)}`).join(',');
  const children: ChildProcess[] = names.map((name, k) =>
    spawn(
      binary,
      [
        '--name',
        name,
        '--data-dir',
        join(dir, name),
        '--listen-client-urls',
        clientUrls[k]!,
        '--advertise-client-urls',
        clientUrls[k]!,
        '--listen-peer-urls',
        peerUrl(k),
        '--initial-advertise-peer-urls',
        peerUrl(k),
        '--initial-cluster',
        initialCluster,
        '--initial-cluster-state',
        'new',
        '--initial-cluster-token',
        'quorumfence-bench',
        '--log-level',
        'error',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    ),
  );
  const close = async () => {
    await Promise.all(
      children.map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            child.once('exit', () => resolve());
            child.kill('SIGTERM');
            setTimeout(() => child.kill('SIGKILL'), 3000).unref();
          }),
      ),
    );
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + (options.startTimeoutMs ?? 20_000);
  for (;;) {
    try {
      // A write goes through only once a leader exists.
      await post(
        `${clientUrls[0]}/v3/kv/put`,
        { key: Buffer.from('ready').toString('base64'), value: 'AQ==' },
        AbortSignal.timeout(1000),
      );
      return { clientUrls, close };
    } catch (error) {
      if (Date.now() > deadline) {
        await close();
        throw new QuorumFenceError('TIMEOUT', `etcd cluster did not become ready: ${(error as Error).message}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

/** One etcd lock user: its own session lease, like etcd's concurrency.Session. */
export class EtcdLockClient {
  readonly #url: string;
  #lease = '';

  constructor(url: string) {
    this.#url = url;
  }

  async open(ttlSeconds = 60): Promise<void> {
    this.#lease = (await post(`${this.#url}/v3/lease/grant`, { TTL: ttlSeconds })).ID as string;
  }

  /** Locks `name` and returns the lock key and its create revision (the fencing token). */
  async acquire(name: string): Promise<{ key: string; fence: bigint }> {
    const locked = await post(`${this.#url}/v3/lock/lock`, {
      name: Buffer.from(name).toString('base64'),
      lease: this.#lease,
    });
    const key = locked.key as string;
    const range = await post(`${this.#url}/v3/kv/range`, { key });
    const created = range.kvs?.[0]?.create_revision;
    if (created === undefined) throw new QuorumFenceError('INTERNAL', `etcd lock key ${key} has no revision`);
    return { key, fence: BigInt(created) };
  }

  async release(key: string): Promise<void> {
    await post(`${this.#url}/v3/lock/unlock`, { key });
  }

  async close(): Promise<void> {
    if (this.#lease) await post(`${this.#url}/v3/lease/revoke`, { ID: this.#lease }).catch(() => undefined);
  }
}

export interface EtcdFigures {
  readonly members: number;
  /** lock + read of the lock key's create revision, uncontended. */
  readonly acquireMs: Timing;
  readonly loops: { readonly one: LoopRate; readonly distinct: LoopRate; readonly hot: LoopRate };
}

async function etcdLoop(
  urls: readonly string[],
  clients: number,
  seconds: number,
  nameOf: (k: number) => string,
): Promise<LoopRate> {
  // Spread clients over the members, as a client library does.
  const lockers = Array.from({ length: clients }, (_, k) => new EtcdLockClient(urls[k % urls.length]!));
  await Promise.all(lockers.map((l) => l.open()));
  try {
    const cycle = async (locker: EtcdLockClient, name: string) => {
      const { key } = await locker.acquire(name);
      await locker.release(key);
    };
    await Promise.all(lockers.map((l, k) => cycle(l, nameOf(k)))); // warm-up
    const cycles: number[] = [];
    const start = performance.now();
    const end = start + seconds * 1000;
    await Promise.all(
      lockers.map(async (locker, k) => {
        while (performance.now() < end) {
          const t0 = performance.now();
          await cycle(locker, nameOf(k));
          cycles.push(performance.now() - t0);
        }
      }),
    );
    const elapsed = (performance.now() - start) / 1000;
    return {
      clients,
      operations: cycles.length,
      seconds: elapsed,
      perSecond: cycles.length / elapsed,
      cycleMs: summarise(cycles),
    };
  } finally {
    await Promise.all(lockers.map((l) => l.close()));
  }
}

/** The same workloads as benchSystem, through etcd's lock API. */
export async function benchEtcd(
  options: { quick?: boolean; clients?: number; progress?: (line: string) => void } = {},
): Promise<EtcdFigures> {
  const quick = options.quick ?? false;
  const clients = options.clients ?? 16;
  const seconds = quick ? 2 : 6;
  const progress = options.progress ?? (() => undefined);
  progress('etcd: starting a 3-member cluster ...');
  const cluster = await startEtcdCluster();
  try {
    progress('etcd: uncontended lock latency ...');
    const locker = new EtcdLockClient(cluster.clientUrls[0]!);
    await locker.open();
    const samples: number[] = [];
    for (let i = 0; i < (quick ? 150 : 600); i++) {
      const t0 = performance.now();
      const { key } = await locker.acquire('bench/latency');
      if (i >= 30) samples.push(performance.now() - t0);
      await locker.release(key);
    }
    await locker.close();
    progress('etcd: 1 client loop ...');
    const one = await etcdLoop(cluster.clientUrls, 1, seconds, () => 'bench/one');
    progress(`etcd: ${clients} clients on distinct locks ...`);
    const distinct = await etcdLoop(cluster.clientUrls, clients, seconds, (k) => `bench/distinct/${k}`);
    progress(`etcd: ${clients} clients on one hot lock ...`);
    const hot = await etcdLoop(cluster.clientUrls, clients, seconds, () => 'bench/hot');
    return { members: cluster.clientUrls.length, acquireMs: summarise(samples), loops: { one, distinct, hot } };
  } finally {
    await cluster.close();
  }
}
