/**
 * What a gray run is made of and what it keeps: its three loops (their
 * clients, their titles), the settling time, and the figures of every fault on
 * both sides, healthy and faulted. Apart from gray.ts because the runner of
 * each side, the report and the chart all read these shapes, and none of them
 * needs the processes the runner starts.
 */
import type { DelayProxyStats } from '../testing/delay-proxy.js';
import type { EtcdDriver } from './etcd.js';
import type { GrayFault, GrayFaultKind } from './gray-faults.js';
import type { BenchSize, Failed, LoopRate, Skipped, Timing } from './measure.js';

export const GRAY_LOOPS = ['one', 'distinct', 'hot'] as const;
/**
 * Clients in the distinct and hot loops: 16, as in the network bench; 4 in a smoke run (a faulted etcd leader's
 * hot loop ends only once every waiter queued on the lock has had its turn).
 */
export const GRAY_CLIENTS: Record<BenchSize, number> = { full: 16, quick: 16, smoke: 4 };
export type GrayLoopName = (typeof GRAY_LOOPS)[number];

/** A loop's name in progress lines and tables. */
export function loopTitle(loop: GrayLoopName, clients: number): string {
  return loop === 'one'
    ? '1 client'
    : loop === 'distinct'
      ? `${clients} clients, distinct resources`
      : `${clients} clients, one hot resource`;
}

/** A loop healthy and then faulted. */
export interface Paired<T> {
  readonly healthy: T;
  readonly faulted: T;
}

/** One quorumfence loop under one condition, with what shows the fault acted. */
export interface QuorumfenceGrayLoop {
  readonly rate: LoopRate;
  /**
   * Partials signed per cycle from the fault's start to its end (settling time and counted time), from the
   * replicas' /metrics: by the gray replica (null where it could not be read: hung), and by all of them (those
   * that could be read).
   */
  readonly partialsPerCycle: { readonly gray: number | null; readonly all: number };
  /**
   * CPU ms per cycle over the same span (/proc and process.cpuUsage()): each replica's process (the gray one's with
   * its Byzantine front, when it has one; null where it could not be read), the clients (this process) and the
   * delay proxies' process. Says where a fault's cost lands on a machine the whole system shares.
   */
  readonly cpuMsPerCycle: {
    readonly replicas: readonly (number | null)[];
    readonly clients: number;
    readonly proxies: number;
    /** The share of the whole machine's CPU that was busy over the span (1: every core busy; null off Linux). */
    readonly machineBusy: number | null;
  };
  /**
   * Requests per cycle by type, and refusals by reason, over the same span, summed over the replicas that could
   * be read both times (their /metrics): what a fault makes the clients send.
   */
  readonly requestsPerCycle: Readonly<Record<string, number>>;
  readonly refusalsPerCycle: Readonly<Record<string, number>>;
  /** slow-flush: the gray replica's mean flush from the fault's start to its end, ms. */
  readonly grayFlushMs?: number;
  /** byzantine-slow: the answers the Byzantine front delayed from the fault's start to its end. */
  readonly slowedAnswers?: number;
  /** hung: the process was seen stopped (state T in /proc) once the fault began. */
  readonly stopped?: boolean;
}

export interface QuorumfenceGray {
  readonly replicas: number;
  /** The replica the fault struck, 1-based. */
  readonly grayReplica: number;
  readonly loops: Readonly<Record<GrayLoopName, Paired<QuorumfenceGrayLoop>>>;
}

/** One etcd loop under one condition, with what shows where the leader was and what the fault did. */
export interface EtcdGrayLoop {
  readonly rate: LoopRate;
  /** Cycles that failed and were run again (an election under way), and the first failure. */
  readonly retried: number;
  readonly firstRetryError?: string;
  /** The member the others all followed when the counted cycles began, and at their end (null: none agreed). */
  readonly leaderWhenCounting: string | null;
  readonly leaderAtEnd: string | null;
  /** slow-link: the faulted member's own open connections through the proxies (its peer links), slowed too. */
  readonly dialedByFaulted?: number;
  /** hung: the process was seen stopped once the fault began. */
  readonly stopped?: boolean;
}

export interface EtcdGrayVariant {
  /** The member the fault struck. */
  readonly faulted: string;
  /** The member leadership was moved to before every run (and checked). */
  readonly leader: string;
  /** The members the clients dial. */
  readonly clientsOn: readonly string[];
  /** How many of the runs needed a MoveLeader first (after a hung leader, every one). */
  readonly leaderMoves: number;
  readonly drivers: Partial<Record<EtcdDriver, Readonly<Record<GrayLoopName, Paired<EtcdGrayLoop>>>>>;
}

export interface EtcdGray {
  readonly members: number;
  readonly leader: EtcdGrayVariant | Failed;
  readonly follower: EtcdGrayVariant | Failed;
}

export interface GrayFaultFigures {
  readonly fault: string;
  readonly kind: GrayFaultKind;
  readonly ms?: number;
  readonly emulates: string;
  readonly quorumfence?: QuorumfenceGray | Failed | Skipped;
  readonly etcd?: EtcdGray | Failed | Skipped;
}

export interface GrayBench {
  readonly rttMs: number;
  /** One-byte pings through a route: the round trip a link actually gave. */
  readonly measuredRttMs: Timing;
  /** Between a fault's start and the counted cycles, ms (healthy runs wait as long). */
  readonly settleMs: number;
  readonly loadAverage: { readonly start: number; readonly end: number };
  readonly proxy?: { readonly stats: DelayProxyStats };
  readonly faults: readonly GrayFaultFigures[];
}

export interface GrayOptions {
  readonly faults: readonly GrayFault[];
  readonly rttMs: number;
  readonly size: BenchSize;
  readonly replicas: number;
  /** The quorumfence replica each fault strikes, 1-based. */
  readonly grayReplica: number;
  readonly system?: boolean;
  readonly etcd?: boolean;
  readonly progress?: (line: string) => void;
}

/** The settling time by size: the "after at most 1 s", shorter in a smoke run (its figures mean nothing). */
export const SETTLE_MS: Record<BenchSize, number> = { full: 1000, quick: 1000, smoke: 200 };

/** The parts of a gray run that failed, as `<side> under <fault>` (empty when every part ran or was skipped). */
export function grayFailures(bench: GrayBench): string[] {
  const failed = (part: object | undefined) => part !== undefined && 'failed' in part;
  return bench.faults.flatMap((f) => [
    ...(failed(f.quorumfence) ? [`quorumfence under ${f.fault}`] : []),
    ...(failed(f.etcd) ? [`etcd under ${f.fault}`] : []),
    ...(f.etcd && !('failed' in f.etcd) && !('skipped' in f.etcd)
      ? (['leader', 'follower'] as const)
          .filter((v) => failed((f.etcd as EtcdGray)[v]))
          .map((v) => `etcd (${v}) under ${f.fault}`)
      : []),
  ]);
}
