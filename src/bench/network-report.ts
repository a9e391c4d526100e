/**
 * What `bench --rtt` prints: for each round-trip time, the side-by-side
 * table of `bench system etcd` and issue 31's targets; then one summary
 * across the round trips, as Markdown (docs/performance.md and the README
 * take it as printed). Pure formatting of figures measured elsewhere.
 */
import type { EtcdDriverFigures, EtcdFigures } from './etcd.js';
import type { Failed, LoopSet, Skipped } from './measure.js';
import type { NetworkPoint } from './network-bench.js';
import { comparisonTable, ms, strongerEtcd, table, timing, type TargetRow } from './report.js';
import type { SystemFigures } from './system.js';

/** quorumfence / etcd's stronger client, cycles/s, at least; the hot p99 wait at most etcd's (issue 31). */
export interface NetworkTarget {
  readonly one: number;
  readonly distinct: number;
  readonly hot: number;
  readonly hotP99AtMost?: number;
}

/** Issue 31's targets, by round-trip time in ms; other round trips are measured without one. */
export const NETWORK_TARGETS: Readonly<Record<number, NetworkTarget>> = {
  2: { one: 2.0, distinct: 0.8, hot: 2.5 },
  20: { one: 4.0, distinct: 2.5, hot: 5.0, hotP99AtMost: 1.0 },
};

export const KINDS = [
  ['lockRelease', 'acquire + release'],
  ['fencedWrite', 'acquire + fenced write + release'],
] as const;

type Kind = (typeof KINDS)[number][0];
type Drivers = EtcdFigures['drivers'];

export function ran<T extends object>(side: T | Failed | Skipped | undefined): side is T {
  return side !== undefined && !('failed' in side) && !('skipped' in side);
}

/**
 * One point's rows against etcd's stronger client per row, both loop kinds: the three loops' cycles/s and
 * the hot p99 wait, each with issue 31's target where this round trip has one, and the uncontended acquire
 * p50 (no target).
 */
export function networkTargetRows(system: SystemFigures, etcd: Drivers | undefined, rttMs: number): TargetRow[] {
  const target = NETWORK_TARGETS[rttMs];
  const rows: TargetRow[] = [];
  const row = (
    label: string,
    q: number,
    read: (figures: EtcdDriverFigures) => number,
    lowerIsBetter: boolean,
    format: (value: number) => string,
    bound: number | undefined,
  ) => {
    const best = strongerEtcd(etcd, read, lowerIsBetter);
    const ratio = best === undefined ? undefined : q / best.value;
    rows.push({
      target: label,
      quorumfence: format(q),
      etcd: best === undefined ? '' : `${format(best.value)} (${best.driver})`,
      ...(ratio === undefined ? {} : { ratio }),
      wanted: bound === undefined ? '' : `${lowerIsBetter ? '<=' : '>='} ${bound.toFixed(1)}x`,
      ...(ratio === undefined || bound === undefined ? {} : { pass: lowerIsBetter ? ratio <= bound : ratio >= bound }),
    });
  };
  const perSecond = (v: number) => `${v.toFixed(0)}/s`;
  const msText = (v: number) => `${ms(v)} ms`;
  row(
    'uncontended acquire p50 (etcd: lock + read)',
    system.acquireMs.median,
    (e) => e.acquireMs.median,
    true,
    msText,
    undefined,
  );
  for (const [kind, name] of KINDS) {
    const loops = (figures: { loops: Record<Kind, LoopSet> }) => figures.loops[kind];
    row(
      `${name}: 1 client, cycles/s`,
      loops(system).one.perSecond,
      (e) => loops(e).one.perSecond,
      false,
      perSecond,
      target?.one,
    );
    row(
      `${name}: 16 clients, distinct resources, cycles/s`,
      loops(system).distinct.perSecond,
      (e) => loops(e).distinct.perSecond,
      false,
      perSecond,
      target?.distinct,
    );
    row(
      `${name}: 16 clients, one hot resource, handoffs/s`,
      loops(system).hot.perSecond,
      (e) => loops(e).hot.perSecond,
      false,
      perSecond,
      target?.hot,
    );
    row(
      `${name}: hot, p99 wait`,
      loops(system).hot.acquireMs.p99,
      (e) => loops(e).hot.acquireMs.p99,
      true,
      msText,
      target?.hotP99AtMost,
    );
  }
  return rows;
}

const percent = (share: number) => `${(100 * share).toFixed(0)} %`;

/** The line above each round trip's tables: the delay set and measured, the load, the proxies' CPU. */
export function pointHeading(point: NetworkPoint): string {
  const rtt = point.measuredRttMs;
  const link =
    point.rttMs === 0
      ? `loopback, no proxy (a direct round trip: ${timing(rtt)})`
      : `round trip ${point.rttMs} ms on every link (measured through the proxies: ${timing(rtt)})`;
  const proxy = point.proxy;
  const share = (name: string, load: { coreShare: number } | undefined) =>
    load ? `${percent(load.coreShare)} of a core during ${name}'s runs` : undefined;
  const loads = [share('quorumfence', proxy?.quorumfence), share('etcd', proxy?.etcd)].filter(Boolean);
  return [
    `network, ${link}`,
    `  load average ${point.loadAverage.start.toFixed(1)} at the start, ${point.loadAverage.end.toFixed(1)} at the end`,
    ...(loads.length > 0
      ? [
          `  the proxies' process (on the same cores) used ${loads.join(', ')}; chunks left on average ${ms(proxy!.stats.lateMsSum / Math.max(1, proxy!.stats.chunks))} ms late, at most ${ms(proxy!.stats.lateMsMax)} ms`,
        ]
      : []),
  ].join('\n');
}

/** One round trip's tables: its heading, both sides as `bench system etcd` prints them, and the targets. */
export function pointText(point: NetworkPoint, n: number): string {
  const parts = [pointHeading(point)];
  const side = (name: string, figures: object | undefined) => {
    if (figures && 'failed' in figures) {
      const { code, message } = (figures as Failed).failed;
      parts.push(`${name}: FAILED (${code}): ${message}`);
    } else if (figures && 'skipped' in figures) parts.push(`${name}: skipped, ${(figures as Skipped).skipped}`);
  };
  side('system', point.system);
  side('etcd', point.etcd);
  const system = ran(point.system) ? point.system : undefined;
  const etcd = ran(point.etcd) ? point.etcd : undefined;
  if (system || etcd) parts.push(comparisonTable(system, etcd, n));
  if (system) {
    const rows = networkTargetRows(system, etcd?.drivers, point.rttMs);
    parts.push(
      table([
        [
          `targets (issue 31) at ${point.rttMs === 0 ? 'loopback' : `${point.rttMs} ms`}, etcd = its stronger client per row`,
          'quorumfence',
          'etcd',
          'ratio',
          'target',
          '',
        ],
        ...rows.map((r) => [
          r.target,
          r.quorumfence,
          r.etcd,
          r.ratio === undefined ? '' : `${r.ratio.toFixed(2)}x`,
          r.wanted,
          r.pass === undefined ? '' : r.pass ? 'pass' : 'MISS',
        ]),
      ]),
    );
  }
  return parts.join('\n');
}

/**
 * Across the round trips, one Markdown table per loop kind: each cell quorumfence / etcd's stronger client
 * and the ratio (for the wait, the lower is better), as docs/performance.md and the README show it.
 */
export function networkSummary(points: readonly NetworkPoint[]): string {
  const tables = KINDS.map(([kind, name]) => {
    const lines = [
      `| ${name}, round trip per link (measured p50) | 1 client, cycles/s | 16 clients, distinct resources | 16 clients, one hot resource | hot p99 wait, ms | uncontended acquire p50, ms |`,
      '| --- | --- | --- | --- | --- | --- |',
    ];
    for (const point of points) {
      const rtt = `${point.rttMs === 0 ? '0 (loopback)' : `${point.rttMs} ms`} (${ms(point.measuredRttMs.median)} ms)`;
      if (!ran(point.system)) {
        lines.push(`| ${rtt} | quorumfence did not run | | | | |`);
        continue;
      }
      const system = point.system;
      const drivers = ran(point.etcd) ? point.etcd.drivers : undefined;
      const cell = (
        q: number,
        read: (e: EtcdDriverFigures) => number,
        lowerIsBetter: boolean,
        digits: (v: number) => string,
      ) => {
        const best = strongerEtcd(drivers, read, lowerIsBetter);
        return best === undefined
          ? digits(q)
          : `${digits(q)} / ${digits(best.value)} = ${(q / best.value).toFixed(2)}x`;
      };
      const rate = (v: number) => v.toFixed(0);
      const loops = (figures: { loops: Record<Kind, LoopSet> }) => figures.loops[kind];
      lines.push(
        `| ${rtt} | ${[
          cell(loops(system).one.perSecond, (e) => loops(e).one.perSecond, false, rate),
          cell(loops(system).distinct.perSecond, (e) => loops(e).distinct.perSecond, false, rate),
          cell(loops(system).hot.perSecond, (e) => loops(e).hot.perSecond, false, rate),
          cell(loops(system).hot.acquireMs.p99, (e) => loops(e).hot.acquireMs.p99, true, ms),
          cell(system.acquireMs.median, (e) => e.acquireMs.median, true, ms),
        ].join(' | ')} |`,
      );
    }
    return lines.join('\n');
  });
  return [
    'quorumfence / etcd (its stronger client per cell) = ratio; every link of both systems at the round trip given',
    ...tables,
  ].join('\n\n');
}
