/**
 * `bench system etcd --rtt 2ms --gray FAULT[,FAULT...]`: gray faults. On the
 * network bench's delay proxies (network.ts), for each fault, the three
 * acquire + release loops of the network bench (1 client; 16 clients on
 * distinct resources; 16 on one hot resource), each run healthy and then with
 * the fault, on the same processes, one after the other; so every figure has
 * the same system's healthy figure from the same invocation beside it.
 *
 * A fault strikes one node: quorumfence replica `grayReplica` (1 of 4 by
 * default); for etcd, in two variants, its leader (leadership moved there
 * first through the maintenance API, MoveLeader, and checked) and a follower.
 * Each loop's clients connect and run their warm-up cycle healthy; then the
 * fault begins, the loops run on uncounted for the settling time (the
 * clients' time to notice it, under load: 1 s), then the counted cycles; the
 * fault ends when they are done. The healthy runs take the same steps with no
 * fault. quorumfence's processes are shared by the faults of a run, its gray
 * replica restarted alone when a fault starts it another way; etcd's cluster
 * is started afresh for each fault.
 *
 *   slow-link:MS       the node's links get MS more one-way delay at the proxies: every connection to it, and
 *                      (etcd) the peer links it dials itself, found by its process in /proc (socket-owner.ts)
 *   hung               SIGSTOP of the node's process: connections stay open, nothing answers; SIGCONT at the end
 *   byzantine-slow:MS  quorumfence only: the replica is the Byzantine replica process
 *                      (nodes/byzantine-replica.js), honest in the healthy runs, behaviour `slow` on every
 *                      request in the faulted ones: every answer correct, MS late
 *   slow-flush:MS      quorumfence only: every flush of the replica's process waits MS first (slow-flush.ts: a
 *                      library preloaded into it wraps fsync, fdatasync and msync; LMDB's commit and the flush
 *                      barrier are the real ones); etcd is a static Go binary, out of a preloaded library's reach
 *
 * etcd's clients dial the members other than the faulted one, spread over
 * them (healthy runs too): etcd's best case, a client that never waits on
 * the sick member itself. While etcd elects a new leader its members answer
 * errors; an etcd cycle that fails is run again, after a backoff, as a user
 * would (counted as `retried`).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { parseDuration } from '../command/args.js';
import { leaderOf } from '../client/signer-choice.js';
import type { LocalReplica } from '../cluster/launcher.js';
import { fetchBounded, parseMetrics, type MetricsSample } from '../console/replica-health.js';
import { byzantineEntryPoint, byzantineState, controlByzantine } from '../testing/byzantine/control.js';
import type { DelayProxyStats } from '../testing/delay-proxy.js';
import { etcdLoop, type EtcdDriver, type Retried } from './etcd.js';
import { agreedLeader, findEtcd, moveLeader, startEtcdCluster, type EtcdMember } from './etcd-cluster.js';
import {
  failedOf,
  freshNames,
  LOOP_PLAN,
  type BenchSize,
  type Failed,
  type LoopCondition,
  type LoopRate,
  type Skipped,
  type Timing,
} from './measure.js';
import { MAX_RTT_MS, measureRoundTrip, startDelayedNetwork, type DelayedNetwork } from './network.js';
import { buildSlowFlush, findCompiler, type SlowFlush } from './slow-flush.js';
import { acquireLoop, reach, type Running } from './system-loop.js';
import { restartReplica, startSystem, type OddReplica } from './system-processes.js';

export const GRAY_FAULT_KINDS = ['slow-link', 'hung', 'byzantine-slow', 'slow-flush'] as const;
export type GrayFaultKind = (typeof GRAY_FAULT_KINDS)[number];

/** A fault's delay when its name gives none: the 50 ms. */
export const DEFAULT_GRAY_MS = 50;

/** What each fault emulates and how (for --help, the JSON and docs/performance.md), and whether etcd gets it. */
export const GRAY_FAULTS: Readonly<
  Record<GrayFaultKind, { readonly takesMs: boolean; readonly etcd: boolean; readonly emulates: string }>
> = {
  'slow-link': {
    takesMs: true,
    etcd: true,
    emulates:
      "a slow network at one node: every link of it MS slower each way at the delay proxies (its client links; etcd's peer links too, those it accepts and those it dials)",
  },
  hung: {
    takesMs: false,
    etcd: true,
    emulates:
      'a hung node: SIGSTOP of its process after the warm-up (connections stay open, nothing answers), SIGCONT at the end',
  },
  'byzantine-slow': {
    takesMs: true,
    etcd: false,
    emulates:
      "a Byzantine replica that answers late: the project's Byzantine replica process, behaviour slow on every request (every answer correct, MS late)",
  },
  'slow-flush': {
    takesMs: true,
    etcd: false,
    emulates:
      "a slow disk: every flush of the replica's process (fsync, fdatasync, msync) waits MS first, by a library preloaded into it (LD_PRELOAD); LMDB and the flush barrier are the real ones",
  },
};

/** Why etcd has no run for a fault. */
const ETCD_HAS_NO: Partial<Record<GrayFaultKind, string>> = {
  'byzantine-slow': 'quorumfence only: etcd (Raft) does not tolerate a Byzantine member',
  'slow-flush': "quorumfence only: etcd is a static Go binary, its flushes out of a preloaded library's reach",
};

export interface GrayFault {
  readonly kind: GrayFaultKind;
  /** The delay of slow-link, byzantine-slow and slow-flush, ms. */
  readonly ms?: number;
  /** As it is written: `slow-link:50ms`, `hung`. */
  readonly name: string;
}

/**
 * `--gray slow-link:50ms,hung,...`: the faults, in the order given. A fault that takes a delay defaults to
 * DEFAULT_GRAY_MS.
 * @throws QuorumFenceError INVALID_OPTION for an empty list, an unknown fault, a delay on hung, a delay that is
 *   not a duration in 1..MAX_RTT_MS ms, or a fault named twice
 */
export function parseGrayFaults(value: string): GrayFault[] {
  const items = value.split(',').map((item) => item.trim());
  if (items.some((item) => item === ''))
    throw new QuorumFenceError('INVALID_OPTION', `--gray expects a list like slow-link:50ms,hung, got "${value}"`);
  const faults = items.map((item): GrayFault => {
    const colon = item.indexOf(':');
    const kind = colon < 0 ? item : item.slice(0, colon);
    if (!(GRAY_FAULT_KINDS as readonly string[]).includes(kind))
      throw new QuorumFenceError(
        'INVALID_OPTION',
        `--gray: unknown fault "${kind}" (known: ${GRAY_FAULT_KINDS.join(', ')})`,
      );
    const known = kind as GrayFaultKind;
    if (!GRAY_FAULTS[known].takesMs) {
      if (colon >= 0) throw new QuorumFenceError('INVALID_OPTION', `--gray: ${kind} takes no delay, got "${item}"`);
      return { kind: known, name: kind };
    }
    const ms = colon < 0 ? DEFAULT_GRAY_MS : parseDuration(item.slice(colon + 1), 'gray', DEFAULT_GRAY_MS);
    if (!(ms >= 1 && ms <= MAX_RTT_MS))
      throw new QuorumFenceError(
        'INVALID_OPTION',
        `--gray: ${kind}'s delay must be 1 ms to ${MAX_RTT_MS} ms, got "${item}"`,
      );
    return { kind: known, ms, name: `${kind}:${ms}ms` };
  });
  const kinds = faults.map((f) => f.kind);
  const twice = kinds.find((kind, k) => kinds.indexOf(kind) !== k);
  if (twice) throw new QuorumFenceError('INVALID_OPTION', `--gray names ${twice} twice: "${value}"`);
  return faults;
}

/** What a fault emulates, its MS filled in. */
export function grayEmulates(fault: GrayFault): string {
  return GRAY_FAULTS[fault.kind].emulates.replace(/\bMS\b/g, `${fault.ms ?? 0} ms`);
}

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

const PINGS: Record<BenchSize, number> = { full: 200, quick: 100, smoke: 10 };
/**
 * etcd's clients per variant: both (the stronger one per figure is compared); in a smoke run one each, the
 * gateway under the leader's fault and gRPC under the follower's, so both take every step in half the time
 * (a hung leader holds requests for etcd's own request timeout, 7 s, in every faulted loop).
 */
function etcdDrivers(size: BenchSize, variant: 'leader' | 'follower'): readonly EtcdDriver[] {
  if (size !== 'smoke') return ['gateway', 'grpc'];
  return variant === 'leader' ? ['gateway'] : ['grpc'];
}

/** A process's state letter from /proc (T: stopped), or undefined when it cannot be read. */
function processState(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
  } catch {
    return undefined;
  }
}

/** Stops `pid` (SIGSTOP) and waits, briefly, until /proc shows it stopped. */
async function stopProcess(pid: number): Promise<boolean> {
  process.kill(pid, 'SIGSTOP');
  for (let k = 0; k < 50; k++) {
    if (processState(pid) === 'T') return true;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return false;
}

const per = (count: number, cycles: number) => (cycles > 0 ? count / cycles : 0);

// ---------- quorumfence ----------

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

/** How the gray replica is started for `fault`, and what switches the fault on and off. */
interface QuorumfenceFault {
  readonly odd?: OddReplica;
  begin(replica: LocalReplica, network: DelayedNetwork): Promise<{ stopped?: boolean }>;
  end(replica: LocalReplica, network: DelayedNetwork): Promise<void>;
}

function quorumfenceFault(fault: GrayFault, index: number, slowFlush: SlowFlush | undefined): QuorumfenceFault {
  const ms = fault.ms ?? 0;
  switch (fault.kind) {
    case 'slow-link':
      return {
        begin: async (replica, network) => {
          await network.slowNode({ urls: [replica.url], fromPid: replica.pid, extraOneWayMs: ms });
          return {};
        },
        end: async (replica, network) => void (await network.slowNode({ urls: [replica.url], extraOneWayMs: 0 })),
      };
    case 'hung':
      return {
        begin: async (replica) => ({ stopped: await stopProcess(replica.pid) }),
        end: async (replica) => void (await replica.kill('SIGCONT')),
      };
    case 'byzantine-slow':
      return {
        // Honest (no behaviour) until the fault begins: its healthy runs go through the same front.
        odd: { index, entry: byzantineEntryPoint(), extraArgs: ['--slow', `${ms}ms`] },
        begin: async (replica) => {
          await controlByzantine(replica.url, { behaviours: ['slow'], slowMs: ms, rate: 1 });
          return {};
        },
        end: async (replica) => void (await controlByzantine(replica.url, { behaviours: [] })),
      };
    case 'slow-flush':
      return {
        odd: { index, env: slowFlush!.env },
        begin: async () => {
          slowFlush!.set(ms);
          return {};
        },
        end: async () => slowFlush!.set(0),
      };
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
  // Read when no cycle runs: after the warm-up, before the fault begins; after the last cycle, before it ends.
  let atBegin: [(MetricsSample | undefined)[], number | undefined] | undefined;
  let atEnd: [(MetricsSample | undefined)[], number | undefined] | undefined;
  let stopped: boolean | undefined;
  const condition: LoopCondition = {
    settleMs,
    begin: async () => {
      atBegin = await Promise.all([readAll(), readSlowed()]);
      if (fault) ({ stopped } = await fault.begin(gray, network));
    },
    end: async () => {
      try {
        if (atBegin) atEnd = await Promise.all([readAll(), readSlowed()]);
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
  const [before, slowedBefore] = atBegin!;
  const [after, slowedAfter] = atEnd!;
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
class QuorumfenceProcesses {
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

async function grayQuorumfence(
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

// ---------- etcd ----------

async function etcdVariant(
  fault: GrayFault,
  members: readonly EtcdMember[],
  leader: EtcdMember,
  faulted: EtcdMember,
  network: DelayedNetwork,
  options: GrayOptions,
  progress: (line: string) => void,
): Promise<EtcdGrayVariant> {
  const seconds = LOOP_PLAN[options.size].seconds;
  const settleMs = SETTLE_MS[options.size];
  const clientsOn = members.filter((m) => m !== faulted);
  const variant = faulted === leader ? 'leader' : 'follower';
  const hung = fault.kind === 'hung';
  // The members asked where the leader is while the fault runs: a stopped one cannot answer.
  const asked = (faultedNow: boolean) => (faultedNow && hung ? new Set([faulted.name]) : new Set<string>());
  let leaderMoves = 0;
  const drivers: EtcdGrayVariant['drivers'] = {};
  for (const driver of etcdDrivers(options.size, variant)) {
    const loops = {} as Record<GrayLoopName, Paired<EtcdGrayLoop>>;
    for (const loop of GRAY_LOOPS) {
      const run = async (state: 'healthy' | 'faulted'): Promise<EtcdGrayLoop> => {
        progress(
          `etcd (${driver}), ${fault.name} on its ${variant} (${faulted.name}): ${loopTitle(loop, GRAY_CLIENTS[options.size])}, ${state} ...`,
        );
        // Every run starts with the leader where the variant wants it (a hung leader lost it in the last run).
        if ((await moveLeader(members, leader)).moved) leaderMoves++;
        const faultedNow = state === 'faulted';
        const retried: Retried = { count: 0 };
        let leaderWhenCounting: Promise<string | undefined> | undefined;
        let leaderAtEnd: string | undefined;
        let dialedByFaulted: number | undefined;
        let stopped: boolean | undefined;
        const condition: LoopCondition = {
          settleMs,
          begin: async () => {
            if (!faultedNow) return;
            if (hung) stopped = await stopProcess(faulted.pid);
            else
              ({ dialedByPid: dialedByFaulted } = await network.slowNode({
                urls: [faulted.listenClientUrl, faulted.listenPeerUrl],
                fromPid: faulted.pid,
                extraOneWayMs: fault.ms ?? 0,
              }));
          },
          counting: () => {
            leaderWhenCounting = agreedLeader(members, asked(faultedNow));
          },
          end: async () => {
            try {
              leaderAtEnd = await agreedLeader(members, asked(faultedNow));
            } finally {
              if (faultedNow) {
                if (hung) process.kill(faulted.pid, 'SIGCONT');
                else await network.slowNode({ urls: [], extraOneWayMs: 0 });
              }
            }
          },
        };
        // As on quorumfence's side: the same lock healthy and faulted, fresh names of their own for distinct.
        const prefix = `bench/gray/${fault.kind}/${variant}/${driver}`;
        const nameOf = loop === 'distinct' ? freshNames(`${prefix}/${state}/d`) : () => `${prefix}/${loop}`;
        const rate = await etcdLoop(
          driver,
          clientsOn.map((m) => m.clientUrl),
          loop === 'one' ? 1 : GRAY_CLIENTS[options.size],
          seconds,
          nameOf,
          false,
          undefined,
          { condition, retried },
        );
        return {
          rate,
          retried: retried.count,
          ...(retried.first === undefined ? {} : { firstRetryError: retried.first }),
          leaderWhenCounting: (await leaderWhenCounting) ?? null,
          leaderAtEnd: leaderAtEnd ?? null,
          ...(dialedByFaulted === undefined ? {} : { dialedByFaulted }),
          ...(stopped === undefined ? {} : { stopped }),
        };
      };
      const healthy = await run('healthy');
      loops[loop] = { healthy, faulted: await run('faulted') };
    }
    drivers[driver] = loops;
  }
  return {
    faulted: faulted.name,
    leader: leader.name,
    clientsOn: clientsOn.map((m) => m.name),
    leaderMoves,
    drivers,
  };
}

async function grayEtcd(
  fault: GrayFault,
  options: GrayOptions,
  network: DelayedNetwork,
  progress: (line: string) => void,
): Promise<EtcdGray> {
  progress(`etcd, ${fault.name}: starting a 3-member cluster ...`);
  const cluster = await startEtcdCluster({ links: network });
  try {
    const [first, second] = cluster.members;
    const variant = async (faulted: EtcdMember) => {
      try {
        return await etcdVariant(fault, cluster.members, first!, faulted, network, options, progress);
      } catch (error) {
        return failedOf(error);
      }
    };
    // Leadership on the first member in both: the fault strikes it, then the second (a follower).
    const leader = await variant(first!);
    const follower = await variant(second!);
    return { members: cluster.members.length, leader, follower };
  } finally {
    await cluster.close();
  }
}

// ---------- the bench ----------

/** Every fault on both sides, on one delayed network. Never throws for a side: it is a Failed in its place. */
export async function benchGray(options: GrayOptions): Promise<GrayBench> {
  const progress = options.progress ?? (() => undefined);
  const start = loadavg()[0]!;
  progress(`gray faults, round trip ${options.rttMs} ms: starting the delay proxies ...`);
  const network = await startDelayedNetwork(options.rttMs);
  const processes = new QuorumfenceProcesses(options);
  try {
    const measuredRttMs = await measureRoundTrip(network, PINGS[options.size]);
    const etcdThere = options.etcd !== false && findEtcd() !== undefined;
    const faults: GrayFaultFigures[] = [];
    for (const fault of options.faults) {
      const tag = (line: string) => progress(`gray ${fault.name}: ${line}`);
      const side = async <T>(run: () => Promise<T>): Promise<T | Failed> => {
        try {
          return await run();
        } catch (error) {
          return failedOf(error);
        }
      };
      const quorumfence =
        options.system === false
          ? undefined
          : fault.kind === 'slow-flush' && !findCompiler()
            ? ({
                skipped: 'no C compiler on PATH to build the slow-flush library (Debian: apt-get install gcc)',
              } satisfies Skipped)
            : await side(() => grayQuorumfence(fault, options, network, processes, tag));
      const etcdReason = ETCD_HAS_NO[fault.kind];
      const etcd =
        options.etcd === false
          ? undefined
          : etcdReason
            ? ({ skipped: etcdReason } satisfies Skipped)
            : !etcdThere
              ? ({ skipped: 'etcd is not on PATH (Debian: apt-get install etcd-server)' } satisfies Skipped)
              : await side(() => grayEtcd(fault, options, network, tag));
      faults.push({
        fault: fault.name,
        kind: fault.kind,
        ...(fault.ms === undefined ? {} : { ms: fault.ms }),
        emulates: grayEmulates(fault),
        ...(quorumfence ? { quorumfence } : {}),
        ...(etcd ? { etcd } : {}),
      });
    }
    return {
      rttMs: options.rttMs,
      measuredRttMs,
      settleMs: SETTLE_MS[options.size],
      loadAverage: { start, end: loadavg()[0]! },
      proxy: { stats: await network.stats() },
      faults,
    };
  } finally {
    try {
      await processes.close();
    } finally {
      await network.close();
    }
  }
}

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
