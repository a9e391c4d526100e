/**
 * `bench --rtt`'s real parts: the delay proxies run in a process of their own (the built
 * dist/src/bench/delay-proxy-child.js), a route gives at least the round trip set and keeps a URL's
 * scheme and path, and the chart drawn by the system's headless chromium has each value's marker in its
 * system's colour where the figures put it; without chromium the bench writes the SVG and says why.
 * `bench --gray`'s: a slow node slows the links to it and those its process dialed (found in /proc) and
 * nothing else; the slow-flush library slows a real process's flushes by what its control file says;
 * etcd's leadership moves to the member named and every member says so; the gray chart in chromium.
 * The whole command runs in bench-sections.test.ts.
 *
 * Needs Debian's chromium (.ci/run installs it); without it the chart test is skipped, saying so
 * in its name, unless CI's QUORUMFENCE_TEST_REQUIRE_SYSTEM=1 (test/support/system-tools.ts).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { connect, createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { chromium } from 'playwright-core';
import type * as NetworkModule from '../../src/bench/network.js';
import { agreedLeader, base64, moveLeader, post, startEtcdCluster } from '../../src/bench/etcd-cluster.js';
import { buildSlowFlush, MAX_SLOW_FLUSH_MS } from '../../src/bench/slow-flush.js';
import { GRAY_COLOURS, GRAY_CHART, grayChartSvg } from '../../src/bench/gray-chart.js';
import type { GrayBench } from '../../src/bench/gray.js';
import { codeOf } from '../support/error-code.js';
import { GatewayLocker, GrpcLocker } from '../../src/bench/etcd.js';
import {
  CHART,
  findChromium,
  networkChartSvg,
  rasterise,
  writeNetworkChart,
  type ChartSize,
} from '../../src/bench/network-chart.js';
import type { NetworkPoint } from '../../src/bench/network-bench.js';
import type { EtcdDriverFigures } from '../../src/bench/etcd.js';
import type { SystemFigures } from '../../src/bench/system.js';
import { lacks, needs } from '../support/system-tools.js';

const root = mkdtempSync(join(tmpdir(), 'qf-bench-network-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

// The built module: it forks dist/src/bench/delay-proxy-child.js beside it.
const network = (await import('../../dist/src/bench/network.js' as string)) as typeof NetworkModule;

describe('the delay proxies process', () => {
  test('runs apart from this process, and every ping through a route takes at least the round trip set', async () => {
    const rttMs = 30;
    const delayed = await network.startDelayedNetwork(rttMs);
    try {
      expect(delayed.pid).not.toBe(process.pid);
      const measured = await network.measureRoundTrip(delayed, 5);
      expect(measured.samples).toBe(5);
      // The median of five pings each at least 30 ms; the mean too.
      expect(measured.median).toBeGreaterThanOrEqual(rttMs);
      expect(measured.mean).toBeGreaterThanOrEqual(rttMs);
      const stats = await delayed.stats();
      expect(stats.connections).toBe(1);
      // Each ping and each echo: one chunk each way.
      expect(stats.chunks).toBe(10);
      expect(await network.measureRoundTrip(network.LOOPBACK, 3)).toMatchObject({ samples: 3 });
    } finally {
      await delayed.close();
    }
  });

  test('a route keeps the scheme, the host and any path, changes the port, and is opened once per target', async () => {
    const delayed = await network.startDelayedNetwork(2);
    try {
      const ws = await delayed.route('ws://127.0.0.1:7101');
      expect(ws).toMatch(/^ws:\/\/127\.0\.0\.1:\d+$/);
      expect(ws).not.toBe('ws://127.0.0.1:7101');
      expect(await delayed.route('http://127.0.0.1:7101/v3/kv')).toBe(`${ws.replace('ws', 'http')}/v3/kv`);
      expect(await delayed.route('http://127.0.0.1:7102')).not.toBe(ws.replace('ws', 'http'));
    } finally {
      await delayed.close();
    }
  });
});

/** An echo server in this process, and a client of it through `url` (a route), with a one-byte ping. */
async function echoThrough(delayed: NetworkModule.DelayedNetwork) {
  const accepted = new Set<Socket>();
  const echo = createServer((socket) => {
    accepted.add(socket);
    socket.on('data', (data) => socket.write(data));
  });
  await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', () => resolve()));
  const address = echo.address();
  const url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  const routed = new URL(await delayed.route(url));
  const socket = connect({ host: routed.hostname, port: Number(routed.port) });
  socket.setNoDelay(true);
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  const ping = async () => {
    const t0 = performance.now();
    await new Promise<void>((resolve) => {
      socket.once('data', () => resolve());
      socket.write('x');
    });
    return performance.now() - t0;
  };
  const close = async () => {
    socket.destroy();
    for (const s of accepted) s.destroy();
    await new Promise((resolve) => echo.close(resolve));
  };
  return { url, ping, close };
}

describe('a slow node (bench --gray slow-link)', () => {
  // Far apart: a loaded machine's late timers cannot pass for the extra delay, nor hide it.
  const rttMs = 10;
  const extraMs = 250;

  test('slows every connection to its addresses both ways, and nothing else, until it is ended', async () => {
    const delayed = await network.startDelayedNetwork(rttMs);
    const slow = await echoThrough(delayed);
    const other = await echoThrough(delayed);
    try {
      expect(await delayed.slowNode({ urls: [slow.url], extraOneWayMs: extraMs })).toEqual({ dialedByPid: 0 });
      expect(await slow.ping()).toBeGreaterThanOrEqual(rttMs + 2 * extraMs);
      const unslowed = await other.ping();
      expect(unslowed).toBeGreaterThanOrEqual(rttMs);
      expect(unslowed).toBeLessThan(rttMs + 2 * extraMs);
      await delayed.slowNode({ urls: [], extraOneWayMs: 0 });
      expect(await slow.ping()).toBeLessThan(rttMs + 2 * extraMs);
    } finally {
      await slow.close();
      await other.close();
      await delayed.close();
    }
  });

  test("slows the connections its process dialed through any route (found in /proc), not another process's", async () => {
    const delayed = await network.startDelayedNetwork(rttMs);
    const mine = await echoThrough(delayed);
    try {
      // The proxies' own process dialed nothing through a route: nothing is slowed.
      expect(await delayed.slowNode({ urls: [], fromPid: delayed.pid, extraOneWayMs: extraMs })).toEqual({
        dialedByPid: 0,
      });
      expect(await mine.ping()).toBeLessThan(rttMs + 2 * extraMs);
      // This process dialed the route: its connection is found and slowed both ways.
      expect(await delayed.slowNode({ urls: [], fromPid: process.pid, extraOneWayMs: extraMs })).toEqual({
        dialedByPid: 1,
      });
      expect(await mine.ping()).toBeGreaterThanOrEqual(rttMs + 2 * extraMs);
      // A connection it opens later, through a route opened later, too.
      const later = await echoThrough(delayed);
      try {
        expect(await later.ping()).toBeGreaterThanOrEqual(rttMs + 2 * extraMs);
      } finally {
        await later.close();
      }
    } finally {
      await mine.close();
      await delayed.close();
    }
  });

  test('refuses an extra delay that is not a number of ms >= 0 (INVALID_ARGUMENT) and slows nothing', async () => {
    const delayed = await network.startDelayedNetwork(rttMs);
    const link = await echoThrough(delayed);
    try {
      for (const bad of [-1, Number.NaN, Number.POSITIVE_INFINITY]) {
        const refused = await delayed.slowNode({ urls: [link.url], extraOneWayMs: bad }).then(
          () => 'accepted',
          (error: { code?: string }) => error.code,
        );
        expect(refused, String(bad)).toBe('INVALID_ARGUMENT');
      }
      expect(await link.ping()).toBeLessThan(rttMs + 2 * extraMs);
    } finally {
      await link.close();
      await delayed.close();
    }
  });
});

describe.skipIf(lacks('cc'))(`the slow-flush library (bench --gray slow-flush) ${needs('cc')}`, () => {
  test('a process it is preloaded into waits before every flush as long as its control file says, from then on', async () => {
    const dir = mkdtempSync(join(root, 'slow-flush-'));
    const flush = buildSlowFlush(dir);
    // Three fsyncs and three fdatasyncs of a real file, each timed, in a process of its own.
    const script = `const fs = require('fs'); const fd = fs.openSync(${JSON.stringify(join(dir, 'data'))}, 'w');
      const times = []; for (let i = 0; i < 3; i++) for (const sync of [fs.fsyncSync, fs.fdatasyncSync]) {
      fs.writeSync(fd, 'x'); const t0 = performance.now(); sync(fd); times.push(performance.now() - t0); }
      process.stdout.write(JSON.stringify(times));`;
    const flushTimes = () => {
      const run = spawnSync(process.execPath, ['-e', script], {
        env: { ...process.env, ...flush.env },
        encoding: 'utf8',
      });
      expect(run.status, run.stderr).toBe(0);
      return JSON.parse(run.stdout) as number[];
    };
    const waitMs = 120;
    flush.set(waitMs);
    for (const t of flushTimes()) expect(t).toBeGreaterThanOrEqual(waitMs);
    flush.set(0);
    // Without the wait each flush is the disk's own; on a loaded machine's disk, still far below the wait.
    expect(Math.min(...flushTimes())).toBeLessThan(waitMs);
    expect(codeOf(() => flush.set(MAX_SLOW_FLUSH_MS + 1))).toBe('INVALID_ARGUMENT');
    expect(codeOf(() => flush.set(-1))).toBe('INVALID_ARGUMENT');
  });
});

describe.skipIf(lacks('etcd'))(`etcd behind the delay proxies ${needs('etcd')}`, () => {
  test("a write pays the client's round trip and the Raft round trip between the members", async () => {
    // Long enough that a loaded machine's fsync and scheduling cannot make up a missing round trip.
    const rttMs = 100;
    const delayed = await network.startDelayedNetwork(rttMs);
    const etcd = await startEtcdCluster({ links: delayed });
    const { Pool } = await import('undici');
    const pool = new Pool(etcd.clientUrls[0]!, { connections: 1 });
    try {
      await post(pool, '/v3/kv/put', { key: base64('warm'), value: base64('x') });
      const t0 = performance.now();
      await post(pool, '/v3/kv/put', { key: base64('timed'), value: base64('x') });
      // The client's round trip to its member, and at least one between the leader and a follower (with the
      // peer links on loopback, one round trip and a commit).
      expect(performance.now() - t0).toBeGreaterThanOrEqual(2 * rttMs);
    } finally {
      await pool.close();
      await etcd.close();
      await delayed.close();
    }
  });
});

describe.skipIf(lacks('etcd'))(`etcd's leadership (bench --gray) ${needs('etcd')}`, () => {
  test('moves to each member named, through the maintenance API, and every member then follows it', async () => {
    const etcd = await startEtcdCluster();
    try {
      expect(new Set(etcd.members.map((m) => m.id)).size).toBe(3);
      const first = await agreedLeader(etcd.members);
      expect(etcd.members.map((m) => m.name)).toContain(first);
      // To every other member in turn, then back: a move is needed each time, and checked by every member.
      const order = [...etcd.members.filter((m) => m.name !== first), etcd.members.find((m) => m.name === first)!];
      for (const target of order) {
        expect(await moveLeader(etcd.members, target)).toEqual({ moved: true });
        expect(await agreedLeader(etcd.members)).toBe(target.name);
      }
      // Where it already is, nothing moves.
      expect(await moveLeader(etcd.members, order.at(-1)!)).toEqual({ moved: false });
    } finally {
      await etcd.close();
    }
  });
});

describe.skipIf(lacks('etcd'))(`etcd's lockers ${needs('etcd')}`, () => {
  test("keep their session lease alive while open, as etcd's concurrency.Session does: a lock held past the TTL still fences", async () => {
    // A run at a long round trip holds one locker open for minutes (600 timed acquires of several round
    // trips each): with a lease that is never kept alive, its lock keys vanished when the TTL ran out.
    const ttlSeconds = 2;
    const etcd = await startEtcdCluster();
    const { Pool } = await import('undici');
    const { Etcd3 } = await import('etcd3');
    const pool = new Pool(etcd.clientUrls[0]!, { connections: 1 });
    const lockers = [new GatewayLocker(pool), new GrpcLocker(new Etcd3({ hosts: etcd.clientUrls[1]! }))];
    try {
      await Promise.all(lockers.map((locker) => locker.open(ttlSeconds)));
      const held = await Promise.all(lockers.map((locker, k) => locker.acquire(`ttl/${k}`)));
      await new Promise((resolve) => setTimeout(resolve, 3 * ttlSeconds * 1000));
      for (const [k, locker] of lockers.entries()) {
        const { key, fence } = held[k]!;
        expect(await locker.fencedWrite(key, fence, `data/ttl/${k}`, 'still held'), `locker ${k}`).toBe(true);
        await locker.release(key);
      }
    } finally {
      await Promise.all(lockers.map((locker) => locker.close()));
      await pool.close();
      await etcd.close();
    }
  });
});

const loop = (perSecond: number) => ({ perSecond, acquireMs: { median: 1, p99: 1 } });
const loops = (one: number, distinct: number, hot: number) => ({
  lockRelease: { one: loop(one), distinct: loop(distinct), hot: loop(hot) },
  fencedWrite: { one: loop(one), distinct: loop(distinct), hot: loop(hot) },
});
/** Figures far apart, so that no two markers of different systems overlap. */
const points: NetworkPoint[] = [0, 2, 20].map((rttMs, i) => ({
  rttMs,
  loadAverage: { start: 1, end: 1 },
  measuredRttMs: { median: rttMs, p99: rttMs, mean: rttMs, samples: 1 },
  system: { acquireMs: { median: 3 * (i + 1) }, loops: loops(100, 1000, 10) } as unknown as SystemFigures,
  etcd: {
    members: 3,
    drivers: {
      gateway: { acquireMs: { median: 20 * (i + 1) }, loops: loops(40, 400, 4) } as unknown as EtcdDriverFigures,
    },
  },
}));

/** The PNG's size and the colour (rgb) of the pixel at each spot (CSS units), decoded by chromium. */
async function pixelsOf(
  png: Buffer,
  spots: readonly (readonly [number, number])[],
): Promise<{ width: number; height: number; pixels: number[][] }> {
  const executablePath = findChromium();
  if (!executablePath) throw new Error('chromium is not installed (apt-get install chromium)');
  const browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
  try {
    const page = await browser.newPage();
    const scaled = spots.map(([x, y]) => [Math.round(x * CHART.scale), Math.round(y * CHART.scale)]);
    // A script string: the page's DOM types are not this project's (no "dom" lib in its TypeScript).
    return (await page.evaluate(`(async () => {
      const image = new Image();
      image.src = 'data:image/png;base64,${png.toString('base64')}';
      await image.decode();
      const canvas = document.createElement('canvas');
      canvas.width = image.naturalWidth;
      canvas.height = image.naturalHeight;
      const context = canvas.getContext('2d');
      context.drawImage(image, 0, 0);
      return {
        width: image.naturalWidth,
        height: image.naturalHeight,
        pixels: ${JSON.stringify(scaled)}.map(([x, y]) => Array.from(context.getImageData(x, y, 1, 1).data.slice(0, 3))),
      };
    })()`)) as { width: number; height: number; pixels: number[][] };
  } finally {
    await browser.close();
  }
}

/** How far a pixel is from a colour (#rrggbb), summed over the channels. */
function distance(pixel: readonly number[], colour: string): number {
  const expected = [1, 3, 5].map((at) => Number.parseInt(colour.slice(at, at + 2), 16));
  return pixel.reduce((sum, channel, c) => sum + Math.abs(channel - expected[c]!), 0);
}

const expectSize = (read: { width: number; height: number }, size: ChartSize) =>
  expect([read.width, read.height]).toEqual([size.width * CHART.scale, size.height * CHART.scale]);

describe('the chart', () => {
  test.skipIf(lacks('chromium'))(
    `drawn by chromium: the PNG's size, and each marker in its system's colour where the figures put it ${needs('chromium')}`,
    async () => {
      const { svg, markers } = networkChartSvg(points, 'test figures', 4);
      const png = await rasterise(svg);
      expect(png!.subarray(1, 4).toString()).toBe('PNG');
      // Decode the PNG in the browser and read the pixel under each marker's centre.
      const read = await pixelsOf(
        png!,
        markers.map((m) => [m.x, m.y]),
      );
      expectSize(read, CHART);
      const colours = { quorumfence: '#1f5fbf', etcd: '#d96a00' };
      markers.forEach((marker, k) => {
        const pixel: number[] = read.pixels[k]!;
        const where = `${marker.series.system} ${marker.series.label} at point ${marker.point}: rgb ${pixel.join(',')}`;
        expect(distance(pixel, colours[marker.series.system]), where).toBeLessThan(24);
      });
    },
  );

  test.skipIf(lacks('chromium'))(
    `the gray chart, drawn by chromium: its size, and each bar in its system's colour where the ratio puts it ${needs('chromium')}`,
    async () => {
      const rate = (perSecond: number, p99: number) => ({
        perSecond,
        cycleMs: { median: p99 / 2, p99 },
        acquireMs: { median: p99 / 2, p99 },
      });
      const pair = (k: number) => ({ healthy: { rate: rate(100, 20) }, faulted: { rate: rate(100 * k, 20 / k) } });
      const loops = (k: number) => ({ one: pair(k), distinct: pair(k), hot: pair(k) });
      const variant = (k: number) => ({ faulted: 'etcd-1', drivers: { gateway: loops(k) } });
      const bench = {
        rttMs: 2,
        faults: [
          {
            fault: 'slow-link:50ms',
            quorumfence: { loops: loops(0.25) },
            etcd: { leader: variant(0.1), follower: variant(0.9) },
          },
          {
            fault: 'hung',
            quorumfence: { loops: loops(0.95) },
            etcd: { leader: variant(0.02), follower: variant(1.1) },
          },
          { fault: 'slow-flush:50ms', quorumfence: { loops: loops(0.5) }, etcd: { skipped: 'quorumfence only' } },
        ],
      } as unknown as GrayBench;
      const { svg, markers } = grayChartSvg(bench, 'test figures', 16);
      // Every bar the figures call for: 3 faults (etcd in two of them) x 3 loops x 2 rows.
      expect(markers).toHaveLength((3 + 2 + 2) * 3 * 2);
      const png = await rasterise(svg, GRAY_CHART);
      expect(png!.subarray(1, 4).toString()).toBe('PNG');
      const read = await pixelsOf(
        png!,
        markers.map((m) => [m.x, m.y]),
      );
      expectSize(read, GRAY_CHART);
      markers.forEach((marker, k) => {
        const pixel: number[] = read.pixels[k]!;
        const where = `${marker.bar.system} ${marker.bar.metric} ${marker.bar.loop} fault ${marker.bar.fault}: rgb ${pixel.join(',')}`;
        expect(distance(pixel, GRAY_COLOURS[marker.bar.system]), where).toBeLessThan(24);
      });
    },
  );

  test('without chromium the bench writes the SVG next to the JSON and says why', async () => {
    const bin = mkdtempSync(join(root, 'bin-'));
    symlinkSync('/bin/sh', join(bin, 'sh'));
    const path = process.env.PATH;
    process.env.PATH = bin;
    try {
      const chart = await writeNetworkChart(join(root, 'run.json'), points, 'test figures', 4);
      expect(chart.file).toBe(join(root, 'run.svg'));
      expect(chart.line).toContain('no chromium on PATH');
      expect(readFileSync(chart.file, 'utf8')).toMatch(/^<svg [^>]*width="960"/);
    } finally {
      process.env.PATH = path;
    }
  });
});
