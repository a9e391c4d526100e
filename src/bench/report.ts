/**
 * What `quorumfence-dev bench` prints: the tables of each section, the crypto
 * floor of one grant, quorumfence beside etcd with the ratios, and issue 13's
 * targets as pass or miss. Pure formatting of figures measured elsewhere.
 */
import type { CryptoFigures } from './crypto.js';
import type { EtcdDriver, EtcdDriverFigures, EtcdFigures } from './etcd.js';
import { postgresRows, type GuardBenchFigures } from './guard.js';
import type { Timing } from './measure.js';
import type { ReplicaBenchFigures } from './replica.js';
import type { LoopRate, SystemFigures } from './system.js';
import type { TransportFloor } from './transport.js';
import { BUCKETS } from './profile.js';

export function ms(value: number): string {
  return value >= 100 ? value.toFixed(0) : value >= 10 ? value.toFixed(1) : value.toFixed(2);
}

export function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => (r[c] ?? '').length)));
  return rows
    .map((r) => r.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))).join('   '))
    .join('\n');
}

export function cryptoTable(figures: CryptoFigures[]): string {
  const rows: string[][] = [['crypto (median ms)', ...figures.map((f) => f.backend)]];
  rows.push(['sign', ...figures.map((f) => ms(f.signMs.median))]);
  rows.push(['verify partial', ...figures.map((f) => ms(f.verifyPartialMs.median))]);
  rows.push(['verify token (decode + pairing)', ...figures.map((f) => ms(f.verifyTokenMs.median))]);
  for (const t of Object.keys(figures[0]!.combineMs))
    rows.push([`combine t = ${t}`, ...figures.map((f) => (f.combineMs[t] ? ms(f.combineMs[t]!.median) : '-'))]);
  for (const k of Object.keys(figures[0]!.verifyTokenBatchMs))
    rows.push([
      `verify token, batches of ${k} (per token)`,
      ...figures.map((f) => (f.verifyTokenBatchMs[k] ? ms(f.verifyTokenBatchMs[k]!.median) : '-')),
    ]);
  // What the floor counts (floorMs): a library's own threads make a call's CPU exceed its wall time.
  const cpu = (timing: Timing | undefined) => (timing?.cpuMean === undefined ? '-' : ms(timing.cpuMean));
  rows.push(['sign, CPU per call (all threads, mean)', ...figures.map((f) => cpu(f.signMs))]);
  rows.push(['verify token, CPU per call (all threads, mean)', ...figures.map((f) => cpu(f.verifyTokenMs))]);
  const firstT = Object.keys(figures[0]!.combineMs)[0]!;
  rows.push([
    `combine t = ${firstT}, CPU per call (all threads, mean)`,
    ...figures.map((f) => cpu(f.combineMs[firstT])),
  ]);
  return table(rows);
}

export const timing = (t: Timing) => `p50 ${ms(t.median)} ms, p99 ${ms(t.p99)} ms`;

export function replicaTable(replica: ReplicaBenchFigures): string {
  const rows = [['one replica, durable grants', 'median/s', 'best/s']];
  for (const g of replica.grants)
    rows.push([`${g.signingWorkers} signing thread(s)`, g.medianPerSecond.toFixed(0), g.bestPerSecond.toFixed(0)]);
  rows.push([
    'signer alone, 2 threads / 1 thread',
    `${replica.signing.medianScaling.toFixed(2)}x`,
    `${replica.signing.bestScaling.toFixed(2)}x`,
  ]);
  rows.push(['signing record alone (records/s)', replica.store.recordsPerSecond.toFixed(0), '']);
  rows.push(['signing record, one write at a time, to flushed (p50 ms)', ms(replica.store.oneWriteMs.median), '']);
  const together = replica.storesTogether;
  rows.push([
    `${together.stores} signing records in ${together.stores} processes, one write each at once: each, all (p50 ms)`,
    `${ms(together.eachMs.median)}, ${ms(together.allMs.median)}`,
    '',
  ]);
  const storm = replica.handshakes;
  if (storm.length > 0)
    rows.push([
      `${storm[0]!.connections} connections authenticating at once: replica CPU per connection (ms), runs`,
      storm.map((h) => ms(h.replicaCpuMsEach)).join(', '),
      '',
    ]);
  return table(rows);
}

export function guardTable(guard: GuardBenchFigures): string {
  return table([
    ['guard', 'figure'],
    ['LMDB, cached token, durable writes/s', guard.lmdbCachedToken.perSecond.toFixed(0)],
    ['first use of a new token: verify', timing(guard.firstUse.verifyMs)],
    ['first use of a new token: whole durable write', timing(guard.firstUse.writeMs)],
    ...postgresRows(guard.postgres),
  ]);
}
const rate = (r: LoopRate) => `${r.perSecond.toFixed(0)}/s`;

/** Partials a grant needs with N replicas (t = 2f+1): what a grant signs when its first t signers all grant. */
export const thresholdOf = (n: number): number => (2 * n + 1) / 3;

/**
 * How the floor counts an operation: `cpu`, the process's CPU per call (every thread: blst splits a pairing over
 * its own threads, so a verify costs more CPU than its wall time, and the figure it is set against is CPU);
 * `wall`, the median wall time per call (the only floor before run 14 of docs/performance.md).
 */
export type FloorClock = 'cpu' | 'wall';

const costOf = (timing: Timing, clock: FloorClock): number =>
  clock === 'cpu' ? (timing.cpuMean ?? timing.median) : timing.median;

/**
 * The crypto floor of one grant, ms: t signs (an acquire asks t replicas first, docs/protocol.md) + combine +
 * client verify + guard verify (no I/O). Figures without CPU per call (written before it was measured) count
 * their medians.
 */
/** One grant's crypto floor counted both ways (floorMs), ms. */
export interface CryptoFloor {
  readonly cpu: number;
  readonly wall: number;
}

export const cryptoFloor = (crypto: CryptoFigures, n: number): CryptoFloor => ({
  cpu: floorMs(crypto, n, 'cpu'),
  wall: floorMs(crypto, n, 'wall'),
});

export function floorMs(crypto: CryptoFigures, n: number, clock: FloorClock = 'cpu'): number {
  const t = thresholdOf(n);
  const combine = crypto.combineMs[String(t)] ?? crypto.combineMs['3']!;
  return t * costOf(crypto.signMs, clock) + costOf(combine, clock) + 2 * costOf(crypto.verifyTokenMs, clock);
}

const LOOP_ROWS = [
  ['one', '1 client (cycles/s)'],
  ['distinct', '16 clients, distinct resources (cycles/s)'],
  ['hot', '16 clients, one hot resource (handoffs/s)'],
] as const;

/** quorumfence beside each etcd driver, both loop kinds; ratios against the gateway column. */
export function comparisonTable(system: SystemFigures | undefined, etcd: EtcdFigures | undefined, n: number): string {
  const drivers = (['gateway', 'grpc'] as const).filter((d) => etcd?.drivers[d]);
  const header = [
    'quorumfence: acquire [+ guarded write] + release | etcd: lock [+ fenced txn] + unlock',
    system ? `quorumfence N=${n}` : '',
    ...drivers.map((d) => (d === 'gateway' ? 'etcd x3 gateway' : 'etcd x3 etcd3/gRPC')),
    system && etcd?.drivers.gateway ? 'qf / gateway' : '',
  ];
  const rows: string[][] = [header];
  const gateway = etcd?.drivers.gateway;
  const line = (label: string, q: string | undefined, e: (d: EtcdDriverFigures) => string, ratio?: number) =>
    rows.push([
      label,
      q ?? '',
      ...drivers.map((d) => e(etcd!.drivers[d]!)),
      ratio === undefined || !Number.isFinite(ratio) ? '' : `${ratio.toFixed(2)}x`,
    ]);
  line(
    'uncontended acquire p50 (ms) | lock + revision',
    system && ms(system.acquireMs.median),
    (d) => ms(d.acquireMs.median),
    system && gateway ? system.acquireMs.median / gateway.acquireMs.median : undefined,
  );
  line(
    '  at the replicas: record write to flush | signing, mean (ms)',
    system && `${ms(system.acquireReplicaMs.flush)} | ${ms(system.acquireReplicaMs.sign)}`,
    () => '',
  );
  line(
    'uncontended acquire p99 (ms)',
    system && ms(system.acquireMs.p99),
    (d) => ms(d.acquireMs.p99),
    system && gateway ? system.acquireMs.p99 / gateway.acquireMs.p99 : undefined,
  );
  for (const kind of ['lockRelease', 'fencedWrite'] as const) {
    rows.push([
      kind === 'lockRelease' ? 'acquire + release' : 'acquire + one fenced write + release',
      '',
      ...drivers.map(() => ''),
      '',
    ]);
    for (const [key, label] of LOOP_ROWS) {
      line(
        `  ${label}`,
        system && rate(system.loops[kind][key]),
        (d) => rate(d.loops[kind][key]),
        system && gateway ? system.loops[kind][key].perSecond / gateway.loops[kind][key].perSecond : undefined,
      );
    }
    line(
      '  partial signatures per grant, all replicas (1 | distinct | hot)',
      system && LOOP_ROWS.map(([key]) => system.loops[kind][key].signaturesPerGrant?.toFixed(2) ?? '-').join(' | '),
      () => '',
    );
    line(
      "  clients' token checks per pairing batch (1 | distinct | hot)",
      system && LOOP_ROWS.map(([key]) => system.loops[kind][key].clientChecksPerBatch?.toFixed(2) ?? '-').join(' | '),
      () => '',
    );
    if (kind === 'fencedWrite')
      line(
        "  guard's token checks per pairing batch (1 | distinct | hot)",
        system && LOOP_ROWS.map(([key]) => system.loops[kind][key].guardChecksPerBatch?.toFixed(2) ?? '-').join(' | '),
        () => '',
      );
    line(
      '  1 client acquire p50 / p99 (ms)',
      system && `${ms(system.loops[kind].one.acquireMs.median)} / ${ms(system.loops[kind].one.acquireMs.p99)}`,
      (d) => `${ms(d.loops[kind].one.acquireMs.median)} / ${ms(d.loops[kind].one.acquireMs.p99)}`,
    );
    line(
      '  hot: wait for the lock p50 / p99 (ms)',
      system && `${ms(system.loops[kind].hot.acquireMs.median)} / ${ms(system.loops[kind].hot.acquireMs.p99)}`,
      (d) => `${ms(d.loops[kind].hot.acquireMs.median)} / ${ms(d.loops[kind].hot.acquireMs.p99)}`,
      system && gateway ? system.loops[kind].hot.acquireMs.p99 / gateway.loops[kind].hot.acquireMs.p99 : undefined,
    );
  }
  line(
    'CPU per cycle, all processes, 16 distinct, fenced write (ms)',
    system && ms(system.cpuPerGrantMs),
    (d) => ms(d.cpuPerCycleMs.etcd + d.cpuPerCycleMs.client),
    system && gateway ? system.cpuPerGrantMs / (gateway.cpuPerCycleMs.etcd + gateway.cpuPerCycleMs.client) : undefined,
  );
  line(
    '  of which servers | client process (ms)',
    system &&
      `${ms(system.cpuBreakdownMs.replicas + system.cpuBreakdownMs.resource)} | ${ms(system.cpuBreakdownMs.client)}`,
    (d) => `${ms(d.cpuPerCycleMs.etcd)} | ${ms(d.cpuPerCycleMs.client)}`,
  );
  const one = system?.cpuOneBreakdownMs;
  line(
    'CPU per cycle, 1 client, fenced write: replicas | resource | client (ms)',
    one && `${ms(one.replicas)} | ${ms(one.resource)} | ${ms(one.client)}`,
    () => '',
  );
  const notes = drivers.map((d) => {
    const f = etcd!.drivers[d]!;
    return `etcd ${d}: ${f.description}; fencing checked before timing: a write with revision ${f.fencing.staleFence} (released) was refused once revision ${f.fencing.currentFence} held the lock`;
  });
  return [table(rows), ...notes].join('\n');
}

/** Each profiled loop: ms per grant per bucket and process kind, then the top functions of each kind. */
export function profileTable(profile: NonNullable<SystemFigures['profile']>): string {
  const parts: string[] = [];
  for (const [name, loopProfile] of [
    ['1 client', profile.one],
    [`${profile.distinct.loop.clients} clients, distinct resources`, profile.distinct],
  ] as const) {
    const kinds = ['replicas', 'resource', 'client'] as const;
    const rows: string[][] = [
      [
        `profile, ${name}, fenced write (${loopProfile.grants} grants, ${loopProfile.loop.perSecond.toFixed(0)}/s under the profiler): CPU ms per grant`,
        ...kinds,
        'all',
      ],
    ];
    for (const bucket of [...BUCKETS, 'total', 'sampled'] as const) {
      const value = (kind: (typeof kinds)[number]) =>
        bucket === 'total'
          ? loopProfile.kinds[kind].totalMsPerGrant
          : bucket === 'sampled'
            ? loopProfile.kinds[kind].sampledMsPerGrant
            : loopProfile.kinds[kind].buckets[bucket];
      rows.push([
        bucket === 'crypto'
          ? 'crypto (sign, verify, pairing)'
          : bucket === 'total'
            ? 'total: CPU per grant from /proc, same loop without the profiler'
            : bucket === 'sampled'
              ? 'samples under the profiler, wall clock, not idle'
              : bucket,
        ...kinds.map((k) => ms(value(k))),
        ms(kinds.reduce((sum, k) => sum + value(k), 0)),
      ]);
    }
    parts.push(table(rows));
    for (const kind of kinds) {
      const top = loopProfile.kinds[kind].top;
      parts.push(
        table([
          [`  top self time, ${kind} (${name})`, 'bucket', 'ms/grant'],
          ...top.map((t) => [`  ${t.fn}`, t.bucket, ms(t.msPerGrant)]),
        ]),
      );
    }
  }
  return parts.join('\n\n');
}

/** The CPU of a grant in the 16-distinct fenced-write loop, beside the crypto floor and the bare wire. */
export function cpuTable(
  system: SystemFigures,
  transport: readonly TransportFloor[],
  floor: CryptoFloor,
  n: number,
  cores: number,
): string {
  const b = system.cpuBreakdownMs;
  return table([
    ['CPU per grant (all processes, 16 distinct clients, fenced write)', 'figure'],
    [`crypto floor: t = ${thresholdOf(n)} signs + combine + 2 token verifies, CPU per call`, `${ms(floor.cpu)} ms`],
    ['  the same, median wall time per call (the floor before run 14)', `${ms(floor.wall)} ms`],
    [`CPU-bound rate on ${cores} cores`, `${((cores * 1000) / floor.cpu).toFixed(0)}/s`],
    [
      `measured: replicas ${ms(b.replicas)} (main threads ${ms(b.replicasMainThread)}) + resource ${ms(b.resource)} (main thread ${ms(b.resourceMainThread)}) + client ${ms(b.client)} (main thread ${ms(b.clientMainThread)})`,
      `${ms(system.cpuPerGrantMs)} ms`,
    ],
    ...transport.map((t) => [
      `bare wire, one request + reply, ${t.connections} connection(s), both ends (x 6 per cycle)`,
      `${ms(t.totalCpuMs)} ms (${ms(6 * t.totalCpuMs)} ms)`,
    ]),
  ]);
}

export function targetTable(targets: readonly TargetRow[]): string {
  return table([
    [
      'target (issue 13; fenced-write loops, etcd = its stronger driver per row)',
      'quorumfence',
      'etcd',
      'ratio',
      'target',
      '',
    ],
    ...targets.map((t) => [
      t.target,
      t.quorumfence,
      t.etcd,
      t.ratio === undefined ? '' : `${t.ratio.toFixed(2)}x`,
      t.wanted,
      t.pass === undefined ? 'n/a' : t.pass ? 'pass' : 'MISS',
    ]),
  ]);
}

export interface TargetRow {
  readonly target: string;
  readonly quorumfence: string;
  readonly etcd: string;
  readonly ratio?: number;
  readonly wanted: string;
  /** Undefined when a side was not measured. */
  readonly pass?: boolean;
}

/**
 * The stronger etcd driver for one figure, and its value: the lower where less is better (latency), the
 * higher where more is (rate). Undefined when no driver was measured.
 */
export function strongerEtcd(
  etcd: Partial<Record<EtcdDriver, EtcdDriverFigures>> | undefined,
  read: (figures: EtcdDriverFigures) => number,
  lowerIsBetter: boolean,
): { driver: EtcdDriver; value: number } | undefined {
  return Object.entries(etcd ?? {})
    .filter((entry): entry is [EtcdDriver, EtcdDriverFigures] => !!entry[1])
    .map(([driver, figures]) => ({ driver, value: read(figures) }))
    .sort((a, b) => (lowerIsBetter ? a.value - b.value : b.value - a.value))[0];
}

/**
 * Issue 13's targets, each with both figures, the ratio and pass or miss. Each row compares against the
 * stronger of the etcd drivers measured for that row (the lower latency, the higher rate): the baseline is
 * the best a user of etcd could run, whichever client that is for the loop.
 */
export function targetRows(
  system: SystemFigures,
  etcd: Partial<Record<EtcdDriver, EtcdDriverFigures>> | undefined,
  floor: CryptoFloor,
): TargetRow[] {
  const loops = system.loops.fencedWrite;
  const rows: TargetRow[] = [];
  const compare = (
    target: string,
    q: number,
    read: (figures: EtcdDriverFigures) => number,
    format: (v: number) => string,
    bound: number,
    atMost: boolean,
  ) => {
    const best = strongerEtcd(etcd, read, atMost);
    const ratio = best === undefined ? undefined : q / best.value;
    rows.push({
      target,
      quorumfence: format(q),
      etcd: best === undefined ? '' : `${format(best.value)} (${best.driver})`,
      ...(ratio === undefined ? {} : { ratio }),
      wanted: `${atMost ? '<=' : '>='} ${bound.toFixed(1)}x`,
      ...(ratio === undefined ? {} : { pass: atMost ? ratio <= bound : ratio >= bound }),
    });
  };
  const perSecond = (v: number) => `${v.toFixed(0)}/s`;
  const msText = (v: number) => `${ms(v)} ms`;
  compare(
    '1 client acquire p50 vs etcd lock + read p50',
    system.acquireMs.median,
    (e) => e.acquireMs.median,
    msText,
    1,
    true,
  );
  compare('1 client cycles/s', loops.one.perSecond, (e) => e.loops.fencedWrite.one.perSecond, perSecond, 1, false);
  compare(
    '16 clients, distinct resources, cycles/s',
    loops.distinct.perSecond,
    (e) => e.loops.fencedWrite.distinct.perSecond,
    perSecond,
    0.8,
    false,
  );
  compare(
    '16 clients, one hot resource, handoffs/s',
    loops.hot.perSecond,
    (e) => e.loops.fencedWrite.hot.perSecond,
    perSecond,
    2,
    false,
  );
  compare(
    'hot resource, p99 wait',
    loops.hot.acquireMs.p99,
    (e) => e.loops.fencedWrite.hot.acquireMs.p99,
    msText,
    1,
    true,
  );
  const overFloor = system.cpuPerGrantMs / floor.cpu;
  const overWallFloor = system.cpuPerGrantMs / floor.wall;
  rows.push({
    target: 'CPU per grant, all processes, vs the crypto floor',
    quorumfence: msText(system.cpuPerGrantMs),
    etcd: `floor ${msText(floor.cpu)} (wall-clock floor ${msText(floor.wall)}: ${overWallFloor.toFixed(2)}x)`,
    ratio: overFloor,
    wanted: '<= 1.5x',
    pass: overFloor <= 1.5,
  });
  return rows;
}
