/**
 * `bench --rtt`'s real parts: the delay proxies run in a process of their own (the built
 * dist/src/bench/delay-proxy-child.js), a route gives at least the round trip set and keeps a URL's
 * scheme and path, and the chart drawn by the system's headless chromium has each value's marker in its
 * system's colour where the figures put it; without chromium the bench writes the SVG and says why.
 * The whole command runs in bench-sections.test.ts.
 *
 * Needs Debian's chromium (.ci/run installs it); without it the chart test is skipped, saying so
 * in its name, unless CI's QUORUMFENCE_TEST_REQUIRE_SYSTEM=1 (test/support/system-tools.ts).
 */
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { chromium } from 'playwright-core';
import type * as NetworkModule from '../../src/bench/network.js';
import { base64, post, startEtcdCluster } from '../../src/bench/etcd-cluster.js';
import { GatewayLocker, GrpcLocker } from '../../src/bench/etcd.js';
import { CHART, findChromium, networkChartSvg, rasterise, writeNetworkChart } from '../../src/bench/network-chart.js';
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

describe('the chart', () => {
  test.skipIf(lacks('chromium'))(
    `drawn by chromium: the PNG's size, and each marker in its system's colour where the figures put it ${needs('chromium')}`,
    async () => {
      const executablePath = findChromium();
      if (!executablePath) throw new Error('chromium is not installed (apt-get install chromium)');
      const { svg, markers } = networkChartSvg(points, 'test figures', 4);
      const png = await rasterise(svg);
      expect(png!.subarray(1, 4).toString()).toBe('PNG');
      // Decode the PNG in the browser and read the pixel under each marker's centre.
      const browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
      try {
        const page = await browser.newPage();
        const spots = markers.map((m) => [Math.round(m.x * CHART.scale), Math.round(m.y * CHART.scale)]);
        // A script string: the page's DOM types are not this project's (no "dom" lib in its TypeScript).
        const read = (await page.evaluate(`(async () => {
        const image = new Image();
        image.src = 'data:image/png;base64,${png!.toString('base64')}';
        await image.decode();
        const canvas = document.createElement('canvas');
        canvas.width = image.naturalWidth;
        canvas.height = image.naturalHeight;
        const context = canvas.getContext('2d');
        context.drawImage(image, 0, 0);
        return {
          width: image.naturalWidth,
          height: image.naturalHeight,
          pixels: ${JSON.stringify(spots)}.map(([x, y]) => Array.from(context.getImageData(x, y, 1, 1).data.slice(0, 3))),
        };
      })()`)) as { width: number; height: number; pixels: number[][] };
        expect([read.width, read.height]).toEqual([CHART.width * CHART.scale, CHART.height * CHART.scale]);
        const colours = { quorumfence: [0x1f, 0x5f, 0xbf], etcd: [0xd9, 0x6a, 0x00] };
        markers.forEach((marker, k) => {
          const pixel: number[] = read.pixels[k]!;
          const expected = colours[marker.series.system];
          const distance = pixel.reduce((sum, channel, c) => sum + Math.abs(channel - expected[c]!), 0);
          const where = `${marker.series.system} ${marker.series.label} at point ${marker.point}: rgb ${pixel.join(',')}`;
          expect(distance, where).toBeLessThan(24);
        });
      } finally {
        await browser.close();
      }
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
