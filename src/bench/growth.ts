/**
 * The `growth` section: does a replica's store, memory and restart time
 * follow the live resources, not every resource ever granted (issue 18)?
 *
 * For each size (10^3 as the baseline, then 10^4, 10^5 and, unless --quick,
 * 10^6 distinct resources ever granted), it grants each resource once in a
 * fresh signing record as a replica does, without the signing: the replica's
 * policy (`decide`) takes the decision inside the store's `checkAndRecord`
 * (the path every grant takes, with the store's own check), at the epoch a
 * replica gives a resource without a record (the floor + 1, as for a
 * `nextEpoch` acquire), on a fake wall clock one millisecond per resource.
 * It compacts every 100 writes with a retention window of 1,000 ms (1,000
 * grants), so 10^3 records stay live at the end, as an operator's retention
 * would leave them, and the store never holds more than about 1,100. Once
 * compaction has raised the floor, new resources are granted above it, as
 * on a replica (an epoch at or below it would be refused).
 * Then a real replica process starts on that data directory: the time from
 * spawn to /healthz answering 200 after a SIGKILL (median of three, as a
 * crash would leave it), its resident memory, and data.mdb's size on disk.
 * Figures are compared with the 10^3 baseline measured in the same run.
 * --smoke shrinks it all tenfold (10^2 and 10^3 resources, a window of 100)
 * and restarts once: every step still runs, the floor still rises.
 */
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadClusterFile } from '../cluster/description.js';
import { dealLocalCluster, startLocalCluster } from '../cluster/launcher.js';
import { QuorumFenceError } from '../common/errors.js';
import type { AcquireRequest } from '../protocol/messages.js';
import { OPEN_ACCESS } from '../replica/access.js';
import { DEFAULT_REPLICA_LIMITS } from '../replica/options.js';
import { decide, type PolicyConfig } from '../replica/policy.js';
import { SigningRecord, type CompactionTest } from '../replica/signing-record.js';
import { table } from './report.js';
import { summarise, type BenchSize } from './measure.js';

interface GrowthPlan {
  /** Distinct resources ever granted, one point each; the first is the baseline. */
  readonly sizes: readonly number[];
  /** The retention window in grants (one fake millisecond each): the records left at the end. */
  readonly live: number;
  /** Grants between compactions: a tenth of the retention window, as the defaults (60 s of 10 min) are. */
  readonly compactEvery: number;
  /** Grants in flight at once (they share LMDB transactions, as a busy replica's do); under half the window. */
  readonly concurrentWrites: number;
  /** SIGKILL + start this many times; the median is reported (the first start on a cold cache is slower). */
  readonly restarts: number;
}

const PLANS: Record<BenchSize, GrowthPlan> = {
  full: {
    sizes: [1_000, 10_000, 100_000, 1_000_000],
    live: 1_000,
    compactEvery: 100,
    concurrentWrites: 512,
    restarts: 3,
  },
  quick: { sizes: [1_000, 10_000, 100_000], live: 1_000, compactEvery: 100, concurrentWrites: 512, restarts: 3 },
  // Ten times the window, in twenty rounds of writes: compaction raises the floor and most grants go above it.
  smoke: { sizes: [100, 1_000], live: 100, compactEvery: 10, concurrentWrites: 50, restarts: 1 },
};

export interface GrowthPoint {
  /** Distinct resources ever granted. */
  readonly resourcesEverGranted: number;
  /** Records left after compaction (the live window). */
  readonly recordsLeft: number;
  readonly floor: string;
  /** data.mdb size on disk, bytes. */
  readonly storeBytes: number;
  /** Resident memory of the replica process once healthy, bytes. */
  readonly replicaRssBytes: number;
  /** Spawn to /healthz 200 after a SIGKILL, ms (median of the plan's restarts). */
  readonly restartMs: number;
  /** Grants written per second while compacting as it went. */
  readonly writesPerSecond: number;
}

export interface GrowthFigures {
  readonly liveResources: number;
  readonly points: GrowthPoint[];
  /** Each size's figures over the 10^3 baseline's. */
  readonly ratios: { resourcesEverGranted: number; store: number; rss: number; restart: number }[];
  readonly targets: { storeAndRssWithin: string; restartUnderMs: number };
}

function rssBytes(pid: number): number {
  const match = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) * 1024 : 0;
}

/**
 * One grant of a resource the store may not know, decided as a replica decides it: the policy, inside the
 * store's critical section, at the epoch a replica gives a resource without a record (a `nextEpoch` acquire's:
 * the record's epoch or the floor, + 1). The store writes it durably, or refuses it whatever the policy said.
 * @throws QuorumFenceError INTERNAL when the policy does not grant it or the store refuses it
 */
function grantAsReplica(
  store: SigningRecord,
  policy: PolicyConfig,
  resource: string,
  holder: Uint8Array,
  now: number,
): Promise<void> {
  return store.checkAndRecord(resource, (current) => {
    const request: AcquireRequest = {
      type: 'acquire',
      id: 0,
      resource,
      epoch: (current?.epoch ?? store.floor) + 1n,
      ttlMs: policy.minTtlMs,
    };
    const record = current && { ...current, leaseEndsAt: 0, released: true };
    const decision = decide(record, request, holder, now, policy, store.floor);
    if (decision.action !== 'grant')
      throw new QuorumFenceError('INTERNAL', `bench growth: the policy answered ${decision.action}, not grant`);
    return { record: decision.record, result: undefined };
  });
}

async function fill(
  dataDir: string,
  clusterId: Uint8Array,
  total: number,
  plan: GrowthPlan,
): Promise<{ left: number; floor: bigint; perSecond: number }> {
  let wall = 0;
  const store = SigningRecord.open(dataDir, { clusterId, replicaIndex: 1 }, { wallClock: () => wall, create: true });
  const holder = new Uint8Array(32).fill(0x42);
  // The bench replica's rules: open access, the default lease bounds and epoch step.
  const policy: PolicyConfig = {
    clusterId,
    minTtlMs: DEFAULT_REPLICA_LIMITS.minTtlMs,
    maxTtlMs: DEFAULT_REPLICA_LIMITS.maxTtlMs,
    freeEpochStep: DEFAULT_REPLICA_LIMITS.freeEpochStep,
    maxEpochStep: DEFAULT_REPLICA_LIMITS.maxEpochStep,
    // One replica alone: no evidence ever travels (a new resource starts within the floor's step).
    faultTolerance: 1,
    access: OPEN_ACCESS,
  };
  const compact = () => {
    const cutoff = wall - plan.live;
    const test: CompactionTest = (_resource, _record, grantedAtMs) => grantedAtMs <= cutoff;
    let from: Buffer | undefined;
    do from = store.compactStep(from, 10_000, test).next;
    while (from);
  };
  const started = performance.now();
  try {
    let next = 0;
    let sinceCompaction = 0;
    await Promise.all(
      Array.from({ length: plan.concurrentWrites }, async () => {
        while (next < total) {
          const resource = `orders/${String(next++).padStart(8, '0')}-${'x'.repeat(30)}`;
          wall++;
          await grantAsReplica(store, policy, resource, holder, wall);
          if (++sinceCompaction >= plan.compactEvery) {
            sinceCompaction = 0;
            compact();
          }
        }
      }),
    );
    compact();
    return { left: store.size, floor: store.floor, perSecond: total / ((performance.now() - started) / 1000) };
  } finally {
    await store.close();
  }
}

async function point(
  root: string,
  total: number,
  plan: GrowthPlan,
  progress: (line: string) => void,
): Promise<GrowthPoint> {
  const keys = join(root, `keys-${total}`);
  const dataRoot = join(root, `data-${total}`);
  const { clusterPath } = dealLocalCluster(keys, 4);
  const cluster = loadClusterFile(clusterPath);
  progress(`growth: writing ${total} resources, compacting every ${plan.compactEvery} ...`);
  const filled = await fill(join(dataRoot, 'replica-1'), cluster.id, total, plan);
  progress(`growth: ${total} resources: restarting a replica on the store ...`);
  const local = await startLocalCluster({ dir: keys, dataRoot, indices: [1] });
  try {
    const replica = local.replica(1);
    const restarts: number[] = [];
    for (let run = 0; run < plan.restarts; run++) {
      await replica.kill('SIGKILL');
      const started = performance.now();
      await replica.start();
      restarts.push(performance.now() - started);
    }
    const restartMs = summarise(restarts).median;
    return {
      resourcesEverGranted: total,
      recordsLeft: filled.left,
      floor: filled.floor.toString(),
      storeBytes: statSync(join(dataRoot, 'replica-1', 'data.mdb')).size,
      replicaRssBytes: rssBytes(replica.pid),
      restartMs,
      writesPerSecond: filled.perSecond,
    };
  } finally {
    await local.close();
  }
}

export async function benchGrowth(options: {
  size: BenchSize;
  progress: (line: string) => void;
  report: Record<string, unknown>;
}): Promise<string> {
  const plan = PLANS[options.size];
  const root = mkdtempSync(join(tmpdir(), 'qf-growth-'));
  const points: GrowthPoint[] = [];
  try {
    for (const size of plan.sizes) points.push(await point(root, size, plan, options.progress));
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
  const base = points[0]!;
  const figures: GrowthFigures = {
    liveResources: plan.live,
    points,
    ratios: points.map((p) => ({
      resourcesEverGranted: p.resourcesEverGranted,
      store: p.storeBytes / base.storeBytes,
      rss: p.replicaRssBytes / base.replicaRssBytes,
      restart: p.restartMs / base.restartMs,
    })),
    targets: { storeAndRssWithin: `1.10x of the ${base.resourcesEverGranted} figure`, restartUnderMs: 1_000 },
  };
  options.report.growth = figures;
  const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(2)} MB`;
  const rows = [
    [
      `growth (${plan.live.toLocaleString('en')} live, retention ${plan.live.toLocaleString('en')} grants)`,
      'records left',
      'store',
      'replica RSS',
      'restart',
      'writes/s',
    ],
    ...points.map((p, k) => [
      `${p.resourcesEverGranted.toLocaleString('en')} ever granted`,
      String(p.recordsLeft),
      `${mb(p.storeBytes)} (${figures.ratios[k]!.store.toFixed(2)}x)`,
      `${mb(p.replicaRssBytes)} (${figures.ratios[k]!.rss.toFixed(2)}x)`,
      `${p.restartMs.toFixed(0)} ms`,
      p.writesPerSecond.toFixed(0),
    ]),
    ['target', '', '<= 1.10x', '<= 1.10x', '< 1000 ms', ''],
  ];
  return table(rows);
}
