/**
 * The bench's target table (issue 13) compares each row against the stronger etcd driver for that row: the
 * higher rate, the lower latency. A baseline picked from one driver only would flatter quorumfence wherever
 * the other client is faster.
 */
import { describe, expect, test } from 'vitest';
import { floorMs, targetRows } from '../../src/bench/report.js';
import type { CryptoFigures } from '../../src/bench/crypto.js';
import type { Timing } from '../../src/bench/measure.js';
import type { EtcdDriverFigures } from '../../src/bench/etcd.js';
import type { SystemFigures } from '../../src/bench/system.js';

const loop = (perSecond: number, p99 = 0) => ({ perSecond, acquireMs: { median: 0, p99 } });

const system = {
  acquireMs: { median: 3 },
  cpuPerGrantMs: 4,
  loops: { fencedWrite: { one: loop(150), distinct: loop(400), hot: loop(200, 100) } },
} as unknown as SystemFigures;

const driver = (acquire: number, one: number, distinct: number, hot: number, hotP99: number) =>
  ({
    acquireMs: { median: acquire },
    loops: { fencedWrite: { one: loop(one), distinct: loop(distinct), hot: loop(hot, hotP99) } },
  }) as unknown as EtcdDriverFigures;

describe('targetRows', () => {
  test('each row takes the stronger driver: the higher rate, the lower latency', () => {
    const rows = targetRows(
      system,
      { gateway: driver(1.5, 300, 700, 150, 120), grpc: driver(2, 280, 800, 190, 110) },
      { cpu: 2, wall: 1.6 },
    );
    const byTarget = new Map(rows.map((row) => [row.target, row]));
    expect(byTarget.get('1 client acquire p50 vs etcd lock + read p50')).toMatchObject({ ratio: 2, pass: false });
    expect(byTarget.get('1 client acquire p50 vs etcd lock + read p50')!.etcd).toContain('gateway');
    expect(byTarget.get('1 client cycles/s')!.ratio).toBeCloseTo(0.5);
    expect(byTarget.get('16 clients, distinct resources, cycles/s')!.ratio).toBeCloseTo(0.5);
    expect(byTarget.get('16 clients, distinct resources, cycles/s')!.etcd).toContain('grpc');
    expect(byTarget.get('16 clients, one hot resource, handoffs/s')!.ratio).toBeCloseTo(200 / 190);
    expect(byTarget.get('hot resource, p99 wait')).toMatchObject({ pass: true });
    expect(byTarget.get('hot resource, p99 wait')!.ratio).toBeCloseTo(100 / 110);
    // Judged against the CPU floor; the wall-clock floor's ratio is shown beside it.
    expect(byTarget.get('CPU per grant, all processes, vs the crypto floor')).toMatchObject({ ratio: 2, pass: false });
    expect(byTarget.get('CPU per grant, all processes, vs the crypto floor')!.etcd).toContain('2.50x');
  });

  test('without etcd the rows carry quorumfence alone, with no ratio and no verdict', () => {
    const rows = targetRows(system, undefined, { cpu: 2, wall: 2 });
    const hot = rows.find((row) => row.target === '16 clients, one hot resource, handoffs/s')!;
    expect(hot.etcd).toBe('');
    expect(hot.ratio).toBeUndefined();
    expect(hot.pass).toBeUndefined();
  });
});

describe('floorMs', () => {
  const op = (median: number, cpuMean?: number): Timing => ({
    median,
    p99: median,
    mean: median,
    samples: 20,
    ...(cpuMean === undefined ? {} : { cpuMean }),
  });
  const figures = (cpu: boolean): CryptoFigures => ({
    backend: 'blst',
    signMs: op(0.3, cpu ? 0.31 : undefined),
    verifyPartialMs: op(0.8),
    // A verify whose library splits the pairing over two threads: more CPU than wall time.
    verifyTokenMs: op(0.9, cpu ? 1.1 : undefined),
    combineMs: { '3': op(0.1, cpu ? 0.12 : undefined) },
    verifyTokenBatchMs: {},
  });

  test('counts t signs, one combine and two token checks, by CPU per call or by median wall time', () => {
    expect(floorMs(figures(true), 4, 'cpu')).toBeCloseTo(3 * 0.31 + 0.12 + 2 * 1.1);
    expect(floorMs(figures(true), 4, 'wall')).toBeCloseTo(3 * 0.3 + 0.1 + 2 * 0.9);
    expect(floorMs(figures(true), 4)).toBeCloseTo(floorMs(figures(true), 4, 'cpu'));
  });

  test('figures written before CPU per call was measured count their medians', () => {
    expect(floorMs(figures(false), 4, 'cpu')).toBeCloseTo(3 * 0.3 + 0.1 + 2 * 0.9);
  });
});
