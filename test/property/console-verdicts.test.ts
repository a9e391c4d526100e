/**
 * The console's verdicts under every fault up to f (docs/console.md, "Why these rules"), over generated cluster
 * histories (test/support/console-cluster-model.ts): honest acquires that ask t signers first (sometimes
 * widened), lone grants by a malicious client at single replicas, compaction, up to f honest replicas crashed
 * or partitioned from the console, and up to f Byzantine replicas lying as src/testing/byzantine/lies.ts does.
 *
 * - no honest replica is ever shown faulty;
 * - the margin is never below the true margin (honest replicas that answered, minus 2f+1);
 * - every lie that is provable is caught, in the poll it is told, and stays caught;
 * - every lease shown is listed by some honest replica.
 *
 * The rule this replaces (a claim above the (f+1)-th largest epoch of the others, for 3 polls) is planted
 * below and must fail the first property: it convicted the signers of a lease once one of them was down.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fPlusOneLargest } from '../../src/client/epoch-choice.js';
import { ConsoleJudge, confirmedLeases, quorumMargin, type ReplicaObservation } from '../../src/console/view.js';
import {
  leaseId,
  runScenario,
  scenarioArbitrary,
  type LieKind,
  type Scenario,
} from '../support/console-cluster-model.js';

interface Judge {
  poll(
    observations: readonly ReplicaObservation[],
    at: string,
  ): { replicas: readonly { replica: number; reachable: boolean; faulty: string | null }[]; margin: number };
}

/** The lies a console can prove from its own polls, and whether this one is. */
function provable(lie: LieKind, positiveEarlierOnThisConnection: boolean): boolean {
  if (lie === 'huge' || lie === 'protocol' || lie === 'identity') return true;
  // lie-epoch-zero after an honest answer with a positive epoch on the same connection: a record went down.
  return lie === 'zero' && positiveEarlierOnThisConnection;
}

/** Checks the properties on one scenario; returns the first violation (or undefined). */
function violations(scenario: Scenario, judge: Judge): string | undefined {
  const { f } = scenario;
  let found: string | undefined;
  const convicted = new Set<number>();
  /** Per replica: it reported a positive epoch on its current connection. */
  const positive = new Map<number, boolean>();
  runScenario(scenario, (poll, index) => {
    if (found) return;
    const at = new Date(Date.UTC(2026, 0, 1, 0, 0, index)).toISOString();
    const verdict = judge.poll(poll.observations, at);
    for (const row of verdict.replicas) {
      const lie = poll.behaviour.get(row.replica)!;
      const honest = !scenario.byzantine.includes(row.replica);
      const o = poll.observations.find((x) => x.replica === row.replica)!;
      if (o.newConnection) positive.set(row.replica, false);
      if (honest && row.faulty !== null)
        found ??= `poll ${index}: honest replica ${row.replica} shown faulty: ${row.faulty}`;
      // A crashed or partitioned liar says nothing this poll.
      const told = o.answer !== 'unreachable' && provable(lie, positive.get(row.replica) ?? false);
      if (!honest && told && row.faulty === null)
        found ??= `poll ${index}: replica ${row.replica} told ${lie} and not caught`;
      if (convicted.has(row.replica) && row.faulty === null)
        found ??= `poll ${index}: replica ${row.replica} was caught before and is not now`;
      if (row.faulty !== null) convicted.add(row.replica);
      if (o.answer === 'ok' && [...o.statusEpochs.values()].some((e) => e > 0n)) positive.set(row.replica, true);
    }
    const trueMargin = quorumMargin(poll.honestAnswered.size, f);
    if (verdict.margin < trueMargin) found ??= `poll ${index}: margin ${verdict.margin} below the true ${trueMargin}`;
    for (const lease of confirmedLeases(poll.observations, f))
      if (!poll.honestLeases.has(leaseId(lease.resource, lease.epoch, lease.holder)))
        found ??= `poll ${index}: lease ${lease.resource}@${lease.epoch} shown, no honest replica lists it`;
  });
  return found;
}

describe('the console’s verdicts under up to f crashed and up to f lying replicas', () => {
  it('never shows an honest replica faulty, never a margin below the true one, and catches every provable lie', () => {
    fc.assert(
      fc.property(scenarioArbitrary(), (scenario) => {
        expect(violations(scenario, new ConsoleJudge(scenario.f))).toBeUndefined();
      }),
      { numRuns: 400 },
    );
  });

  it('the margin equals the true one when no replica lies, with up to f crashed (the outage of issue 29)', () => {
    fc.assert(
      fc.property(
        scenarioArbitrary().map((s) => ({ ...s, byzantine: [] })),
        (scenario) => {
          const judge = new ConsoleJudge(scenario.f);
          runScenario(scenario, (poll, index) => {
            const verdict = judge.poll(poll.observations, new Date(index * 1000).toISOString());
            expect(verdict.margin).toBe(quorumMargin(poll.honestAnswered.size, scenario.f));
          });
        },
      ),
      { numRuns: 200 },
    );
  });
});

/**
 * The rule of issue 15, planted: a replica whose highest claimed epoch for a resource is above the (f+1)-th
 * largest epoch the others report, 3 polls in a row, is faulty.
 */
class PreviousRule implements Judge {
  readonly #f: number;
  readonly #streaks = new Map<number, number>();
  constructor(f: number) {
    this.#f = f;
  }
  poll(observations: readonly ReplicaObservation[]) {
    const contradicting = new Set<number>();
    for (const o of observations)
      for (const resource of o.statusEpochs.keys()) {
        let claimed = o.statusEpochs.get(resource)!;
        for (const lease of o.leases ?? [])
          if (lease.resource === resource && lease.epoch > claimed) claimed = lease.epoch;
        const others = observations
          .filter((other) => other.replica !== o.replica)
          .map((other) => other.statusEpochs.get(resource))
          .filter((epoch): epoch is bigint => epoch !== undefined);
        const confirmed = fPlusOneLargest(others, this.#f);
        if (confirmed !== undefined && claimed > confirmed) contradicting.add(o.replica);
      }
    for (const o of observations)
      this.#streaks.set(o.replica, contradicting.has(o.replica) ? (this.#streaks.get(o.replica) ?? 0) + 1 : 0);
    const replicas = observations.map((o) => ({
      replica: o.replica,
      reachable: o.answer === 'ok',
      faulty: o.answer === 'protocol' || (this.#streaks.get(o.replica) ?? 0) >= 3 ? 'contradiction' : null,
    }));
    const available = replicas.filter((r) => r.reachable && r.faulty === null).length;
    return { replicas, margin: quorumMargin(available, this.#f) };
  }
}

describe('the property has teeth', () => {
  it('fails for the previous rule, which convicted honest signers once one of them was down', () => {
    const result = fc.check(
      fc.property(scenarioArbitrary(), (scenario) => violations(scenario, new PreviousRule(scenario.f)) === undefined),
      { numRuns: 400, seed: 29 },
    );
    expect(result.failed).toBe(true);
    const [counterexample] = result.counterexample!;
    expect(violations(counterexample, new PreviousRule(counterexample.f))).toMatch(/honest replica \d+ shown faulty/);
  });

  it('catches a phantom lease at 2^63-1 and a record that goes down, and not a lone grant far ahead', () => {
    const judge = new ConsoleJudge(1);
    const status = (epoch: bigint) => new Map([['orders', epoch]]);
    const base = { leases: [], newConnection: false, identityMismatch: null, answer: 'ok' as const };
    const lone = 3n + 1_000_000n;
    const first = judge.poll(
      [
        { ...base, replica: 1, statusEpochs: status(lone) }, // a lone grant at replica 1: honest
        { ...base, replica: 2, statusEpochs: status(3n) },
        { ...base, replica: 3, statusEpochs: status(3n) },
        {
          ...base,
          replica: 4,
          statusEpochs: status(5n),
          leases: [
            { resource: 'byzantine/phantom', epoch: (1n << 63n) - 1n, holder: new Uint8Array(32), remainingMs: 1 },
          ],
        },
      ],
      '2026-01-01T00:00:00.000Z',
    );
    expect(first.replicas.map((r) => r.faulty === null)).toEqual([true, true, true, false]);
    expect(first.replicas[3]!.faulty).toContain('9223372036854775807');
    const second = judge.poll(
      [1, 2, 3, 4].map((replica) => ({ ...base, replica, statusEpochs: status(replica === 2 ? 1n : 5n + lone) })),
      '2026-01-01T00:00:01.000Z',
    );
    expect(second.replicas[1]!.faulty).toMatch(/reports epoch 1 for "orders" after reporting 3/);
    expect(second.margin).toBe(quorumMargin(2, 1));
  });
});
