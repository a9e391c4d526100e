/**
 * The bench's target table (issue 13) compares each row against the stronger etcd driver for that row: the
 * higher rate, the lower latency. A baseline picked from one driver only would flatter quorumfence wherever
 * the other client is faster.
 */
import { describe, expect, test } from 'vitest';
import { targetRows } from '../../src/bench/report.js';
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
      2,
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
    expect(byTarget.get('CPU per grant, all processes, vs the crypto floor')).toMatchObject({ ratio: 2, pass: false });
  });

  test('without etcd the rows carry quorumfence alone, with no ratio and no verdict', () => {
    const rows = targetRows(system, undefined, 2);
    const hot = rows.find((row) => row.target === '16 clients, one hot resource, handoffs/s')!;
    expect(hot.etcd).toBe('');
    expect(hot.ratio).toBeUndefined();
    expect(hot.pass).toBeUndefined();
  });
});
