/**
 * The seeded sweep's link order (`simulate --link-order fifo|any`, src/simulation/network.ts; docs/testing.md, "Link
 * order"): with `any`, messages on one link overtake each other, and with the default (each link in order, as TCP)
 * none does; the order is part of each run's plan, so a failing run replays from its seed with it. Build first (it
 * runs dist/).
 */
import { describe, expect, it } from 'vitest';
import { runDevCli } from '../support/cli.js';

interface Summary {
  readonly runs: number;
  readonly digest: string;
  readonly linkOrder: string;
  readonly overtaken: number;
  readonly caught?: boolean;
  readonly failedRuns: readonly {
    readonly seed: number;
    readonly violations: readonly string[];
    readonly livenessFailures: readonly string[];
  }[];
}

interface Replayed {
  readonly plan: { readonly linkOrder?: string };
  readonly digest: string;
  readonly overtaken: number;
  readonly violations: readonly string[];
  readonly livenessFailures: readonly string[];
}

async function devJson<T>(args: string[], expectedCode: number): Promise<T> {
  const result = await runDevCli(['simulate', '--json', '--trace', '0', ...args], { timeoutMs: 300_000 });
  expect(result.stderr).toBe('');
  expect(result.code).toBe(expectedCode);
  return JSON.parse(result.stdout) as T;
}

describe('quorumfence-dev simulate --link-order', () => {
  it('any: messages on one link overtake each other; fifo (the default): none does, and the runs differ', async () => {
    const fifo = await devJson<Summary>(['--seed', '5', '--runs', '6', '--workers', '1'], 0);
    const explicit = await devJson<Summary>(
      ['--seed', '5', '--runs', '6', '--workers', '1', '--link-order', 'fifo'],
      0,
    );
    const any = await devJson<Summary>(['--seed', '5', '--runs', '6', '--workers', '1', '--link-order', 'any'], 0);
    expect(fifo).toMatchObject({ runs: 6, linkOrder: 'fifo', overtaken: 0 });
    expect(explicit.digest).toBe(fifo.digest);
    expect(any).toMatchObject({ runs: 6, linkOrder: 'any' });
    expect(any.overtaken).toBeGreaterThan(0);
    expect(any.digest).not.toBe(fifo.digest);
  }, 320_000);

  it('a failing run under any replays from its seed with its order, and differently without it', async () => {
    // A planted bug makes a run fail at once; the replay must give the same verdict and run the same events.
    const swept = await devJson<Summary>(
      [
        '--seed',
        '1',
        '--runs',
        '20',
        '--workers',
        '1',
        '--mutate',
        'replica-skips-s2',
        '--no-shrink',
        '--link-order',
        'any',
      ],
      0,
    );
    expect(swept.caught).toBe(true);
    const failed = swept.failedRuns[0]!;
    const seed = String(failed.seed);
    const replayed = await devJson<Replayed>(
      ['--replay', seed, '--mutate', 'replica-skips-s2', '--link-order', 'any'],
      0,
    );
    expect(replayed.plan.linkOrder).toBe('any');
    expect(replayed.overtaken).toBeGreaterThan(0);
    expect([...replayed.violations, ...replayed.livenessFailures]).toEqual([
      ...failed.violations,
      ...failed.livenessFailures,
    ]);
    const again = await devJson<Replayed>(['--replay', seed, '--mutate', 'replica-skips-s2', '--link-order', 'any'], 0);
    expect(again.digest).toBe(replayed.digest);
    // Replayed in order, the same seed is another run: the order is part of the plan, not of the seed alone.
    const inOrder = await runDevCli(
      ['simulate', '--json', '--trace', '0', '--replay', seed, '--mutate', 'replica-skips-s2'],
      {
        timeoutMs: 120_000,
      },
    );
    const ordered = JSON.parse(inOrder.stdout) as Replayed;
    expect(ordered.plan.linkOrder).toBeUndefined();
    expect(ordered.overtaken).toBe(0);
    expect(ordered.digest).not.toBe(replayed.digest);
  }, 320_000);

  it('refuses an unknown link order with INVALID_OPTION (exit 2)', async () => {
    const result = await runDevCli(['simulate', '--link-order', 'sometimes', '--runs', '1'], { timeoutMs: 30_000 });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('INVALID_OPTION');
    expect(result.stdout).toBe('');
  }, 60_000);
});
