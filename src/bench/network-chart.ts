/**
 * The chart `bench --rtt` writes next to its JSON: cycles/s of the three
 * acquire + release loops, and the uncontended acquire p50, against the
 * round-trip time, quorumfence beside etcd's stronger client at each point;
 * both axes' values on a log scale, the round trips evenly spaced. It is an
 * SVG (a pure function of the figures), rasterised to PNG by the headless
 * chromium the browser tests use; without chromium the bench writes the SVG
 * and says so.
 */
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import type { EtcdDriverFigures } from './etcd.js';
import type { NetworkPoint } from './network-bench.js';
import { ran } from './network-report.js';
import { strongerEtcd } from './report.js';

export const CHART = { width: 960, height: 460, scale: 2 } as const;
export const COLOURS = { quorumfence: '#1f5fbf', etcd: '#d96a00' } as const;
const LOOPS = [
  ['one', '1 client', ''],
  ['distinct', '16 clients, distinct resources', '9 5'],
  ['hot', '16 clients, one hot resource', '2 4'],
] as const;
const PANELS = [
  { key: 'rate', title: 'acquire + release, cycles/s (log)', left: 70, right: 470 },
  { key: 'latency', title: 'uncontended acquire p50, ms (log)', left: 560, right: 940 },
] as const;
const TOP = 86;
const BOTTOM = 360;

export interface Series {
  readonly panel: 'rate' | 'latency';
  readonly system: 'quorumfence' | 'etcd';
  /** Which loop (the rate panel), as a dash pattern; '' for the latency panel's solid lines. */
  readonly dash: string;
  readonly label: string;
  /** One value per point, undefined where that side did not run. */
  readonly values: readonly (number | undefined)[];
}

/** The lines to draw: each side's three loops' cycles/s, and its uncontended acquire p50. */
export function chartSeries(points: readonly NetworkPoint[]): Series[] {
  const etcdValue = (point: NetworkPoint, read: (e: EtcdDriverFigures) => number, lower: boolean) =>
    ran(point.etcd) ? strongerEtcd(point.etcd.drivers, read, lower)?.value : undefined;
  const series: Series[] = [];
  for (const [loop, label, dash] of LOOPS) {
    series.push({
      panel: 'rate',
      system: 'quorumfence',
      dash,
      label,
      values: points.map((p) => (ran(p.system) ? p.system.loops.lockRelease[loop].perSecond : undefined)),
    });
    series.push({
      panel: 'rate',
      system: 'etcd',
      dash,
      label,
      values: points.map((p) => etcdValue(p, (e) => e.loops.lockRelease[loop].perSecond, false)),
    });
  }
  series.push({
    panel: 'latency',
    system: 'quorumfence',
    dash: '',
    label: 'acquire p50',
    values: points.map((p) => (ran(p.system) ? p.system.acquireMs.median : undefined)),
  });
  series.push({
    panel: 'latency',
    system: 'etcd',
    dash: '',
    label: 'lock + read p50',
    values: points.map((p) => etcdValue(p, (e) => e.acquireMs.median, true)),
  });
  return series;
}

/** Ticks 1, 2, 5 x 10^k from the decade at or below `low` to the one at or above `high`. */
export function logTicks(low: number, high: number): { from: number; to: number; ticks: number[] } {
  const from = 10 ** Math.floor(Math.log10(low));
  // At least one decade, also when every value is the same power of ten.
  const to = Math.max(10 ** Math.ceil(Math.log10(high)), from * 10);
  const ticks: number[] = [];
  for (let decade = from; decade < to * 1.01; decade *= 10)
    for (const step of [1, 2, 5]) if (decade * step <= to * 1.01) ticks.push(decade * step);
  return { from, to, ticks };
}

export const escape = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;');
export const label = (value: number) => (value >= 1000 ? `${value / 1000}k` : String(Number(value.toPrecision(3))));

/** A marker: where a value was drawn, in the SVG's user units. */
export interface Marker {
  readonly series: Series;
  readonly point: number;
  readonly x: number;
  readonly y: number;
}

/** The chart's SVG, and where each value's marker lies (the browser test reads the pixels there). */
export function networkChartSvg(
  points: readonly NetworkPoint[],
  caption: string,
  replicas: number,
): { svg: string; markers: Marker[] } {
  const series = chartSeries(points);
  const parts: string[] = [];
  const markers: Marker[] = [];
  const text = (x: number, y: number, content: string, attrs = '') =>
    parts.push(`<text x="${x}" y="${y}" ${attrs}>${escape(content)}</text>`);
  for (const panel of PANELS) {
    const mine = series.filter((s) => s.panel === panel.key);
    const values = mine.flatMap((s) => s.values.filter((v): v is number => v !== undefined && v > 0));
    // Nothing measured (every side failed): an empty frame over one decade.
    const { from, to, ticks } =
      values.length > 0 ? logTicks(Math.min(...values), Math.max(...values)) : logTicks(1, 10);
    const y = (v: number) => BOTTOM - ((Math.log10(v) - Math.log10(from)) / Math.log10(to / from)) * (BOTTOM - TOP);
    const x = (i: number) => panel.left + ((i + 0.5) * (panel.right - panel.left)) / points.length;
    text(panel.left, TOP - 14, panel.title, 'font-weight="bold"');
    parts.push(
      `<rect x="${panel.left}" y="${TOP}" width="${panel.right - panel.left}" height="${BOTTOM - TOP}" fill="none" stroke="#999"/>`,
    );
    for (const tick of ticks) {
      parts.push(`<line x1="${panel.left}" x2="${panel.right}" y1="${y(tick)}" y2="${y(tick)}" stroke="#e4e4e4"/>`);
      text(panel.left - 6, y(tick) + 4, label(tick), 'text-anchor="end"');
    }
    points.forEach((p, i) =>
      text(x(i), BOTTOM + 18, p.rttMs === 0 ? 'loopback' : `${p.rttMs} ms`, 'text-anchor="middle"'),
    );
    text((panel.left + panel.right) / 2, BOTTOM + 38, 'round trip per link', 'text-anchor="middle" fill="#555"');
    for (const s of mine) {
      const drawn = s.values.flatMap((v, i) => (v !== undefined && v > 0 ? [{ i, v, px: x(i), py: y(v) }] : []));
      if (drawn.length > 1)
        parts.push(
          `<polyline fill="none" stroke="${COLOURS[s.system]}" stroke-width="2.5"${s.dash ? ` stroke-dasharray="${s.dash}"` : ''} points="${drawn.map((d) => `${d.px.toFixed(1)},${d.py.toFixed(1)}`).join(' ')}"/>`,
        );
      for (const d of drawn) {
        parts.push(`<circle cx="${d.px.toFixed(1)}" cy="${d.py.toFixed(1)}" r="4.5" fill="${COLOURS[s.system]}"/>`);
        markers.push({ series: s, point: d.i, x: d.px, y: d.py });
      }
    }
  }
  const legendY = BOTTOM + 64;
  const legend: [string, string, string][] = [
    [COLOURS.quorumfence, '', `quorumfence, N = ${replicas}`],
    [COLOURS.etcd, '', 'etcd x3, its stronger client at each point'],
    ...LOOPS.map(([, name, dash]): [string, string, string] => ['#444', dash, name]),
  ];
  // The two systems on the first line, the three loops on the second.
  legend.forEach(([colour, dash, name], k) => {
    const lx = 70 + (k < 2 ? k : k - 2) * 300;
    const ly = legendY + (k < 2 ? 0 : 22);
    parts.push(
      `<line x1="${lx}" x2="${lx + 34}" y1="${ly - 4}" y2="${ly - 4}" stroke="${colour}" stroke-width="2.5"${dash ? ` stroke-dasharray="${dash}"` : ''}/>`,
    );
    text(lx + 42, ly, name);
  });
  const svg = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${CHART.width}" height="${CHART.height}" viewBox="0 0 ${CHART.width} ${CHART.height}" font-family="sans-serif" font-size="13" fill="#222">`,
    `<rect width="${CHART.width}" height="${CHART.height}" fill="#fff"/>`,
    `<text x="70" y="26" font-size="15" font-weight="bold">${escape(`quorumfence and etcd with every link delayed (client to servers, and etcd's members to each other)`)}</text>`,
    `<text x="70" y="44" fill="#555">${escape(caption)}</text>`,
    ...parts,
    '</svg>',
  ].join('\n');
  return { svg, markers };
}

/** The system's chromium, or undefined. */
export function findChromium(): string | undefined {
  const found = spawnSync('sh', ['-c', 'command -v chromium || command -v chromium-browser'], { encoding: 'utf8' });
  const path = found.stdout.trim();
  return found.status === 0 && path ? path : undefined;
}

/** A chart's size in CSS pixels (the PNG is CHART.scale times larger). */
export interface ChartSize {
  readonly width: number;
  readonly height: number;
}

/** The SVG as a PNG at CHART.scale, drawn by headless chromium; undefined when chromium is missing. */
export async function rasterise(svg: string, size: ChartSize = CHART): Promise<Buffer | undefined> {
  const executablePath = findChromium();
  if (!executablePath) return undefined;
  // playwright-core is a dev dependency, loaded only here: the other sections run without it.
  const { chromium } = await import('playwright-core');
  const browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
  try {
    const page = await browser.newPage({
      viewport: { width: size.width, height: size.height },
      deviceScaleFactor: CHART.scale,
    });
    await page.setContent(`<!doctype html><body style="margin:0">${svg}</body>`);
    return await page.screenshot({ type: 'png', clip: { x: 0, y: 0, width: size.width, height: size.height } });
  } finally {
    await browser.close();
  }
}

/**
 * Writes a chart as `<base>.png` (or `<base>.svg` when chromium is missing or fails, saying why); returns the
 * file and a line for the table.
 */
export async function writeChart(
  base: string,
  svg: string,
  size: ChartSize = CHART,
): Promise<{ file: string; line: string }> {
  let why = 'no chromium on PATH to draw the PNG';
  try {
    const png = await rasterise(svg, size);
    if (png) {
      writeFileSync(`${base}.png`, png);
      return { file: `${base}.png`, line: `chart written to ${base}.png` };
    }
  } catch (error) {
    why = `chromium could not draw the PNG: ${(error as Error).message.split('\n')[0]}`;
  }
  writeFileSync(`${base}.svg`, svg);
  return { file: `${base}.svg`, line: `chart written to ${base}.svg (${why})` };
}

/**
 * Writes the chart beside the JSON (`<json without .json>.png`, or `.svg` when chromium is missing or
 * fails, saying why); returns the file and a line for the table.
 */
export async function writeNetworkChart(
  jsonFile: string,
  points: readonly NetworkPoint[],
  caption: string,
  replicas: number,
): Promise<{ file: string; line: string }> {
  return writeChart(jsonFile.replace(/\.json$/, ''), networkChartSvg(points, caption, replicas).svg);
}
