/**
 * The `leases` answer from the lease table's end index (issue 30, finding 6): whatever the sequence of grants,
 * renewals, releases, forgotten records, sweeps and clock advances, the answer lists exactly the `limit` running,
 * listable leases ending last (ending last first) with `more` telling whether some were left out, and examines at
 * most its bound of entries; when the bound stops the walk, what it lists is still running, listable and in order,
 * and `more` says the list may be incomplete.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/common/clock.js';
import { LeaseTable, MAX_LEASES_EXAMINED, latestLeases } from '../../src/replica/leases.js';
import type { SignedRecord } from '../../src/replica/policy.js';

/** Buckets of 10 ms (maxTtl/1024): short leases granted together share one, so the walk's bucket rule is exercised. */
const MAX_TTL_MS = 10_240;
const RESOURCES = Array.from({ length: 24 }, (_, k) => `r${k}`);
const record: SignedRecord = { epoch: 1n, holder: new Uint8Array(32).fill(1), grantDigest: new Uint8Array(32) };

type Step =
  | { kind: 'set'; resource: number; ttlMs: number }
  | { kind: 'release' | 'forget'; resource: number }
  | { kind: 'advance'; ms: number }
  | { kind: 'sweep' };

const resourceArb = fc.integer({ min: 0, max: RESOURCES.length - 1 });
const stepArb: fc.Arbitrary<Step> = fc.oneof(
  // TTLs up to maxTtl; short ones (several to a bucket), equal ones (ties), and 1 ms leases that end at once.
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('set' as const),
      resource: resourceArb,
      ttlMs: fc.oneof(
        fc.integer({ min: 1, max: MAX_TTL_MS }),
        fc.integer({ min: 1, max: 9 }),
        fc.integer({ min: 1, max: 40 }),
        fc.constantFrom(1, 500, MAX_TTL_MS),
      ),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constantFrom('release' as const, 'forget' as const), resource: resourceArb }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('advance' as const),
      ms: fc.oneof(fc.integer({ min: 0, max: 20 }), fc.integer({ min: 0, max: 15_000 })),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: 'sweep' as const }) },
);

/** Plays `steps` on a table and on a plain model of the lease ends; answers both. */
function play(steps: readonly Step[]) {
  const clock = new ManualClock(10_000);
  const table = new LeaseTable(clock, MAX_TTL_MS, 0);
  const ends = new Map<string, number>();
  const released = new Set<string>();
  for (const step of steps) {
    if (step.kind === 'advance') clock.advance(step.ms);
    else if (step.kind === 'sweep') table.sweep();
    else {
      const resource = RESOURCES[step.resource]!;
      if (step.kind === 'set') {
        const endsAt = clock.now() + step.ttlMs;
        table.set(resource, record, endsAt);
        ends.set(resource, endsAt);
        released.delete(resource);
      } else if (step.kind === 'release') {
        table.release(resource, record);
        ends.set(resource, 0);
        released.add(resource);
      } else {
        table.forget(resource);
        ends.delete(resource);
        released.delete(resource);
      }
    }
  }
  return { clock, table, ends, released };
}

describe('the lease end index behind `leases`', () => {
  it('lists exactly the `limit` listable running leases ending last, latest first, and says when it left some out', () => {
    fc.assert(
      fc.property(
        fc.array(stepArb, { maxLength: 120 }),
        fc.integer({ min: 1, max: 6 }),
        fc.func(fc.boolean()),
        (steps, limit, listable) => {
          const { clock, table, ends } = play(steps);
          const now = clock.now();
          const listed = (resource: string) => listable(resource) as boolean;
          const expected = [...ends]
            .filter(([resource, end]) => end > now && listed(resource))
            .sort((a, b) => b[1] - a[1]);
          let examined = 0;
          const answer = latestLeases(
            table.runningLatestFirst(),
            (resource, endsAt) => {
              examined++;
              return listed(resource) ? { resource, endsAt } : undefined;
            },
            limit,
          );
          expect(examined).toBeLessThanOrEqual(MAX_LEASES_EXAMINED);
          // Ties may come in either order; the ends, and each resource's own end, must match.
          expect(answer.leases.map((l) => l.endsAt)).toEqual(expected.slice(0, limit).map(([, end]) => end));
          for (const lease of answer.leases) expect(ends.get(lease.resource)).toBe(lease.endsAt);
          expect(answer.more).toBe(expected.length > limit);
        },
      ),
    );
  });

  it('with the walk bounded below what runs: examines at most the bound, lists only running listable leases in order, and says more', () => {
    fc.assert(
      fc.property(
        fc.array(stepArb, { maxLength: 120 }),
        fc.integer({ min: 1, max: 6 }),
        fc.integer({ min: 1, max: 8 }),
        fc.func(fc.boolean()),
        (steps, limit, maxExamined, listable) => {
          const { clock, table, ends } = play(steps);
          const now = clock.now();
          const listed = (resource: string) => listable(resource) as boolean;
          const expected = [...ends].filter(([resource, end]) => end > now && listed(resource));
          let examined = 0;
          const answer = latestLeases(
            table.runningLatestFirst(),
            (resource, endsAt) => {
              examined++;
              return listed(resource) ? { resource, endsAt } : undefined;
            },
            limit,
            maxExamined,
          );
          expect(examined).toBeLessThanOrEqual(maxExamined);
          expect(answer.leases.length).toBeLessThanOrEqual(limit);
          for (const lease of answer.leases) {
            expect(ends.get(lease.resource)).toBe(lease.endsAt);
            expect(lease.endsAt).toBeGreaterThan(now);
            expect(listed(lease.resource)).toBe(true);
          }
          const listedEnds = answer.leases.map((l) => l.endsAt);
          expect(listedEnds).toEqual([...listedEnds].sort((a, b) => b - a));
          // Whatever is missing from the answer, `more` owns up to it.
          if (answer.leases.length < Math.min(limit, expected.length)) expect(answer.more).toBe(true);
          if (!answer.more) expect(answer.leases.length).toBe(Math.min(limit, expected.length));
        },
      ),
    );
  });

  it('finishes the bucket it is in before it stops: a later end inserted last into a shared bucket is still listed', () => {
    const clock = new ManualClock(0);
    const table = new LeaseTable(clock, MAX_TTL_MS, 0);
    table.set('low', record, 5_000); // a lower bucket
    for (const [resource, endsAt] of [
      ['first', 9_001],
      ['second', 9_002],
      ['last', 9_009],
    ] as const)
      table.set(resource, record, endsAt); // one 10 ms bucket, latest inserted last
    const answer = latestLeases(table.runningLatestFirst(), (resource, endsAt) => ({ resource, endsAt }), 1);
    expect(answer).toEqual({ leases: [{ resource: 'last', endsAt: 9_009 }], more: true });
  });

  it('yields only leases with an entry of their own: released, forgotten and restart-rule leases are not walked', () => {
    const clock = new ManualClock(0);
    const table = new LeaseTable(clock, 1_000, 5); // five records from before a restart, none touched
    table.set('a', record, 900);
    table.set('b', record, 800);
    table.set('c', undefined, 700);
    table.release('b', record);
    table.forget('c');
    expect([...table.runningLatestFirst()].map((e) => e.resource)).toEqual(['a']);
    expect(table.activeCount()).toBe(4); // a, plus the three restart-rule leases nobody touched (a and b were)
    clock.advance(900);
    expect([...table.runningLatestFirst()]).toEqual([]);
  });
});
