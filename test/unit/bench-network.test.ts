/**
 * `bench --rtt`'s pure parts: the round-trip list (bad input refused with INVALID_OPTION), issue 31's
 * targets against etcd's stronger client per row, the Markdown summary, and the chart's lines and markers
 * (each value drawn where its scale puts it). The network itself, the chart in a browser and the whole
 * command run in test/integration/bench-network.test.ts and bench-sections.test.ts.
 */
import { describe, expect, test } from 'vitest';
import fc from 'fast-check';
import { parseRtts, MAX_RTT_MS } from '../../src/bench/network.js';
import { freshNames } from '../../src/bench/measure.js';
import { networkSummary, networkTargetRows } from '../../src/bench/network-report.js';
import { chartSeries, networkChartSvg } from '../../src/bench/network-chart.js';
import type { NetworkPoint } from '../../src/bench/network-bench.js';
import type { EtcdDriverFigures } from '../../src/bench/etcd.js';
import type { SystemFigures } from '../../src/bench/system.js';
import { codeOf } from '../support/error-code.js';

const loop = (perSecond: number, p99 = 0) => ({ perSecond, acquireMs: { median: 0, p99 } });
const loops = (one: number, distinct: number, hot: number, hotP99: number) => ({
  one: loop(one),
  distinct: loop(distinct),
  hot: loop(hot, hotP99),
});

const system = (acquire: number, one: number, distinct: number, hot: number, hotP99: number) =>
  ({
    acquireMs: { median: acquire },
    loops: {
      lockRelease: loops(one, distinct, hot, hotP99),
      fencedWrite: loops(one / 2, distinct / 2, hot / 2, hotP99),
    },
  }) as unknown as SystemFigures;

const driver = (acquire: number, one: number, distinct: number, hot: number, hotP99: number) =>
  ({
    acquireMs: { median: acquire },
    loops: {
      lockRelease: loops(one, distinct, hot, hotP99),
      fencedWrite: loops(one / 2, distinct / 2, hot / 2, hotP99),
    },
  }) as unknown as EtcdDriverFigures;

const point = (rttMs: number, qf: SystemFigures, drivers?: Record<string, EtcdDriverFigures>): NetworkPoint => ({
  rttMs,
  loadAverage: { start: 1, end: 2 },
  measuredRttMs: { median: rttMs + 0.5, p99: rttMs + 2, mean: rttMs + 0.7, samples: 10 },
  system: qf,
  ...(drivers ? { etcd: { members: 3, drivers } } : { etcd: { skipped: 'etcd is not on PATH' } }),
});

describe('freshNames', () => {
  test("every cycle of every client gets a name no earlier cycle had, under the loop's prefix and the client's", () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 15 }), { minLength: 1, maxLength: 200 }), (clients) => {
        const next = freshNames('bench/plain/d');
        const names = clients.map((k) => ({ k, name: next(k) }));
        expect(new Set(names.map((n) => n.name)).size).toBe(clients.length);
        for (const { k, name } of names) expect(name.startsWith(`bench/plain/d/${k}/`)).toBe(true);
      }),
    );
  });
});

describe('parseRtts', () => {
  test('reads durations in any order, 0 as loopback, and sorts them', () => {
    expect(parseRtts('20ms,0,2ms')).toEqual([0, 2, 20]);
    expect(parseRtts(' 5ms , 1s')).toEqual([5, 1000]);
    // Durations need a unit, as everywhere on the command line; 0 alone (loopback) needs none.
    expect(codeOf(() => parseRtts('5'))).toBe('INVALID_OPTION');
  });

  test('refuses an empty item, a bad duration, one above the most it measures, and a repeat', () => {
    for (const bad of ['', '2ms,', ',2ms', '2ms,,20ms', 'fast', '-2ms', '2ms,2ms', `${MAX_RTT_MS + 1}ms`, '2s'])
      expect(
        codeOf(() => parseRtts(bad)),
        bad,
      ).toBe('INVALID_OPTION');
  });

  test('any list of distinct round trips within the range comes back as the sorted set', () => {
    fc.assert(
      fc.property(fc.uniqueArray(fc.integer({ min: 0, max: MAX_RTT_MS }), { minLength: 1, maxLength: 6 }), (rtts) => {
        expect(parseRtts(rtts.map((r) => `${r}ms`).join(','))).toEqual([...rtts].sort((a, b) => a - b));
      }),
    );
  });
});

describe('networkTargetRows', () => {
  const qf = system(20, 40, 300, 30, 400);
  const drivers = { gateway: driver(30, 10, 200, 8, 500), grpc: driver(40, 9, 250, 6, 450) };

  test("each row against etcd's stronger client for that row, with issue 31's targets at 20 ms", () => {
    const rows = new Map(networkTargetRows(qf, drivers, 20).map((row) => [row.target, row]));
    const one = rows.get('acquire + release: 1 client, cycles/s')!;
    expect(one).toMatchObject({ ratio: 4, wanted: '>= 4.0x', pass: true });
    expect(one.etcd).toContain('gateway');
    const distinct = rows.get('acquire + release: 16 clients, distinct resources, cycles/s')!;
    expect(distinct.ratio).toBeCloseTo(300 / 250);
    expect(distinct.etcd).toContain('grpc');
    expect(distinct.pass).toBe(false);
    expect(rows.get('acquire + release: 16 clients, one hot resource, handoffs/s')).toMatchObject({
      ratio: 30 / 8,
      pass: false,
    });
    const wait = rows.get('acquire + release: hot, p99 wait')!;
    expect(wait.ratio).toBeCloseTo(400 / 450);
    expect(wait).toMatchObject({ wanted: '<= 1.0x', pass: true });
    expect(rows.get('acquire + fenced write + release: 1 client, cycles/s')).toMatchObject({ ratio: 4, pass: true });
    // The acquire p50 has no target: a ratio, no verdict.
    const acquire = rows.get('uncontended acquire p50 (etcd: lock + read)')!;
    expect(acquire.ratio).toBeCloseTo(20 / 30);
    expect(acquire.pass).toBeUndefined();
  });

  test('at a round trip the issue set no target for, and without etcd, no verdict', () => {
    for (const row of networkTargetRows(qf, drivers, 5)) {
      expect(row.pass).toBeUndefined();
      expect(row.wanted).toBe('');
    }
    for (const row of networkTargetRows(qf, undefined, 20)) {
      expect(row.ratio).toBeUndefined();
      expect(row.pass).toBeUndefined();
    }
    // 2 ms has rates to meet but no wait target.
    const at2 = networkTargetRows(qf, drivers, 2);
    expect(at2.find((r) => r.target === 'acquire + release: 1 client, cycles/s')!.wanted).toBe('>= 2.0x');
    expect(at2.find((r) => r.target === 'acquire + release: hot, p99 wait')!.pass).toBeUndefined();
  });
});

describe('networkSummary', () => {
  test('one Markdown row per round trip and loop kind: quorumfence / stronger etcd = ratio', () => {
    const text = networkSummary([
      point(0, system(3, 150, 400, 150, 100), { gateway: driver(1.5, 300, 800, 150, 120) }),
      point(20, system(25, 40, 300, 30, 400), { gateway: driver(30, 10, 200, 8, 500) }),
      point(50, system(60, 15, 100, 10, 900)),
    ]);
    expect(text).toContain('| 0 (loopback) (0.50 ms) | 150 / 300 = 0.50x | 400 / 800 = 0.50x | 150 / 150 = 1.00x |');
    expect(text).toContain(
      '| 20 ms (20.5 ms) | 40 / 10 = 4.00x | 300 / 200 = 1.50x | 30 / 8 = 3.75x | 400 / 500 = 0.80x |',
    );
    // etcd skipped at 50 ms: quorumfence's figures alone.
    expect(text).toContain('| 50 ms (50.5 ms) | 15 | 100 | 10 | 900 | 60.0 |');
    // Fenced-write rows are their own table.
    expect(text).toContain('| 20 ms (20.5 ms) | 20 / 5 = 4.00x |');
  });
});

describe('the chart', () => {
  const points = [
    point(0, system(3, 150, 400, 150, 100), { gateway: driver(1.5, 300, 800, 150, 120) }),
    point(2, system(6, 120, 350, 90, 150), { gateway: driver(12, 90, 500, 40, 200) }),
    point(20, system(25, 40, 300, 30, 400), {
      gateway: driver(30, 10, 200, 8, 500),
      grpc: driver(45, 12, 150, 9, 450),
    }),
  ];

  test("one line per system and loop, etcd's the stronger client at each point", () => {
    const series = chartSeries(points);
    expect(series.filter((s) => s.panel === 'rate')).toHaveLength(6);
    const etcdOne = series.find((s) => s.panel === 'rate' && s.system === 'etcd' && s.label === '1 client')!;
    expect(etcdOne.values).toEqual([300, 90, 12]);
    const etcdAcquire = series.find((s) => s.panel === 'latency' && s.system === 'etcd')!;
    expect(etcdAcquire.values).toEqual([1.5, 12, 30]);
  });

  test('each marker lies where its scale puts it: a higher rate higher, a longer wait higher, points left to right', () => {
    const { svg, markers } = networkChartSvg(points, 'caption', 4);
    expect(markers).toHaveLength(8 * points.length);
    for (const marker of markers) expect(svg).toContain(`cx="${marker.x.toFixed(1)}" cy="${marker.y.toFixed(1)}"`);
    for (const panel of ['rate', 'latency'] as const) {
      const mine = markers.filter((m) => m.series.panel === panel);
      for (const a of mine)
        for (const b of mine) {
          if (a.point < b.point) expect(a.x).toBeLessThan(b.x);
          const va = a.series.values[a.point]!;
          const vb = b.series.values[b.point]!;
          // SVG y grows downwards: a larger value is drawn higher, an equal one at the same height.
          if (va > vb) expect(a.y).toBeLessThan(b.y);
          if (va === vb) expect(a.y).toBeCloseTo(b.y);
        }
    }
    expect(svg).toContain('>loopback<');
    expect(svg).toContain('>20 ms<');
  });

  test('a side that did not run leaves a gap, not a point', () => {
    const failed: NetworkPoint = { ...points[1]!, system: { failed: { code: 'TIMEOUT', message: 'x' } } };
    const { markers } = networkChartSvg([points[0]!, failed, points[2]!], 'caption', 4);
    expect(markers.filter((m) => m.series.system === 'quorumfence' && m.point === 1)).toEqual([]);
    expect(markers.filter((m) => m.series.system === 'etcd' && m.point === 1)).toHaveLength(4);
  });
});
