/**
 * The deterministic simulator through its command (docs/testing.md), as CI runs it: a fixed budget of seeded
 * scenarios with no violation and no liveness failure, the same digest for the same seeds whatever the number of
 * worker threads, every planted bug caught within 300 runs of seed 1 (so the checks can fail), a caught run
 * replayed from its seed with the same verdict, and bad flags refused with their code; and the timing scenarios
 * (`--timing`): every fast path within its one-round-trip bound, and each planted bug that only costs time caught
 * there. Build first (it runs dist/).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { MUTATIONS } from '../../src/simulation/mutations.js';
import { runDevCli } from '../support/cli.js';
import { fencedBlocks } from '../support/doc-blocks.js';

/** About a minute of CPU on the 2-core CI machine with simulated crypto (about 30 ms a scenario). */
const BUDGET_RUNS = 1_000;
const SEED = 20261126;

/**
 * The command docs/testing.md ("Running it") documents and the digest it publishes for it: the budget run is
 * that command, as written, so the published digest is checked. A protocol change changes the digest on
 * purpose; the one place to update is that line of docs/testing.md.
 */
const TESTING_MD = readFileSync(new URL('../../docs/testing.md', import.meta.url), 'utf8');
const DOCUMENTED_COMMAND = fencedBlocks('docs/testing.md', TESTING_MD)
  .flatMap((block) => block.code.split('\n'))
  .find((line) => line.includes('quorumfence-dev.js simulate'));
const DOCUMENTED_DIGEST = /^expected digest: `([0-9a-f]{64})`$/m.exec(TESTING_MD)?.[1];

interface Summary {
  readonly runs: number;
  readonly violations: number;
  readonly livenessFailures: number;
  readonly digest: string;
  readonly failedRuns: readonly {
    readonly seed: number;
    readonly violations: readonly string[];
    readonly livenessFailures: readonly string[];
  }[];
  readonly caught?: boolean;
  readonly caughtAtRun?: number | null;
}

interface TimingResult {
  readonly name: string;
  readonly samples: number;
  readonly maxRoundTrips: number;
  readonly boundRoundTrips: number;
  readonly failures: readonly string[];
}

async function simulate(args: string[], timeoutMs: number): Promise<Summary> {
  const result = await runDevCli(['simulate', '--json', ...args], { timeoutMs });
  expect(result.stderr).toBe('');
  return JSON.parse(result.stdout) as Summary;
}

describe('quorumfence-dev simulate', () => {
  it(`${BUDGET_RUNS} seeded scenarios, the command docs/testing.md documents: no violation, no liveness failure, the digest it publishes`, async () => {
    // node dist/nodes/quorumfence-dev.js simulate ... --json: the words after the program, as written.
    const args = DOCUMENTED_COMMAND?.trim().split(/\s+/).slice(2) ?? [];
    expect(args, 'the simulate command of docs/testing.md, "Running it"').toEqual([
      'simulate',
      '--seed',
      String(SEED),
      '--runs',
      String(BUDGET_RUNS),
      '--workers',
      '2',
      '--json',
    ]);
    const result = await runDevCli(args, { timeoutMs: 600_000 });
    expect(result.stderr).toBe('');
    const summary = JSON.parse(result.stdout) as Summary;
    expect(summary.failedRuns).toEqual([]);
    expect(summary).toMatchObject({ runs: BUDGET_RUNS, violations: 0, livenessFailures: 0 });
    expect(
      summary.digest,
      `the digest docs/testing.md publishes ("expected digest:"). After a deliberate protocol change, put ${summary.digest} there (the one place it is written); otherwise the simulation is no longer deterministic`,
    ).toBe(DOCUMENTED_DIGEST);
  }, 620_000);

  it.each([
    // Found by a 5,000-run sweep of seed 7: replica 1 (Byzantine) was pushed far ahead by the malicious client, led
    // the line and named its own epoch as each waiter's turn; the honest replicas answered too_far, and every
    // release of its lone grant raised the client's epoch floor, until no honest replica could grant again.
    [
      'a pushed-ahead Byzantine leader that names its own epoch as every turn no longer locks the hot resource out',
      '2427017817',
    ],
    // Found by a 5,000-run sweep: the same lockout by another path. Replica 1 (Byzantine, partials signed with a
    // wrong key) pushed far ahead granted every leader-first attempt; an honest replica caught up with its partial as
    // evidence refused it, but counted as a possible holder while its answer travelled, and so raised the floor.
    ["a lagging replica caught up with a liar's partial no longer counts as holding the released grant", '1945335599'],
    // Found by a 5,000-run sweep of seed 11: the client had learnt a grant time whose 3x (the wait before asking past
    // the first signers) exceeded the request timeout, and two of its first signers were silent or slow; every
    // attempt then ended without asking the other replicas, until the acquire timed out.
    ['an acquire whose first signers stay silent asks the others within every attempt', '3008025206'],
    // Found by the same sweep, a false violation: a token obtained after the client moved to the new set (its
    // operation had started before a reshare and retried) was counted in the old set's generation.
    ['a token obtained across a reshare counts in the generation that granted it', '233359809'],
    // Found by a 5,000-run sweep, in a run with no fault at all: at the leader, a waiter decided busy had not yet
    // joined the line when the holder's request for its next turn was decided, and was granted past it
    // (test/integration/replica-line-order.test.ts pins the same schedule on a real replica service).
    ['a holder asking for its next turn right behind a waiter no longer overtakes it in the line', '1346954583'],
  ])(
    '%s (run %s)',
    async (_what, seed) => {
      const result = await runDevCli(['simulate', '--json', '--replay', seed], { timeoutMs: 120_000 });
      expect(result.stderr).toBe('');
      const run = JSON.parse(result.stdout) as { violations: string[]; livenessFailures: string[] };
      expect(run.violations).toEqual([]);
      expect(run.livenessFailures).toEqual([]);
    },
    130_000,
  );

  it('the same seeds give the same digest, in one thread or two; another seed gives another', async () => {
    const one = await simulate(['--seed', '7', '--runs', '20', '--workers', '1'], 300_000);
    const two = await simulate(['--seed', '7', '--runs', '20', '--workers', '2'], 300_000);
    const other = await simulate(['--seed', '8', '--runs', '20', '--workers', '2'], 300_000);
    expect(two.digest).toBe(one.digest);
    expect(other.digest).not.toBe(one.digest);
  }, 620_000);

  it.each(MUTATIONS.filter((mutation) => mutation.caughtBy !== 'timing').map((mutation) => [mutation.name]))(
    'the planted bug %s is caught within 300 runs of seed 1, and its run replays from its seed',
    async (name) => {
      // --no-shrink: the catching run and its replay are what this checks; shrinking it would only cost time.
      const summary = await simulate(
        ['--seed', '1', '--runs', '300', '--mutate', name, '--trace', '0', '--no-shrink'],
        300_000,
      );
      expect(summary.caught).toBe(true);
      expect(summary.caughtAtRun).toBeLessThan(300);
      const failed = summary.failedRuns[0]!;
      const replay = await runDevCli(
        ['simulate', '--replay', String(failed.seed), '--mutate', name, '--json', '--trace', '0'],
        {
          timeoutMs: 120_000,
        },
      );
      // With --mutate, exit 0 means the run failed a check again.
      expect(replay.code).toBe(0);
      const replayed = JSON.parse(replay.stdout) as { violations: string[]; livenessFailures: string[] };
      expect([...replayed.violations, ...replayed.livenessFailures]).toEqual([
        ...failed.violations,
        ...failed.livenessFailures,
      ]);
    },
    320_000,
  );

  it('timing: a hot handoff, a cycle and a first acquire (floors apart) each cost one round trip', async () => {
    const result = await runDevCli(['simulate', '--timing', '--json'], { timeoutMs: 120_000 });
    expect(result.code).toBe(0);
    const { results } = JSON.parse(result.stdout) as { results: TimingResult[] };
    expect(results.map((r) => r.name)).toEqual(expect.arrayContaining([expect.stringMatching(/^hot line/)]));
    for (const r of results) {
      expect(r.failures, r.name).toEqual([]);
      expect(r.samples, r.name).toBeGreaterThan(0);
      expect(r.maxRoundTrips, r.name).toBeLessThanOrEqual(r.boundRoundTrips);
    }
  }, 130_000);

  it.each(MUTATIONS.filter((mutation) => mutation.caughtBy === 'timing').map((mutation) => [mutation.name]))(
    'timing: the planted bug %s takes some fast path over its bound (or asks more than the t first signers)',
    async (name) => {
      const result = await runDevCli(['simulate', '--timing', '--mutate', name, '--json'], { timeoutMs: 120_000 });
      // With --mutate, exit 0 means some scenario failed.
      expect(result.code).toBe(0);
      const { results } = JSON.parse(result.stdout) as { results: TimingResult[] };
      // A fast path over its bound, or (client-asks-everyone-at-once) a first acquire answered by more replicas
      // than the t first signers it should have asked.
      const timingFailure = /over \d+ ms|acquire requests answered, expected the t = \d+ first signers/;
      expect(results.some((r) => r.failures.some((failure) => timingFailure.test(failure)))).toBe(true);
    },
    130_000,
  );

  it('refuses an unknown mutation, crypto or flag with INVALID_OPTION (exit 2)', async () => {
    for (const args of [
      ['--mutate', 'no-such-bug'],
      ['--crypto', 'quantum'],
      ['--surprise'],
      ['--mutate', 'release-waits-for-answers'],
    ]) {
      const result = await runDevCli(['simulate', ...args], { timeoutMs: 30_000 });
      expect(result.code).toBe(2);
      expect(result.stderr).toContain('INVALID_OPTION');
      expect(result.stdout).toBe('');
    }
  }, 120_000);

  it('lists its mutations with what each breaks', async () => {
    const result = await runDevCli(['simulate', '--list-mutations', '--json'], { timeoutMs: 30_000 });
    expect(result.code).toBe(0);
    const listed = JSON.parse(result.stdout) as { name: string; breaks: string }[];
    expect(listed.map((m) => m.name)).toEqual(MUTATIONS.map((m) => m.name));
    for (const m of listed) expect(m.breaks.length).toBeGreaterThan(0);
  }, 60_000);
});
