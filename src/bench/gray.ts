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
import { loadavg } from 'node:os';
import { findEtcd } from './etcd-cluster.js';
import { ETCD_HAS_NO, grayEmulates } from './gray-faults.js';
import { SETTLE_MS, type GrayBench, type GrayFaultFigures, type GrayOptions } from './gray-figures.js';
import { grayEtcd } from './gray-etcd.js';
import { grayQuorumfence, QuorumfenceProcesses } from './gray-quorumfence.js';
import { failedOf, type BenchSize, type Failed, type Skipped } from './measure.js';
import { measureRoundTrip, startDelayedNetwork } from './network.js';
import { findCompiler } from './slow-flush.js';

// What the CLI, the report, the chart and the tests take from the gray bench, wherever it lives.
export {
  DEFAULT_GRAY_MS,
  GRAY_FAULT_KINDS,
  GRAY_FAULTS,
  grayEmulates,
  parseGrayFaults,
  type GrayFault,
  type GrayFaultKind,
} from './gray-faults.js';
export {
  GRAY_CLIENTS,
  GRAY_LOOPS,
  grayFailures,
  loopTitle,
  SETTLE_MS,
  type EtcdGray,
  type EtcdGrayLoop,
  type EtcdGrayVariant,
  type GrayBench,
  type GrayFaultFigures,
  type GrayLoopName,
  type GrayOptions,
  type Paired,
  type QuorumfenceGray,
  type QuorumfenceGrayLoop,
} from './gray-figures.js';
export { ledBy } from './gray-quorumfence.js';

const PINGS: Record<BenchSize, number> = { full: 200, quick: 100, smoke: 10 };

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
