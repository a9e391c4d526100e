/**
 * etcd's side of a gray run: a 3-member cluster per fault, the fault striking
 * its leader (moved there first, and checked) and then a follower, each loop
 * run healthy and then faulted with every etcd client driver, with where the
 * leader was and what the fault did. Apart from gray.ts, which runs both
 * sides, and from gray-quorumfence.ts: each side starts and reads its own
 * processes its own way.
 */
import { etcdLoop, type EtcdDriver, type Retried } from './etcd.js';
import { agreedLeader, moveLeader, startEtcdCluster, type EtcdMember } from './etcd-cluster.js';
import { stopProcess, type GrayFault } from './gray-faults.js';
import {
  GRAY_CLIENTS,
  GRAY_LOOPS,
  loopTitle,
  SETTLE_MS,
  type EtcdGray,
  type EtcdGrayLoop,
  type EtcdGrayVariant,
  type GrayLoopName,
  type GrayOptions,
  type Paired,
} from './gray-figures.js';
import { failedOf, freshNames, LOOP_PLAN, type BenchSize, type LoopCondition } from './measure.js';
import type { DelayedNetwork } from './network.js';

/**
 * etcd's clients per variant: both (the stronger one per figure is compared); in a smoke run one each, the
 * gateway under the leader's fault and gRPC under the follower's, so both take every step in half the time
 * (a hung leader holds requests for etcd's own request timeout, 7 s, in every faulted loop).
 */
function etcdDrivers(size: BenchSize, variant: 'leader' | 'follower'): readonly EtcdDriver[] {
  if (size !== 'smoke') return ['gateway', 'grpc'];
  return variant === 'leader' ? ['gateway'] : ['grpc'];
}

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

export async function grayEtcd(
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
