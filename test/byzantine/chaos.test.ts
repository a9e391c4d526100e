/**
 * `quorumfence-dev chaos` as a user runs it (a real process): a short soak ends by
 * itself with a clean history and a report; bad flags are one line and exit 2.
 * The soak itself is the product here; longer runs: `quorumfence-dev chaos --duration 3m`.
 * With --reshare, a replica is replaced in the middle (real replica processes frozen
 * live, `reshare run` per member, inherited records, an endorsed membership the clients
 * follow) and the history stays clean; a run whose new replicas skip the inheritance
 * (planted) is caught by the history check.
 */
import { describe, expect, it } from 'vitest';
import { runChaos, type ChaosReport } from '../../src/testing/chaos.js';
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
    const result = await runDevCli(['chaos', '--replicas', '7', '--duration', '20s', '--seed', '777', '--json'], {
      timeoutMs: 120_000,
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

  it('--reshare: a replica is replaced in the middle while clients acquire and Byzantine replicas act; the history stays clean', async () => {
    const result = await runDevCli(['chaos', '--duration', '20s', '--seed', '12', '--reshare', '--json'], {
      timeoutMs: 240_000,
    });
    expect(result.code, result.stderr).toBe(0);
    const report = JSON.parse(result.stdout) as ChaosReport;
    expect(report.violations).toEqual([]);
    expect(report.counterMismatches).toEqual([]);
    expect(report.unreadCounters).toEqual([]);
    // The reshare happened: a new membership with the same cluster id and group key, dealt by the survivors.
    const reshare = report.reshare!;
    expect(reshare.error).toBeUndefined();
    expect(reshare.done).toBe(true);
    const summary = reshare.summary!;
    expect(summary.membershipVersion).toEqual({ before: 0, after: 1 });
    expect(summary).toMatchObject({ clusterIdUnchanged: true, groupKeyUnchanged: true, lostDataDirUnused: true });
    expect(summary.dealers).toEqual([1, 2, 3, 4].filter((i) => i !== summary.replaced));
    expect(summary.newDataDir).not.toBe(summary.lostDataDir);
    for (const from of Object.values(summary.inheritedFrom)) expect(from).toHaveLength(3);
    // Grants were made, and writes accepted, under both memberships: the workload went on across the change.
    expect(reshare.tokensByGeneration['0']).toBeGreaterThan(0);
    expect(reshare.tokensByGeneration['1']).toBeGreaterThan(0);
    expect(reshare.acceptedWritesByGeneration['1']).toBeGreaterThan(0);
    // Progress showed the steps.
    expect(result.stderr).toMatch(/reshare: freeze replicas/);
    expect(result.stderr).toMatch(/reshare member 1: phase deal/);
    expect(result.stderr).toMatch(/reshare: clients and the holder follow membership 1/);
  }, 240_000);

  it('--reshare with the inheritance skipped (planted): the new set re-grants old epochs and the history check reports it', async () => {
    const report = await runChaos({
      durationMs: 6_000,
      seed: 21,
      replicas: 4,
      workers: 2,
      reshare: true,
      plantSkipInheritance: true,
    });
    expect(report.reshare?.done).toBe(true);
    expect(report.reshare?.tokensByGeneration['1']).toBeGreaterThan(0);
    const kinds = report.violations.map((v) => v.split('\n')[0]);
    expect(kinds).toContainEqual(expect.stringMatching(/was granted again after a reshare/));
    expect(kinds).toContainEqual(expect.stringMatching(/two valid tokens for/));
  }, 240_000);

  it('refuses a cluster size other than 4 or 7', async () => {
    const result = await runDevCli(['chaos', '--replicas', '5']);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/--replicas expects 4 or 7.*INVALID_OPTION/);
  });
});
