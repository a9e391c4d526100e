/**
 * Replica benchmark (never a test): one real replica process with the
 * default (native) backend, driven over WebSocket by a pipelining load
 * generator in this process.
 *
 *   grants        signed, durable grants per second for distinct resources,
 *                 for each signing-thread count (0 = main thread); every
 *                 grant is an LMDB record flushed to disk before its partial
 *                 leaves (group commit shares the flushes)
 *   signing       the worker-thread signer alone (this process): partial
 *                 signatures per second with 1 and 2 threads, and the ratio
 *   store         the signing record alone (this process): durable
 *                 check-and-record operations per second, distinct resources
 *   together      three signing records in three processes (store-child.ts),
 *                 one write each at the same moment: the disk's share of an
 *                 acquire that needs t = 3 flushes
 *   handshakes    hundreds of connections authenticating at the same moment
 *                 (handshakes.ts): the replica's CPU per connection, what a
 *                 reconnect storm after a restart costs it
 *
 * The load generator shares the machine with the replica, so `grants` is a
 * floor for what a replica on its own cores would do.
 *
 * Run: npx tsc -p tsconfig.json && node dist/src/bench/replica.js [--quick | --smoke]
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { dealLocalCluster, startLocalCluster } from '../cluster/launcher.js';
import { loadClusterFile } from '../cluster/description.js';
import { QuorumFenceError } from '../common/errors.js';
import { decodeServerMessage, encodeMessage } from '../protocol/codec.js';
import { grantMessage } from '../token/grant.js';
import { startWorkerSigner } from '../replica/signer.js';
import { machineCpuTimes } from './counters.js';
import { summarise, type BenchSize, type Timing } from './measure.js';
import { connectLoad, measureHandshakes, type HandshakeFigures } from './handshakes.js';
import { measureStore, measureStoresTogether } from './store.js';

export interface ReplicaBenchOptions {
  /** How long to run (default full). */
  readonly size?: BenchSize;
  /** Signing-thread counts to measure end to end (default 0, 1, 2). */
  readonly workerCounts?: readonly number[];
  /** Connections from the load generator (default 8). */
  readonly connections?: number;
  /** Acquires kept in flight per connection (default 64). */
  readonly depth?: number;
  /** Measured seconds per run, after a warm-up second (default 5, quick 2, smoke a quarter, after a quarter). */
  readonly seconds?: number;
  /**
   * Runs per configuration (default 3, quick and smoke 1). Figures are reported per
   * run, with the median and the best: on a shared machine other processes
   * steal cores, and the best run is the one closest to an idle machine.
   */
  readonly repeats?: number;
  readonly progress?: (line: string) => void;
}

export interface GrantRate {
  readonly signingWorkers: number;
  readonly grants: number;
  readonly seconds: number;
  readonly perSecond: number;
  /** Acquire round trip under this load. */
  readonly latencyMs: Timing;
}

export interface GrantFigures {
  readonly signingWorkers: number;
  readonly runs: GrantRate[];
  readonly medianPerSecond: number;
  readonly bestPerSecond: number;
}

export interface SigningFigures {
  /** Signatures per second for one and two threads, run by run (alternating, so both see the same machine). */
  readonly runs: { readonly oneThread: number; readonly twoThreads: number; readonly scaling: number }[];
  readonly medianScaling: number;
  readonly bestScaling: number;
}

export interface ReplicaBenchFigures {
  readonly backend: string;
  readonly connections: number;
  readonly depth: number;
  /** 1-minute load average and the share of CPU time stolen by the hypervisor while the benchmark ran. */
  readonly machine: {
    readonly loadAverageBefore: number;
    readonly loadAverageAfter: number;
    readonly stealPercent: number | undefined;
  };
  readonly grants: GrantFigures[];
  readonly signing: SigningFigures;
  /**
   * The signing record alone: durable records/s with 512 writes in flight (group commit), and one write at a time,
   * from the put until it is flushed (what an idle replica's grant waits for).
   */
  readonly store: { readonly recordsPerSecond: number; readonly oneWriteMs: Timing };
  /**
   * Three signing records in three processes (an acquire's `t` = 3 signers), one write each at the same
   * moment, 3 ms apart as in a closed acquire loop: each write from the put until flushed, and the time until
   * all three were (the parent's view, the IPC round trip included). The disk's share of an acquire here.
   */
  readonly storesTogether: { readonly stores: number; readonly eachMs: Timing; readonly allMs: Timing };
  /** Connections authenticating at the same moment (a reconnect storm), one entry per run. */
  readonly handshakes: HandshakeFigures[];
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)] ?? NaN;
}

async function measureGrants(
  url: string,
  signingWorkers: number,
  run: number,
  options: { connections: number; depth: number; seconds: number; warmupSeconds: number },
): Promise<GrantRate> {
  const connections = await Promise.all(Array.from({ length: options.connections }, (_, k) => connectLoad(url, k)));
  const warmupEnds = performance.now() + options.warmupSeconds * 1_000;
  const ends = warmupEnds + options.seconds * 1_000;
  let grants = 0;
  let refused = 0;
  const latencies: number[] = [];
  let sequence = 0;
  let stopping = false;
  const done = connections.map(
    (connection, c) =>
      new Promise<void>((resolve) => {
        // Cork the stream for the rest of this turn, so a burst of requests goes out in one write.
        const stream = (connection.socket as unknown as { _socket?: import('node:stream').Duplex })._socket;
        let corked = false;
        const send = (): void => {
          if (stream && !corked) {
            corked = true;
            stream.cork();
            setImmediate(() => {
              corked = false;
              stream.uncork();
            });
          }
          const id = ++sequence;
          connection.sent.set(id, performance.now());
          connection.socket.send(
            encodeMessage({
              type: 'acquire',
              id,
              resource: `bench/${signingWorkers}/${run}/${c}/${id}`,
              epoch: 1n,
              ttlMs: 1_000,
            }),
          );
        };
        connection.socket.on('message', (data: Buffer) => {
          const message = decodeServerMessage(new Uint8Array(data));
          if (message.type !== 'reply' && message.type !== 'error') return;
          const id = message.id ?? -1;
          const sentAt = connection.sent.get(id);
          connection.sent.delete(id);
          const now = performance.now();
          if (now >= warmupEnds && now < ends && sentAt !== undefined) {
            if (message.type === 'reply' && message.outcome.status === 'granted') {
              grants++;
              if (latencies.length < 200_000) latencies.push(now - sentAt);
            } else {
              refused++;
            }
          }
          if (now >= ends) stopping = true;
          if (!stopping) send();
          else if (connection.sent.size === 0) resolve();
        });
        connection.socket.once('close', () => resolve());
        for (let k = 0; k < options.depth; k++) send();
      }),
  );
  await Promise.all(done);
  await Promise.all(connections.map((c) => new Promise((r) => (c.socket.once('close', r), c.socket.close()))));
  if (refused > 0)
    throw new QuorumFenceError(
      'INTERNAL',
      `${refused} acquires were not granted; the benchmark load must be all distinct resources`,
    );
  return {
    signingWorkers,
    grants,
    seconds: options.seconds,
    perSecond: grants / options.seconds,
    latencyMs: summarise(latencies),
  };
}

async function measureSigning(dir: string, workers: number, signatures: number): Promise<number> {
  const cluster = JSON.parse(readFileSync(join(dir, 'cluster.json'), 'utf8')) as unknown;
  const key = JSON.parse(readFileSync(join(dir, 'replica-1.key'), 'utf8')) as unknown;
  const signer = await startWorkerSigner({
    workers,
    cluster,
    key,
    backend: loadClusterFile(join(dir, 'cluster.json')).backend.name,
  });
  try {
    const clusterId = new Uint8Array(32);
    const holder = new Uint8Array(32).fill(1);
    const messages = Array.from({ length: signatures }, (_, k) =>
      grantMessage({ clusterId, resource: `sign/${k}`, epoch: 1n, holder }),
    );
    // Warm both threads, then keep 256 in flight.
    await Promise.all(messages.slice(0, 64).map((m) => signer.sign(m)));
    const start = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: 256 }, async () => {
        while (next < messages.length) await signer.sign(messages[next++]!);
      }),
    );
    return signatures / ((performance.now() - start) / 1000);
  } finally {
    await signer.close();
  }
}

/** Runs the replica benchmark; takes about 90 s (quick: about 15 s; smoke: a few). */
export async function benchReplica(options: ReplicaBenchOptions = {}): Promise<ReplicaBenchFigures> {
  const progress = options.progress ?? (() => undefined);
  const size = options.size ?? 'full';
  const smoke = size === 'smoke';
  const seconds = options.seconds ?? { full: 5, quick: 2, smoke: 0.25 }[size];
  const warmupSeconds = smoke ? 0.25 : 1;
  const repeats = options.repeats ?? (size === 'full' ? 3 : 1);
  const loadAverageBefore = loadavg()[0]!;
  const cpuBefore = machineCpuTimes();
  const connections = options.connections ?? 8;
  const depth = options.depth ?? 64;
  const root = mkdtempSync(join(tmpdir(), 'qf-bench-replica-'));
  try {
    const keys = join(root, 'keys');
    dealLocalCluster(keys);
    const backend = loadClusterFile(join(keys, 'cluster.json')).backend.name;

    // One replica per thread count, all started up front and measured in
    // turn, run after run: on a machine other work shares, each configuration
    // then sees the same background load.
    const workerCounts = options.workerCounts ?? [0, 1, 2];
    const replicas: Awaited<ReturnType<typeof startLocalCluster>>[] = [];
    let grants: GrantFigures[];
    try {
      for (const workers of workerCounts) {
        replicas.push(
          await startLocalCluster({
            newStores: true,
            dir: keys,
            indices: [1],
            dataRoot: join(root, `data-${workers}`),
            extraArgs: [
              '--signing-workers',
              String(workers),
              '--max-in-flight',
              String(depth),
              '--rate-limit',
              '1000000',
              '--max-ttl',
              '60s',
            ],
          }),
        );
      }
      const runs: GrantRate[][] = workerCounts.map(() => []);
      for (let run = 1; run <= repeats; run++) {
        for (const [k, workers] of workerCounts.entries()) {
          progress(
            `replica: ${workers} signing thread(s), ${connections} connections x ${depth} in flight, ${seconds} s, run ${run}/${repeats} ...`,
          );
          runs[k]!.push(
            await measureGrants(replicas[k]!.replica(1).url, workers, run, {
              connections,
              depth,
              seconds,
              warmupSeconds,
            }),
          );
        }
      }
      grants = workerCounts.map((workers, k) => {
        const rates = runs[k]!.map((r) => r.perSecond);
        return {
          signingWorkers: workers,
          runs: runs[k]!,
          medianPerSecond: median(rates),
          bestPerSecond: Math.max(...rates),
        };
      });
    } finally {
      await Promise.all(replicas.map((r) => r.close()));
    }

    const handshakeCount = { full: 500, quick: 200, smoke: 20 }[size];
    const handshakes: HandshakeFigures[] = [];
    const storm = await startLocalCluster({
      newStores: true,
      dir: keys,
      indices: [1],
      dataRoot: join(root, 'data-handshakes'),
      // One address opens them all here; the default per-address cap (64) is for a fleet behind one NAT address.
      extraArgs: ['--max-unauthenticated-per-address', String(handshakeCount)],
    });
    try {
      for (let run = 1; run <= repeats; run++) {
        progress(`replica: ${handshakeCount} connections authenticating at once, run ${run}/${repeats} ...`);
        handshakes.push(await measureHandshakes(storm.replica(1).url, storm.replica(1).pid, handshakeCount));
      }
    } finally {
      await storm.close();
    }

    const count = { full: 4_000, quick: 2_000, smoke: 200 }[size];
    const signingRuns: SigningFigures['runs'][number][] = [];
    const signingRepeats = smoke ? 1 : repeats + 2;
    for (let run = 1; run <= signingRepeats; run++) {
      progress(`replica: signer threads alone, run ${run}/${signingRepeats} ...`);
      const oneThread = await measureSigning(keys, 1, count);
      const twoThreads = await measureSigning(keys, 2, count);
      signingRuns.push({ oneThread, twoThreads, scaling: twoThreads / oneThread });
    }

    progress('replica: signing record alone ...');
    const store = await measureStore(
      join(root, 'store'),
      { full: 100_000, quick: 20_000, smoke: 500 }[size],
      { full: 300, quick: 100, smoke: 10 }[size],
    );
    progress('replica: three signing records in three processes, flushing at once ...');
    const storesTogether = await measureStoresTogether(
      join(root, 'together'),
      3,
      { full: 300, quick: 100, smoke: 5 }[size],
    );

    const cpuAfter = machineCpuTimes();
    const stealPercent =
      cpuBefore && cpuAfter && cpuAfter.total > cpuBefore.total
        ? (100 * (cpuAfter.steal - cpuBefore.steal)) / (cpuAfter.total - cpuBefore.total)
        : undefined;
    const scalings = signingRuns.map((r) => r.scaling);
    return {
      backend,
      connections,
      depth,
      machine: { loadAverageBefore, loadAverageAfter: loadavg()[0]!, stealPercent },
      grants,
      signing: { runs: signingRuns, medianScaling: median(scalings), bestScaling: Math.max(...scalings) },
      store,
      storesTogether,
      handshakes,
    };
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

// `node dist/src/bench/replica.js [--quick | --smoke]`: run it and print the figures as JSON.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const figures = await benchReplica({
    size: process.argv.includes('--smoke') ? 'smoke' : process.argv.includes('--quick') ? 'quick' : 'full',
    progress: (line) => process.stderr.write(`${line}\n`),
  });
  process.stdout.write(
    JSON.stringify(
      figures,
      (_key, value: unknown) => (typeof value === 'number' ? Math.round(value * 100) / 100 : value),
      2,
    ) + '\n',
  );
}
