/**
 * `quorumfence-dev chaos` as a user runs it (a real process): a short soak ends by
 * itself with a clean history and a report; bad flags are one line and exit 2.
 * The soak itself is the product here; longer runs: `quorumfence-dev chaos --duration 3m`.
 */
import { describe, expect, it } from 'vitest';
import type { ChaosReport } from '../../src/testing/chaos.js';
import { runDevCli } from '../support/cli.js';

describe('quorumfence-dev chaos', () => {
  it('a short seeded soak stops by itself, injects faults, and finds no violation', async () => {
    const result = await runDevCli(['chaos', '--duration', '6s', '--seed', '3', '--json'], { timeoutMs: 90_000 });
    expect(result.code, result.stderr).toBe(0);
    const report = JSON.parse(result.stdout) as ChaosReport;
    expect(report.seed).toBe(3);
    expect(report.violations).toEqual([]);
    expect(report.counterMismatches).toEqual([]);
    expect(report.unreadCounters).toEqual([]);
    expect(report.operations).toBeGreaterThan(0);
    expect(report.accepted).toBeGreaterThan(0);
    expect(Object.values(report.faults).reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    expect(result.stderr).toMatch(/seed 3/);
  }, 90_000);

  // Issue 16, finding 6: the 7-replica run (f = 2) ended with a counter "value 0" that was a failed final read
  // (test/integration/finding-6-chaos-counter.test.ts). CI soaks this size too, with the seed of the report.
  it('a 7-replica soak (f = 2) ends clean: no violation, every counter read and equal to its accepted writes', async () => {
    const result = await runDevCli(['chaos', '--replicas', '7', '--duration', '45s', '--seed', '777', '--json'], {
      timeoutMs: 150_000,
    });
    expect(result.code, result.stderr).toBe(0);
    const report = JSON.parse(result.stdout) as ChaosReport;
    expect(report).toMatchObject({ seed: 777, replicas: 7, f: 2, byzantine: [6, 7] });
    expect(report.violations).toEqual([]);
    expect(report.counterMismatches).toEqual([]);
    expect(report.unreadCounters).toEqual([]);
    expect(report.accepted).toBeGreaterThan(0);
    expect(report.kills + Object.values(report.faults).reduce((a, b) => a + b, 0)).toBeGreaterThan(10);
  }, 150_000);

  it('refuses a cluster size other than 4 or 7', async () => {
    const result = await runDevCli(['chaos', '--replicas', '5']);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/--replicas expects 4 or 7.*INVALID_OPTION/);
  });
});
