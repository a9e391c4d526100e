/**
 * What `bench --gray` prints: for each fault, one Markdown table with every
 * loop's figures healthy and faulted, as a ratio to the same system's healthy
 * run, and quorumfence / etcd; then one summary across the faults
 * (docs/performance.md's "Gray faults" and the README take it as printed).
 * Pure formatting of figures measured in gray.ts.
 */
import type { EtcdDriver } from './etcd.js';
import {
  GRAY_LOOPS,
  loopTitle,
  type EtcdGray,
  type EtcdGrayLoop,
  type EtcdGrayVariant,
  type GrayBench,
  type GrayFaultFigures,
  type GrayFaultKind,
  type GrayLoopName,
  type Paired,
  type QuorumfenceGray,
  type QuorumfenceGrayLoop,
} from './gray.js';
import type { Failed, LoopRate, Skipped } from './measure.js';
import { ran } from './network-report.js';
import { ms, timing } from './report.js';

/**
 * Issue 42's bar for quorumfence with one replica of four faulty: at least this share of its healthy cycles/s
 * in every loop, and a cycle p99 at most this multiple of healthy; for the faults the issue names.
 */
export const GRAY_TARGET = { cyclesAtLeast: 0.9, p99AtMost: 1.5 } as const;
export const GRAY_TARGET_FAULTS: ReadonlySet<GrayFaultKind> = new Set(['slow-link', 'hung', 'byzantine-slow']);

/** One figure of a loop: how it is read, whether lower is better, how it prints. */
export interface GrayFigure {
  readonly key: 'cycles' | 'p50' | 'p99' | 'waitP99';
  readonly label: string;
  readonly read: (rate: LoopRate) => number;
  readonly lowerIsBetter: boolean;
  readonly format: (value: number) => string;
}

const number = (value: number, format: (v: number) => string) => (Number.isFinite(value) ? format(value) : '-');

export const GRAY_FIGURES: readonly GrayFigure[] = [
  { key: 'cycles', label: 'cycles/s', read: (r) => r.perSecond, lowerIsBetter: false, format: (v) => v.toFixed(1) },
  { key: 'p50', label: 'cycle p50, ms', read: (r) => r.cycleMs.median, lowerIsBetter: true, format: ms },
  { key: 'p99', label: 'cycle p99, ms', read: (r) => r.cycleMs.p99, lowerIsBetter: true, format: ms },
  { key: 'waitP99', label: 'p99 wait, ms', read: (r) => r.acquireMs.p99, lowerIsBetter: true, format: ms },
];

/** The figures a loop's rows show: the wait only where there is one to wait for (the hot loop). */
export function figuresOf(loop: GrayLoopName): readonly GrayFigure[] {
  return GRAY_FIGURES.filter((f) => f.key !== 'waitP99' || loop === 'hot');
}

/** faulted / healthy; undefined when either is not a number or healthy is 0. */
export function grayRatio(faulted: number, healthy: number): number | undefined {
  return Number.isFinite(faulted) && Number.isFinite(healthy) && healthy !== 0 ? faulted / healthy : undefined;
}

const times = (ratio: number | undefined) => (ratio === undefined ? '-' : `${ratio.toFixed(2)}x`);

/** Whether a quorumfence ratio meets issue 42's bar (undefined where the issue sets none). */
export function grayPass(
  kind: GrayFaultKind,
  figure: GrayFigure['key'],
  ratio: number | undefined,
): boolean | undefined {
  if (!GRAY_TARGET_FAULTS.has(kind) || ratio === undefined) return undefined;
  if (figure === 'cycles') return ratio >= GRAY_TARGET.cyclesAtLeast;
  if (figure === 'p99') return ratio <= GRAY_TARGET.p99AtMost;
  return undefined;
}

/**
 * Of an etcd variant's clients, the one whose faulted figure is the stronger (etcd's best case, as the
 * network bench compares), with its healthy and faulted values; a figure that is not a number counts as worst.
 */
export function strongerEtcdPair(
  variant: EtcdGrayVariant,
  loop: GrayLoopName,
  figure: GrayFigure,
): { driver: EtcdDriver; healthy: number; faulted: number } | undefined {
  const pairs = Object.entries(variant.drivers)
    .filter((entry): entry is [EtcdDriver, Readonly<Record<GrayLoopName, Paired<EtcdGrayLoop>>>] => !!entry[1])
    .map(([driver, loops]) => ({
      driver,
      healthy: figure.read(loops[loop].healthy.rate),
      faulted: figure.read(loops[loop].faulted.rate),
    }));
  const worst = figure.lowerIsBetter ? Number.POSITIVE_INFINITY : Number.NEGATIVE_INFINITY;
  const score = (v: number) => (Number.isFinite(v) ? v : worst);
  return pairs.sort((a, b) =>
    figure.lowerIsBetter ? score(a.faulted) - score(b.faulted) : score(b.faulted) - score(a.faulted),
  )[0];
}

type Side<T> = T | Failed | Skipped | undefined;

function sideNote(name: string, side: Side<object>): string | undefined {
  if (side === undefined) return undefined;
  if ('failed' in side) return `${name}: FAILED (${(side as Failed).failed.code}): ${(side as Failed).failed.message}`;
  if ('skipped' in side) return `${name}: skipped, ${(side as Skipped).skipped}`;
  return undefined;
}

const etcdVariants = (etcd: Side<EtcdGray>) =>
  ran(etcd)
    ? { leader: ran(etcd.leader) ? etcd.leader : undefined, follower: ran(etcd.follower) ? etcd.follower : undefined }
    : {};

/** The quorumfence cell: healthy → faulted = ratio, and pass/MISS where issue 42 sets a bar. */
function quorumfenceCell(q: QuorumfenceGray, kind: GrayFaultKind, loop: GrayLoopName, figure: GrayFigure): string {
  const { healthy, faulted } = q.loops[loop];
  const h = figure.read(healthy.rate);
  const f = figure.read(faulted.rate);
  const ratio = grayRatio(f, h);
  const pass = grayPass(kind, figure.key, ratio);
  return `${number(h, figure.format)} → ${number(f, figure.format)} = ${times(ratio)}${pass === undefined ? '' : pass ? ' pass' : ' MISS'}`;
}

function etcdCell(variant: EtcdGrayVariant | undefined, loop: GrayLoopName, figure: GrayFigure): string {
  const pair = variant && strongerEtcdPair(variant, loop, figure);
  if (!pair) return '';
  return `${number(pair.healthy, figure.format)} → ${number(pair.faulted, figure.format)} = ${times(grayRatio(pair.faulted, pair.healthy))} (${pair.driver})`;
}

/** quorumfence's faulted figure over etcd's stronger faulted one (for a latency, the lower is better). */
function versus(
  q: QuorumfenceGray,
  variant: EtcdGrayVariant | undefined,
  loop: GrayLoopName,
  figure: GrayFigure,
): string {
  const pair = variant && strongerEtcdPair(variant, loop, figure);
  return pair ? times(grayRatio(figure.read(q.loops[loop].faulted.rate), pair.faulted)) : '';
}

/** What shows the fault acted, per system, as lines under the table. */
/** `r1 r2 r3 r4 | clients | proxies`, ms per cycle ('?' where a replica could not be read). */
function cpuLine(cpu: QuorumfenceGrayLoop['cpuMsPerCycle']): string {
  const replicas = cpu.replicas.map((x) => (x === null ? '?' : x.toFixed(1))).join(' ');
  const busy = cpu.machineBusy === null ? '' : `, machine ${Math.round(100 * cpu.machineBusy)}% busy`;
  return `${replicas} | ${cpu.clients.toFixed(1)} | ${cpu.proxies.toFixed(1)}${busy}`;
}

function evidence(figures: GrayFaultFigures): string[] {
  const lines: string[] = [];
  const q = ran(figures.quorumfence) ? figures.quorumfence : undefined;
  if (q) {
    const parts = GRAY_LOOPS.map((loop) => {
      const { healthy, faulted } = q.loops[loop];
      const gray = (x: number | null) => (x === null ? 'not read' : x.toFixed(2));
      const extra = [
        faulted.grayFlushMs === undefined
          ? ''
          : `, its mean flush ${ms(healthy.grayFlushMs ?? NaN)} → ${ms(faulted.grayFlushMs)} ms`,
        faulted.slowedAnswers === undefined ? '' : `, ${faulted.slowedAnswers} answers delayed`,
        faulted.stopped === undefined ? '' : faulted.stopped ? ', seen stopped' : ', NOT seen stopped',
      ].join('');
      return `${loop} ${gray(healthy.partialsPerCycle.gray)} → ${gray(faulted.partialsPerCycle.gray)} (all ${healthy.partialsPerCycle.all.toFixed(2)} → ${faulted.partialsPerCycle.all.toFixed(2)})${extra}`;
    });
    lines.push(`quorumfence replica ${q.grayReplica}'s partials per cycle, healthy → faulted: ${parts.join('; ')}`);
    const cpu = GRAY_LOOPS.map((loop) => {
      const { healthy, faulted } = q.loops[loop];
      return `${loop} ${cpuLine(healthy.cpuMsPerCycle)} → ${cpuLine(faulted.cpuMsPerCycle)}`;
    });
    const counts = (c: Readonly<Record<string, number>>) =>
      Object.entries(c)
        .filter(([, v]) => v >= 0.005)
        .map(([k, v]) => `${k} ${v.toFixed(2)}`)
        .join(' ') || 'none';
    const asked = GRAY_LOOPS.map((loop) => {
      const { healthy, faulted } = q.loops[loop];
      return `${loop} ${counts(healthy.requestsPerCycle)} → ${counts(faulted.requestsPerCycle)} (refusals ${counts(healthy.refusalsPerCycle)} → ${counts(faulted.refusalsPerCycle)})`;
    });
    lines.push(`quorumfence requests per cycle at the replicas read, healthy → faulted: ${asked.join('; ')}`);
    lines.push(
      `quorumfence CPU ms per cycle (replicas each | clients | proxies), healthy → faulted: ${cpu.join('; ')}`,
    );
  }
  const { leader, follower } = etcdVariants(figures.etcd);
  for (const variant of [leader, follower]) {
    if (!variant) continue;
    const runs = Object.values(variant.drivers).flatMap((loops) =>
      loops ? GRAY_LOOPS.map((loop) => loops[loop].faulted) : [],
    );
    const counting = [...new Set(runs.map((r) => r.leaderWhenCounting ?? 'none agreed'))].join(', ');
    const atEnd = [...new Set(runs.map((r) => r.leaderAtEnd ?? 'none agreed'))].join(', ');
    const retried = runs.reduce((sum, r) => sum + r.retried, 0);
    const dialed = runs.flatMap((r) => (r.dialedByFaulted === undefined ? [] : [r.dialedByFaulted]));
    const stopped = runs.flatMap((r) => (r.stopped === undefined ? [] : [r.stopped]));
    lines.push(
      `etcd, fault on ${variant.faulted} (leadership moved to ${variant.leader} before each run, ${variant.leaderMoves} move(s) needed; clients on ${variant.clientsOn.join(', ')}): leader when counting began ${counting}, at the end ${atEnd}; ${retried} cycle(s) retried` +
        (dialed.length > 0 ? `; its own peer connections slowed: ${Math.min(...dialed)}-${Math.max(...dialed)}` : '') +
        (stopped.length > 0 ? `; ${stopped.every(Boolean) ? 'seen stopped' : 'NOT always seen stopped'}` : ''),
    );
  }
  return lines;
}

/** One fault's table (Markdown) with its heading and evidence lines. */
export function grayFaultText(figures: GrayFaultFigures, clients: number): string {
  const q = ran(figures.quorumfence) ? figures.quorumfence : undefined;
  const { leader, follower } = etcdVariants(figures.etcd);
  const heading = [
    `gray fault ${figures.fault}: ${figures.emulates}`,
    ...[
      sideNote('quorumfence', figures.quorumfence),
      sideNote('etcd', figures.etcd),
      ...(ran(figures.etcd)
        ? [sideNote('etcd (leader)', figures.etcd.leader), sideNote('etcd (follower)', figures.etcd.follower)]
        : []),
    ].filter((line): line is string => line !== undefined),
  ];
  if (!q && !leader && !follower) return heading.join('\n');
  const target = GRAY_TARGET_FAULTS.has(figures.kind)
    ? ` (issue 42: cycles/s >= ${GRAY_TARGET.cyclesAtLeast}x, cycle p99 <= ${GRAY_TARGET.p99AtMost}x)`
    : '';
  // Each system's columns only where it ran this fault; quorumfence / etcd only where both did.
  const withEtcd = leader !== undefined || follower !== undefined;
  const row = (cells: { q: string; leader: string; follower: string; versus: string }, loop: string, figure: string) =>
    `| ${[
      loop,
      figure,
      ...(q ? [cells.q] : []),
      ...(withEtcd ? [cells.leader, cells.follower] : []),
      ...(q && withEtcd ? [cells.versus] : []),
    ].join(' | ')} |`;
  const lines = [
    row(
      {
        q: `quorumfence, replica ${q?.grayReplica ?? '?'} faulty: healthy → faulted${target}`,
        leader: `etcd, fault on its leader${leader ? ` (${leader.faulted})` : ''}`,
        follower: `etcd, fault on a follower${follower ? ` (${follower.faulted})` : ''}`,
        versus: 'quorumfence / etcd, faulted (leader, follower)',
      },
      'loop',
      'figure',
    ),
    row({ q: '---', leader: '---', follower: '---', versus: '---' }, '---', '---'),
  ];
  for (const loop of GRAY_LOOPS)
    for (const figure of figuresOf(loop))
      lines.push(
        row(
          {
            q: q ? quorumfenceCell(q, figures.kind, loop, figure) : '',
            leader: etcdCell(leader, loop, figure),
            follower: etcdCell(follower, loop, figure),
            versus: q
              ? [versus(q, leader, loop, figure), versus(q, follower, loop, figure)].filter(Boolean).join(', ')
              : '',
          },
          loopTitle(loop, clients),
          figure.label,
        ),
      );
  return [...heading, '', ...lines, '', ...evidence(figures)].join('\n');
}

/** The line above the tables: the network, the settling time, the load. */
export function grayHeading(bench: GrayBench): string {
  return [
    `gray faults, round trip ${bench.rttMs} ms on every link (measured through the proxies: ${timing(bench.measuredRttMs)}); each fault begins after the warm-up and is counted from ${bench.settleMs} ms later`,
    `  load average ${bench.loadAverage.start.toFixed(1)} at the start, ${bench.loadAverage.end.toFixed(1)} at the end`,
  ].join('\n');
}

/**
 * Across the faults, one Markdown table: per fault and loop, each system's faulted / healthy cycles/s and
 * cycle p99 (etcd: its stronger client), with issue 42's pass/MISS for quorumfence, and quorumfence / etcd
 * (fault on the leader) in faulted cycles/s.
 */
export function graySummary(bench: GrayBench, clients: number): string {
  const [cycles, , p99] = GRAY_FIGURES;
  // A system's columns only when the run asked for it (the sections named); quorumfence / etcd only for both.
  const withQuorumfence = bench.faults.some((f) => f.quorumfence !== undefined);
  const withEtcd = bench.faults.some((f) => f.etcd !== undefined);
  const row = (cells: { q: string; leader: string; follower: string; versus: string }, fault: string, loop: string) =>
    `| ${[
      fault,
      loop,
      ...(withQuorumfence ? [cells.q] : []),
      ...(withEtcd ? [cells.leader, cells.follower] : []),
      ...(withQuorumfence && withEtcd ? [cells.versus] : []),
    ].join(' | ')} |`;
  const lines = [
    row(
      {
        q: 'quorumfence, faulted / healthy: cycles/s, cycle p99',
        leader: 'etcd, fault on its leader: cycles/s, cycle p99',
        follower: 'etcd, fault on a follower: cycles/s, cycle p99',
        versus: 'quorumfence / etcd (leader), faulted cycles/s',
      },
      'gray fault (one node)',
      'loop',
    ),
    row({ q: '---', leader: '---', follower: '---', versus: '---' }, '---', '---'),
  ];
  for (const figures of bench.faults) {
    const q = ran(figures.quorumfence) ? figures.quorumfence : undefined;
    const { leader, follower } = etcdVariants(figures.etcd);
    const etcdWhy = ran(figures.etcd) ? '' : figures.etcd && 'skipped' in figures.etcd ? 'n/a' : '';
    for (const loop of GRAY_LOOPS) {
      const qCell = () => {
        if (!q) return figures.quorumfence ? 'did not run' : '';
        const pair = (figure: typeof cycles) => {
          const ratio = grayRatio(figure!.read(q.loops[loop].faulted.rate), figure!.read(q.loops[loop].healthy.rate));
          const pass = grayPass(figures.kind, figure!.key, ratio);
          return `${times(ratio)}${pass === undefined ? '' : pass ? ' pass' : ' MISS'}`;
        };
        return `${pair(cycles)}, ${pair(p99)}`;
      };
      const eCell = (variant: EtcdGrayVariant | undefined) => {
        if (!variant) return etcdWhy;
        const ratio = (figure: typeof cycles) => {
          const pair = strongerEtcdPair(variant, loop, figure!);
          return pair ? times(grayRatio(pair.faulted, pair.healthy)) : '-';
        };
        return `${ratio(cycles)}, ${ratio(p99)}`;
      };
      lines.push(
        row(
          {
            q: qCell(),
            leader: eCell(leader),
            follower: eCell(follower),
            versus: q ? versus(q, leader, loop, cycles!) : '',
          },
          figures.fault,
          loopTitle(loop, clients),
        ),
      );
    }
  }
  return [
    'each system faulted / its own healthy run, same invocation, same network (etcd: its stronger client per figure)',
    lines.join('\n'),
  ].join('\n\n');
}
