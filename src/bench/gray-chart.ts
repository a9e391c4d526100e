/**
 * The chart `bench --gray` writes next to its JSON (same name, .png; the
 * network chart's style: SVG, rasterised by the system's chromium, the SVG
 * itself without it): per loop, for each fault, quorumfence's faulted /
 * healthy ratio beside etcd's (fault on its leader, and on a follower); the
 * top row cycles/s, the bottom row the cycle p99. Bars start at 1x (no
 * change) on a log scale, so a loss and a gain of the same factor are the
 * same length; a dashed line marks issue 42's bar for quorumfence.
 */
import { GRAY_LOOPS, loopTitle, type EtcdGrayVariant, type GrayBench, type GrayLoopName } from './gray.js';
import type { Failed } from './measure.js';
import { GRAY_FIGURES, GRAY_TARGET, grayRatio, strongerEtcdPair } from './gray-report.js';
import { COLOURS, escape, label, logTicks, writeChart, type ChartSize } from './network-chart.js';
import { ran } from './network-report.js';

export const GRAY_CHART: ChartSize = { width: 960, height: 700 };

export const GRAY_SYSTEMS = ['quorumfence', 'etcdLeader', 'etcdFollower'] as const;
export type GraySystem = (typeof GRAY_SYSTEMS)[number];

export const GRAY_COLOURS: Record<GraySystem, string> = {
  quorumfence: COLOURS.quorumfence,
  etcdLeader: COLOURS.etcd,
  etcdFollower: '#f2b77e',
};

const NAMES: Record<GraySystem, string> = {
  quorumfence: 'quorumfence, one replica faulty',
  etcdLeader: 'etcd, fault on its leader',
  etcdFollower: 'etcd, fault on a follower',
};

const ROWS = [
  {
    metric: 'cycles',
    title: 'cycles/s, faulted / healthy (log)',
    top: 86,
    bottom: 246,
    target: GRAY_TARGET.cyclesAtLeast,
  },
  { metric: 'p99', title: 'cycle p99, faulted / healthy (log)', top: 356, bottom: 516, target: GRAY_TARGET.p99AtMost },
] as const;
const PANEL_LEFTS = [70, 370, 670] as const;
const PANEL_WIDTH = 260;

/** One bar: a system's faulted / healthy ratio for one fault, loop and figure. */
export interface GrayBar {
  readonly metric: 'cycles' | 'p99';
  readonly loop: GrayLoopName;
  /** Index of the fault in the run. */
  readonly fault: number;
  readonly system: GraySystem;
  /** undefined where that system did not run the fault (etcd: byzantine-slow, slow-flush) or a figure is missing. */
  readonly ratio: number | undefined;
}

/** Every bar the chart draws, from the figures (etcd: its stronger client per figure, as the tables). */
export function grayBars(bench: GrayBench): GrayBar[] {
  const bars: GrayBar[] = [];
  for (const row of ROWS) {
    const figure = GRAY_FIGURES.find((f) => f.key === row.metric)!;
    for (const loop of GRAY_LOOPS)
      bench.faults.forEach((f, fault) => {
        const q = ran(f.quorumfence) ? f.quorumfence : undefined;
        const etcd = ran(f.etcd) ? f.etcd : undefined;
        const etcdRatio = (variant: EtcdGrayVariant | Failed) => {
          if (!ran(variant)) return undefined;
          const pair = strongerEtcdPair(variant, loop, figure);
          return pair ? grayRatio(pair.faulted, pair.healthy) : undefined;
        };
        const ratios: Record<GraySystem, number | undefined> = {
          quorumfence: q
            ? grayRatio(figure.read(q.loops[loop].faulted.rate), figure.read(q.loops[loop].healthy.rate))
            : undefined,
          etcdLeader: etcd ? etcdRatio(etcd.leader) : undefined,
          etcdFollower: etcd ? etcdRatio(etcd.follower) : undefined,
        };
        for (const system of GRAY_SYSTEMS)
          bars.push({ metric: row.metric, loop, fault, system, ratio: ratios[system] });
      });
  }
  return bars;
}

/** Where a bar was drawn, in the SVG's user units: a point inside it (the browser test reads the pixel there). */
export interface GrayMarker {
  readonly bar: GrayBar;
  readonly x: number;
  readonly y: number;
}

/** The chart's SVG, and where each drawn bar lies. */
export function grayChartSvg(
  bench: GrayBench,
  caption: string,
  clients: number,
): { svg: string; markers: GrayMarker[] } {
  const bars = grayBars(bench);
  const parts: string[] = [];
  const markers: GrayMarker[] = [];
  const text = (x: number, y: number, content: string, attrs = '') =>
    parts.push(`<text x="${x}" y="${y}" ${attrs}>${escape(content)}</text>`);
  const faults = bench.faults.map((f) => f.fault);
  for (const row of ROWS) {
    const mine = bars.filter((b) => b.metric === row.metric);
    const values = mine.flatMap((b) => (b.ratio !== undefined && b.ratio > 0 ? [b.ratio] : []));
    // 1x (no change) and the target always in range; a ratio of 0 (nothing done) is drawn at the bottom.
    const { from, to, ticks } = logTicks(Math.min(0.5, row.target, ...values), Math.max(2, row.target, ...values));
    const y = (v: number) =>
      row.bottom -
      ((Math.log10(Math.max(v, from)) - Math.log10(from)) / Math.log10(to / from)) * (row.bottom - row.top);
    text(PANEL_LEFTS[0], row.top - 28, row.title, 'font-weight="bold"');
    GRAY_LOOPS.forEach((loop, p) => {
      const left = PANEL_LEFTS[p]!;
      const right = left + PANEL_WIDTH;
      text(
        (left + right) / 2,
        row.top - 2,
        loopTitle(loop, clients),
        'text-anchor="middle" fill="#555" font-size="12"',
      );
      parts.push(
        `<rect x="${left}" y="${row.top}" width="${PANEL_WIDTH}" height="${row.bottom - row.top}" fill="none" stroke="#999"/>`,
      );
      for (const tick of ticks) {
        parts.push(`<line x1="${left}" x2="${right}" y1="${y(tick)}" y2="${y(tick)}" stroke="#e4e4e4"/>`);
        if (p === 0) text(left - 6, y(tick) + 4, `${label(tick)}x`, 'text-anchor="end"');
      }
      parts.push(`<line x1="${left}" x2="${right}" y1="${y(1)}" y2="${y(1)}" stroke="#777"/>`);
      parts.push(
        `<line x1="${left}" x2="${right}" y1="${y(row.target)}" y2="${y(row.target)}" stroke="${COLOURS.quorumfence}" stroke-dasharray="6 4"/>`,
      );
      const slot = PANEL_WIDTH / Math.max(1, faults.length);
      const barWidth = Math.min(18, slot / 4);
      faults.forEach((name, f) => {
        const centre = left + (f + 0.5) * slot;
        const lx = centre;
        const ly = row.bottom + 14;
        parts.push(
          `<text x="${lx}" y="${ly}" text-anchor="end" font-size="11" transform="rotate(-30 ${lx} ${ly})">${escape(name)}</text>`,
        );
        GRAY_SYSTEMS.forEach((system, s) => {
          const bar = mine.find((b) => b.loop === loop && b.fault === f && b.system === system)!;
          const x0 = centre + (s - 1.5) * barWidth;
          // Not run (etcd has no Byzantine or slow-flush counterpart), or no figure: no bar.
          if (bar.ratio === undefined) return;
          // At least 4 units tall, so a ratio near 1x still shows its colour.
          let top = Math.min(y(1), y(bar.ratio));
          let height = Math.abs(y(bar.ratio) - y(1));
          if (height < 4) {
            top = y(1) - 2;
            height = 4;
          }
          parts.push(
            `<rect x="${x0.toFixed(1)}" y="${top.toFixed(1)}" width="${(barWidth - 1).toFixed(1)}" height="${height.toFixed(1)}" fill="${GRAY_COLOURS[system]}"/>`,
          );
          markers.push({ bar, x: x0 + (barWidth - 1) / 2, y: top + height / 2 });
        });
      });
    });
  }
  const legendY = GRAY_CHART.height - 40;
  const legend: [string, string, string][] = [
    ...GRAY_SYSTEMS.map((system): [string, string, string] => [GRAY_COLOURS[system], '', NAMES[system]]),
    [
      COLOURS.quorumfence,
      '6 4',
      `issue 42: >= ${GRAY_TARGET.cyclesAtLeast}x cycles/s, <= ${GRAY_TARGET.p99AtMost}x p99`,
    ],
  ];
  legend.forEach(([colour, dash, name], k) => {
    const lx = 70 + (k % 2) * 440;
    const ly = legendY - (k < 2 ? 22 : 0);
    parts.push(
      dash
        ? `<line x1="${lx}" x2="${lx + 30}" y1="${ly - 4}" y2="${ly - 4}" stroke="${colour}" stroke-width="2" stroke-dasharray="${dash}"/>`
        : `<rect x="${lx}" y="${ly - 12}" width="30" height="12" fill="${colour}"/>`,
    );
    text(lx + 38, ly, name);
  });
  text(
    70,
    GRAY_CHART.height - 12,
    'no bar: not run (etcd has no counterpart of byzantine-slow or slow-flush) or no figure',
    'fill="#555" font-size="12"',
  );
  const svg = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${GRAY_CHART.width}" height="${GRAY_CHART.height}" viewBox="0 0 ${GRAY_CHART.width} ${GRAY_CHART.height}" font-family="sans-serif" font-size="13" fill="#222">`,
    `<rect width="${GRAY_CHART.width}" height="${GRAY_CHART.height}" fill="#fff"/>`,
    `<text x="70" y="26" font-size="15" font-weight="bold">${escape(`one node faulty, round trip ${bench.rttMs} ms on every link: each system against its own healthy run`)}</text>`,
    `<text x="70" y="44" fill="#555">${escape(caption)}</text>`,
    ...parts,
    '</svg>',
  ].join('\n');
  return { svg, markers };
}

/**
 * Writes the chart beside the JSON (`<json without .json>.png`, or `.svg` when chromium is missing or fails,
 * saying why), as the network chart: a --gray run draws no network chart. Returns the file and a line for the
 * table.
 */
export async function writeGrayChart(
  jsonFile: string,
  bench: GrayBench,
  caption: string,
  clients: number,
): Promise<{ file: string; line: string }> {
  return writeChart(jsonFile.replace(/\.json$/, ''), grayChartSvg(bench, caption, clients).svg, GRAY_CHART);
}
