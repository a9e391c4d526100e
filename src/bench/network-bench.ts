/**
 * `bench system etcd --rtt 0,2ms,20ms`: the system and etcd sections once
 * per round-trip time, with every link of both systems behind the same delay
 * proxies (network.ts): the client to each replica and to the guarded
 * resource; the client to each etcd member, and the members' peer links, so
 * Raft pays the round trips it pays between machines. Each round trip gets
 * fresh processes on both sides, and its own proxies' process. 0 is loopback:
 * no proxy, the figures of `bench system etcd`.
 */
import { loadavg } from 'node:os';
import { benchEtcd, type EtcdFigures } from './etcd.js';
import { findEtcd } from './etcd-cluster.js';
import { failedOf, type BenchSize, type Failed, type Skipped, type Timing } from './measure.js';
import { LOOPBACK, measureRoundTrip, networkCpuMs, startDelayedNetwork, type DelayedNetwork } from './network.js';
import { benchSystem, type SystemFigures } from './system.js';
import type { DelayProxyStats } from '../testing/delay-proxy.js';

/** One side's share of the proxies' process: its CPU while that side ran, as a share of one core. */
export interface ProxyLoad {
  readonly cpuMs: number;
  readonly wallMs: number;
  readonly coreShare: number;
}

/** Everything measured at one round-trip time. */
export interface NetworkPoint {
  /** The round trip set on every link, ms (0: loopback, no proxy). */
  readonly rttMs: number;
  /** From /proc/loadavg (1-minute), when this round trip's runs started and ended. */
  readonly loadAverage: { readonly start: number; readonly end: number };
  /** One-byte pings through a route, one at a time: the round trip a link actually gave (direct on loopback). */
  readonly measuredRttMs: Timing;
  /** The proxies' process: its figures, and its CPU while each side ran (it shares the cores). */
  readonly proxy?: {
    readonly stats: DelayProxyStats;
    readonly quorumfence?: ProxyLoad;
    readonly etcd?: ProxyLoad;
  };
  readonly system?: SystemFigures | Failed;
  readonly etcd?: EtcdFigures | Skipped | Failed;
}

export interface NetworkBenchOptions {
  readonly rtts: readonly number[];
  readonly size: BenchSize;
  readonly replicas: number;
  /** Which sides to run (both by default). */
  readonly system?: boolean;
  readonly etcd?: boolean;
  readonly progress?: (line: string) => void;
}

/** Pings for the measured round trip, by size: enough for a p99 in a full run, a handful in a smoke run. */
const PINGS: Record<BenchSize, number> = { full: 200, quick: 100, smoke: 10 };

/** Runs `run`, with the proxies' CPU over it; a throw becomes a Failed in place of the figures. */
async function measuredSide<T>(
  network: DelayedNetwork | undefined,
  run: () => Promise<T>,
): Promise<{ figures: T | Failed; load: ProxyLoad | undefined }> {
  const cpu0 = networkCpuMs(network);
  const t0 = performance.now();
  let figures: T | Failed;
  try {
    figures = await run();
  } catch (error) {
    figures = failedOf(error);
  }
  const wallMs = performance.now() - t0;
  const cpuMs = networkCpuMs(network) - cpu0;
  return { figures, load: network ? { cpuMs, wallMs, coreShare: cpuMs / wallMs } : undefined };
}

/** Both sides at each round-trip time. Never throws for a side: a side that fails is a Failed in its point. */
export async function benchNetwork(options: NetworkBenchOptions): Promise<NetworkPoint[]> {
  const progress = options.progress ?? (() => undefined);
  const points: NetworkPoint[] = [];
  for (const rttMs of options.rtts) {
    const label = rttMs === 0 ? 'loopback' : `round trip ${rttMs} ms`;
    const start = loadavg()[0]!;
    progress(`network, ${label}: ${rttMs === 0 ? 'no proxy' : 'starting the delay proxies'} ...`);
    let network: DelayedNetwork | undefined;
    try {
      network = rttMs === 0 ? undefined : await startDelayedNetwork(rttMs);
      const links = network ?? LOOPBACK;
      const measuredRttMs = await measureRoundTrip(links, PINGS[options.size]);
      const tag = (line: string) => progress(`network, ${label}: ${line}`);
      const system =
        options.system === false
          ? undefined
          : await measuredSide(network, () =>
              benchSystem({ replicas: options.replicas, size: options.size, progress: tag, links }),
            );
      const etcd =
        options.etcd === false
          ? undefined
          : findEtcd()
            ? await measuredSide(network, () => benchEtcd({ size: options.size, progress: tag, links }))
            : {
                figures: { skipped: 'etcd is not on PATH (Debian: apt-get install etcd-server)' } satisfies Skipped,
                load: undefined,
              };
      points.push({
        rttMs,
        loadAverage: { start, end: loadavg()[0]! },
        measuredRttMs,
        ...(network
          ? {
              proxy: {
                stats: await network.stats(),
                ...(system?.load ? { quorumfence: system.load } : {}),
                ...(etcd?.load ? { etcd: etcd.load } : {}),
              },
            }
          : {}),
        ...(system ? { system: system.figures } : {}),
        ...(etcd ? { etcd: etcd.figures } : {}),
      });
    } catch (error) {
      // The network itself failed (the proxies' process, or the ping through it): both sides are lost.
      const failed = failedOf(error);
      points.push({
        rttMs,
        loadAverage: { start, end: loadavg()[0]! },
        measuredRttMs: { median: NaN, p99: NaN, mean: NaN, samples: 0 },
        ...(options.system === false ? {} : { system: failed }),
        ...(options.etcd === false ? {} : { etcd: failed }),
      });
    } finally {
      await network?.close();
    }
  }
  return points;
}

/** The parts of `points` that failed, as `<side> at <rtt>` (empty when every side ran or was skipped). */
export function networkFailures(points: readonly NetworkPoint[]): string[] {
  return points.flatMap((point) =>
    (['system', 'etcd'] as const)
      .filter((side) => point[side] !== undefined && 'failed' in point[side])
      .map((side) => `${side} at ${point.rttMs} ms`),
  );
}
