/**
 * `bench --gray`'s pure parts: the fault list (bad input refused with INVALID_OPTION), the resources the
 * 1-client and hot loops run on (led by the gray replica), the closed loop under a condition (begun after the
 * warm-up, settled, counted, ended even when it fails), /proc/net/tcp's lines, the tables (ratios to each
 * system's healthy run, etcd's stronger client, issue 42's bar), and the chart's bars. The faults on real
 * processes, the chart in a browser and the whole command run in test/integration/bench-network.test.ts and
 * bench-sections.test.ts.
 */
import { describe, expect, test } from 'vitest';
import fc from 'fast-check';
import { leaderOf } from '../../src/client/signer-choice.js';
import {
  DEFAULT_GRAY_MS,
  GRAY_FAULT_KINDS,
  GRAY_FAULTS,
  grayEmulates,
  grayFailures,
  ledBy,
  parseGrayFaults,
  type EtcdGray,
  type GrayBench,
  type GrayFaultFigures,
  type QuorumfenceGray,
} from '../../src/bench/gray.js';
import { GRAY_TARGET, grayFaultText, grayPass, grayRatio, graySummary } from '../../src/bench/gray-report.js';
import { GRAY_COLOURS, grayBars, grayChartSvg } from '../../src/bench/gray-chart.js';
import { closedLoop, type LoopCondition } from '../../src/bench/measure.js';
import { MAX_RTT_MS } from '../../src/bench/network.js';
import { parseProcNetTcp } from '../../src/bench/socket-owner.js';
import { codeOf } from '../support/error-code.js';

describe('parseGrayFaults', () => {
  test('reads each fault with its delay, defaults the delay to 50 ms, and keeps the order given', () => {
    expect(parseGrayFaults('slow-link:50ms, hung ,byzantine-slow:0.1s,slow-flush')).toEqual([
      { kind: 'slow-link', ms: 50, name: 'slow-link:50ms' },
      { kind: 'hung', name: 'hung' },
      { kind: 'byzantine-slow', ms: 100, name: 'byzantine-slow:100ms' },
      { kind: 'slow-flush', ms: DEFAULT_GRAY_MS, name: `slow-flush:${DEFAULT_GRAY_MS}ms` },
    ]);
  });

  test('refuses an empty item, an unknown fault, a delay on hung, a bad or out-of-range delay, and a repeat', () => {
    for (const bad of [
      '',
      'hung,',
      ',hung',
      'slow',
      'Hung',
      'hung:50ms',
      'slow-link:50',
      'slow-link:fast',
      'slow-link:0',
      'slow-link:-5ms',
      `slow-link:${MAX_RTT_MS + 1}ms`,
      'hung,hung',
      'slow-link:50ms,slow-link:20ms',
    ])
      expect(
        codeOf(() => parseGrayFaults(bad)),
        bad,
      ).toBe('INVALID_OPTION');
  });

  test('every fault says what it emulates, with its delay filled in; etcd runs slow-link and hung only', () => {
    for (const kind of GRAY_FAULT_KINDS) {
      const [fault] = parseGrayFaults(GRAY_FAULTS[kind].takesMs ? `${kind}:37ms` : kind);
      const emulates = grayEmulates(fault!);
      expect(emulates).not.toMatch(/\bMS\b/);
      if (GRAY_FAULTS[kind].takesMs) expect(emulates).toContain('37 ms');
    }
    expect(GRAY_FAULT_KINDS.filter((kind) => GRAY_FAULTS[kind].etcd)).toEqual(['slow-link', 'hung']);
  });
});

describe('ledBy', () => {
  test('names a resource whose leader is the given replica, the same one every time, for every replica', () => {
    fc.assert(
      fc.property(fc.constantFrom(4, 7), fc.string({ maxLength: 20 }), (n, base) => {
        for (let index = 1; index <= n; index++) {
          const name = ledBy(base, index, n);
          expect(leaderOf(name, n)).toBe(index);
          expect(name.startsWith(`${base}#`)).toBe(true);
          expect(ledBy(base, index, n)).toBe(name);
        }
      }),
    );
  });
});

describe('closedLoop under a condition', () => {
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  test('begins after every warm-up cycle, counts only cycles that end after the settling time, then ends', async () => {
    const events: string[] = [];
    let cycles = 0;
    const condition: LoopCondition = {
      settleMs: 150,
      begin: async () => void events.push(`begin after ${cycles} cycles`),
      counting: () => void events.push('counting'),
      end: async () => void events.push('end'),
    };
    const rate = await closedLoop(
      2,
      0.2,
      async () => {
        cycles++;
        await sleep(10);
        return 10;
      },
      undefined,
      condition,
    );
    // Two clients, one warm-up cycle each, before the condition began.
    expect(events).toEqual(['begin after 2 cycles', 'counting', 'end']);
    expect(rate.settlingOperations).toBeGreaterThan(0);
    // Every cycle after the warm-up is either settling or counted.
    expect(rate.operations + rate.settlingOperations!).toBe(cycles - 2);
    expect(rate.cycleMs.samples).toBe(rate.operations);
    // The counted time starts after the settling time: it is not the whole loop's.
    expect(rate.seconds).toBeLessThan((150 + 200 + 200) / 1000);
  });

  test('without a condition nothing settles and the figures carry no settling count', async () => {
    const rate = await closedLoop(1, 0.05, async () => {
      await sleep(5);
      return 5;
    });
    expect(rate.settlingOperations).toBeUndefined();
    expect(rate.operations).toBeGreaterThan(0);
  });

  test('ends the condition when beginning it fails, and when a cycle fails', async () => {
    let ended = 0;
    const failing: LoopCondition = {
      settleMs: 0,
      begin: async () => {
        throw new Error('could not stop the process');
      },
      end: async () => void ended++,
    };
    await expect(closedLoop(1, 0.05, async () => 1, undefined, failing)).rejects.toThrow('could not stop');
    expect(ended).toBe(1);
    let calls = 0;
    const fine: LoopCondition = { settleMs: 0, begin: async () => undefined, end: async () => void ended++ };
    await expect(
      closedLoop(
        1,
        0.05,
        async () => {
          if (++calls > 1) throw new Error('a cycle failed');
          return 1;
        },
        undefined,
        fine,
      ),
    ).rejects.toThrow('a cycle failed');
    expect(ended).toBe(2);
  });
});

describe('parseProcNetTcp', () => {
  test("reads both ends' ports (hex) and the inode, skipping the header and malformed lines", () => {
    const text = [
      '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode',
      '   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0',
      '   1: 0100007F:D2F0 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 20 4 30 10 -1',
      '   2: 0000000000000000FFFF00000100007F:9C40 0000000000000000FFFF00000100007F:0050 01 00000000:00000000 00:00000000 00000000 0 0 99 1',
      'garbage',
      '',
    ].join('\n');
    expect(parseProcNetTcp(text)).toEqual([
      { localPort: 8080, remotePort: 0, inode: 4242 },
      { localPort: 54_000, remotePort: 8080, inode: 777 },
      { localPort: 40_000, remotePort: 80, inode: 99 },
    ]);
  });
});

// ---------- tables and chart, on figures made up to be told apart ----------

const rate = (perSecond: number, p50: number, p99: number, waitP99 = p99) => ({
  clients: 1,
  operations: 10,
  seconds: 1,
  perSecond,
  cycleMs: { median: p50, p99, mean: p50, samples: 10 },
  acquireMs: { median: p50, p99: waitP99, mean: p50, samples: 10 },
});

/** Each loop: healthy (100/s, p50 10, p99 20) and faulted at `k` times the rate, the latencies divided by `k`. */
function quorumfence(k: number): QuorumfenceGray {
  const cpu = { replicas: [1, 1, 1, null], clients: 2, proxies: 0.5, machineBusy: 0.9 };
  const counts = { requestsPerCycle: { acquire: 3, release: 3 }, refusalsPerCycle: {} };
  const loop = () => ({
    healthy: { rate: rate(100, 10, 20), partialsPerCycle: { gray: 0.75, all: 3 }, cpuMsPerCycle: cpu, ...counts },
    faulted: {
      rate: rate(100 * k, 10 / k, 20 / k),
      partialsPerCycle: { gray: 0, all: 3 },
      cpuMsPerCycle: cpu,
      ...counts,
    },
  });
  return { replicas: 4, grayReplica: 1, loops: { one: loop(), distinct: loop(), hot: loop() } };
}

function etcdLoop(healthy: number, faulted: number) {
  const run = (perSecond: number) => ({
    rate: rate(perSecond, 1000 / perSecond, 2000 / perSecond),
    retried: 0,
    leaderWhenCounting: 'etcd-1',
    leaderAtEnd: 'etcd-1',
  });
  return { healthy: run(healthy), faulted: run(faulted) };
}

/** etcd: under the leader's fault the gateway keeps 20 %, gRPC 10 % (so the gateway is the stronger). */
function etcd(): EtcdGray {
  const variant = (faulted: string, gateway: number, grpc: number) => ({
    faulted,
    leader: 'etcd-1',
    clientsOn: ['etcd-2', 'etcd-3'],
    leaderMoves: 2,
    drivers: {
      gateway: {
        one: etcdLoop(50, 50 * gateway),
        distinct: etcdLoop(50, 50 * gateway),
        hot: etcdLoop(50, 50 * gateway),
      },
      grpc: { one: etcdLoop(40, 40 * grpc), distinct: etcdLoop(40, 40 * grpc), hot: etcdLoop(40, 40 * grpc) },
    },
  });
  return { members: 3, leader: variant('etcd-1', 0.2, 0.1), follower: variant('etcd-2', 1, 0.95) };
}

function bench(faults: GrayFaultFigures[]): GrayBench {
  return {
    rttMs: 2,
    measuredRttMs: { median: 2.2, p99: 3, mean: 2.3, samples: 10 },
    settleMs: 1000,
    loadAverage: { start: 1, end: 1.5 },
    faults,
  };
}

const slowLink: GrayFaultFigures = {
  fault: 'slow-link:50ms',
  kind: 'slow-link',
  ms: 50,
  emulates: 'a slow network at one node',
  quorumfence: quorumfence(0.5),
  etcd: etcd(),
};
const slowFlush: GrayFaultFigures = {
  fault: 'slow-flush:50ms',
  kind: 'slow-flush',
  ms: 50,
  emulates: 'a slow disk',
  quorumfence: quorumfence(0.95),
  etcd: { skipped: 'quorumfence only' },
};

describe('ratios and the bar', () => {
  test('faulted / healthy, none where a figure is missing or healthy is 0', () => {
    expect(grayRatio(20, 80)).toBe(0.25);
    expect(grayRatio(Number.NaN, 80)).toBeUndefined();
    expect(grayRatio(20, 0)).toBeUndefined();
  });

  test("issue 42's bar: cycles/s at least 0.9x and p99 at most 1.5x, for slow-link, hung and byzantine-slow only", () => {
    expect(grayPass('slow-link', 'cycles', GRAY_TARGET.cyclesAtLeast)).toBe(true);
    expect(grayPass('hung', 'cycles', 0.89)).toBe(false);
    expect(grayPass('byzantine-slow', 'p99', GRAY_TARGET.p99AtMost)).toBe(true);
    expect(grayPass('byzantine-slow', 'p99', 1.51)).toBe(false);
    expect(grayPass('slow-link', 'p50', 5)).toBeUndefined();
    expect(grayPass('slow-flush', 'cycles', 0.1)).toBeUndefined();
  });
});

describe('grayFaultText', () => {
  test("each loop's figures healthy → faulted with the ratio, etcd's stronger client, and quorumfence / etcd", () => {
    const text = grayFaultText(slowLink, 16);
    expect(text).toMatch(/^gray fault slow-link:50ms: a slow network at one node$/m);
    // quorumfence at half its rate and twice its p99: both beyond the bar.
    expect(text).toContain('| 1 client | cycles/s | 100.0 → 50.0 = 0.50x MISS | 50.0 → 10.0 = 0.20x (gateway) |');
    expect(text).toContain('| 1 client | cycle p99, ms | 20.0 → 40.0 = 2.00x MISS |');
    // The latencies: quorumfence's p50 20 ms against the gateway's 100 ms under the leader's fault.
    expect(text).toContain('| 1 client | cycle p50, ms | 10.0 → 20.0 = 2.00x | 20.0 → 100 = 5.00x (gateway) |');
    // The follower's fault costs the gateway nothing; quorumfence / etcd: 50 / 10 (leader) and 50 / 50.
    expect(text).toMatch(
      /\| 16 clients, distinct resources \| cycles\/s \| .* \| 50\.0 → 50\.0 = 1\.00x \(gateway\) \| 5\.00x, 1\.00x \|/,
    );
    // The wait row only for the hot loop.
    expect(text).toMatch(/^\| 16 clients, one hot resource \| p99 wait, ms \|/m);
    expect(text).not.toMatch(/^\| 1 client \| p99 wait/m);
    expect(text).toContain('leadership moved to etcd-1 before each run, 2 move(s) needed; clients on etcd-2, etcd-3');
    expect(text).toContain(
      "quorumfence replica 1's partials per cycle, healthy → faulted: one 0.75 → 0.00 (all 3.00 → 3.00)",
    );
  });

  test('without etcd for a fault, no etcd columns and the reason; a failed side is reported with its code', () => {
    const text = grayFaultText(slowFlush, 16);
    expect(text).toContain('etcd: skipped, quorumfence only');
    expect(text).toMatch(/^\| loop \| figure \| quorumfence, replica 1 faulty: healthy → faulted \|$/m);
    const failed = grayFaultText(
      { ...slowLink, quorumfence: { failed: { code: 'TIMEOUT', message: 'no answer' } } },
      16,
    );
    expect(failed).toContain('quorumfence: FAILED (TIMEOUT): no answer');
    expect(
      grayFailures(bench([slowLink, { ...slowLink, quorumfence: { failed: { code: 'TIMEOUT', message: '' } } }])),
    ).toEqual(['quorumfence under slow-link:50ms']);
    expect(
      grayFailures(bench([{ ...slowLink, etcd: { ...etcd(), leader: { failed: { code: 'TIMEOUT', message: '' } } } }])),
    ).toEqual(['etcd (leader) under slow-link:50ms']);
  });
  test('a run of etcd alone (bench etcd --gray): no quorumfence columns, nor quorumfence / etcd', () => {
    const { quorumfence: _none, ...etcdOnly } = slowLink;
    const text = grayFaultText(etcdOnly, 16);
    expect(text).toMatch(
      /^\| loop \| figure \| etcd, fault on its leader \(etcd-1\) \| etcd, fault on a follower \(etcd-2\) \|$/m,
    );
    expect(text).toContain('| 1 client | cycles/s | 50.0 → 10.0 = 0.20x (gateway) | 50.0 → 50.0 = 1.00x (gateway) |');
    expect(text).not.toContain('quorumfence');
    const summary = graySummary(bench([etcdOnly]), 16);
    expect(summary).toContain('| slow-link:50ms | 1 client | 0.20x, 5.00x | 1.00x, 1.00x |\n');
    expect(summary).not.toContain('quorumfence');
  });
});

describe('graySummary', () => {
  test('one Markdown row per fault and loop: each system faulted / healthy, the bar, quorumfence / etcd', () => {
    const text = graySummary(bench([slowLink, slowFlush]), 16);
    expect(text).toContain(
      '| slow-link:50ms | 1 client | 0.50x MISS, 2.00x MISS | 0.20x, 5.00x | 1.00x, 1.00x | 5.00x |',
    );
    // slow-flush has no bar in the issue, and no etcd counterpart; 0.95x the rate, p99 / 0.95.
    expect(text).toContain('| slow-flush:50ms | 16 clients, one hot resource | 0.95x, 1.05x | n/a | n/a |  |');
  });
});

describe('the gray chart', () => {
  test('one bar per fault, loop, system and figure; none where a system did not run the fault', () => {
    const figures = bench([slowLink, slowFlush]);
    const bars = grayBars(figures);
    expect(bars).toHaveLength(2 * 3 * 2 * 3);
    const at = (fault: number, system: string, metric = 'cycles') =>
      bars.find((b) => b.fault === fault && b.system === system && b.metric === metric && b.loop === 'hot')!;
    expect(at(0, 'quorumfence').ratio).toBe(0.5);
    expect(at(0, 'etcdLeader').ratio).toBeCloseTo(0.2);
    expect(at(0, 'etcdFollower', 'p99').ratio).toBeCloseTo(1);
    expect(at(1, 'etcdLeader').ratio).toBeUndefined();
    const { svg, markers } = grayChartSvg(figures, 'test figures', 16);
    expect(svg).toMatch(/^<svg [^>]*width="960"/);
    // A marker per drawn bar, in its system's colour, below 1x for a loss and above it for a gain.
    expect(markers).toHaveLength(bars.filter((b) => b.ratio !== undefined).length);
    for (const marker of markers) expect(svg).toContain(`fill="${GRAY_COLOURS[marker.bar.system]}"`);
    const marker = (system: string, metric: string) =>
      markers.find(
        (m) => m.bar.fault === 0 && m.bar.loop === 'one' && m.bar.system === system && m.bar.metric === metric,
      )!;
    // In each row, against the follower's (1x, no change): the rate's loss below, the p99's growth above.
    expect(marker('quorumfence', 'cycles').y).toBeGreaterThan(marker('etcdFollower', 'cycles').y);
    expect(marker('etcdLeader', 'cycles').y).toBeGreaterThan(marker('quorumfence', 'cycles').y);
    expect(marker('etcdLeader', 'p99').y).toBeLessThan(marker('etcdFollower', 'p99').y);
  });
});
