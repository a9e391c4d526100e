/**
 * S1 across a reshare, over interleavings: grants by the old set, freezes of
 * old members, new members inheriting the frozen records, and grants by the
 * new set, in any order, with f_old Byzantine old members (signing anything,
 * and reporting low, absurdly high, other holders' or no records) and f_new
 * Byzantine new members (signing anything, inheriting nothing). The rules are
 * the replica's own: `mayReplace` decides every honest signature and
 * `inheritRecords` every inheritance. Both generations' tokens verify under
 * the one group key, so a guard sees them as one history.
 *
 * Checked: never two tokens for one (resource, epoch) with different holders,
 * and every token of the new set lies above every token of the old set for its
 * resource (or is the same grant again), so guards that accepted an old token
 * accept the new ones and refuse nothing they should accept.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { inheritRecords, unbackedLeadAllowed, type OldRecordReport } from '../../src/replica/inherit.js';
import { mayReplace } from '../../src/replica/check-and-record.js';
import type { SignedRecord } from '../../src/replica/policy.js';
import type { RecordEntry } from '../../src/replica/signing-record.js';
import { grantDigest } from '../../src/token/grant.js';

/** The v2 cluster id depends on the group key alone, so it is the same before and after a reshare. */
const clusterId = new Uint8Array(32).fill(7);
const holders = [0xa1, 0xb2, 0xc3].map((b) => new Uint8Array(32).fill(b));
const resources = ['orders', 'stock'] as const;

function signed(resource: string, epoch: bigint, holder: Uint8Array): SignedRecord {
  return { epoch, holder, grantDigest: grantDigest({ clusterId, resource, epoch, holder }) };
}

interface Token {
  readonly generation: 0 | 1;
  readonly resource: string;
  readonly epoch: bigint;
  readonly holder: number;
}

type Lie = 'low' | 'absurd' | 'other-holder' | 'silent' | 'truthful';

type Step =
  | {
      readonly kind: 'grant';
      readonly generation: 0 | 1;
      readonly resource: number;
      readonly epoch: number;
      readonly holder: number;
      /** Which members the client asks, in order, and how many beyond t. */
      readonly order: readonly number[];
      readonly extra: number;
    }
  | { readonly kind: 'freeze'; readonly member: number }
  | { readonly kind: 'inherit'; readonly member: number; readonly reporters: readonly number[]; readonly lie: Lie };

const grantStep = fc.record({
  kind: fc.constant('grant' as const),
  generation: fc.constantFrom(0 as const, 1 as const),
  resource: fc.nat(resources.length - 1),
  epoch: fc.integer({ min: 1, max: 12 }),
  holder: fc.nat(holders.length - 1),
  order: fc.array(fc.nat(), { minLength: 7, maxLength: 7 }),
  extra: fc.nat(3),
});
const freezeStep = fc.record({ kind: fc.constant('freeze' as const), member: fc.nat(6) });
const inheritStep = fc.record({
  kind: fc.constant('inherit' as const),
  member: fc.nat(6),
  reporters: fc.array(fc.nat(), { minLength: 7, maxLength: 7 }),
  lie: fc.constantFrom<Lie>('low', 'absurd', 'other-holder', 'silent', 'truthful'),
});
const anyStep: fc.Arbitrary<Step> = fc.oneof(
  { weight: 3, arbitrary: grantStep },
  { weight: 1, arbitrary: freezeStep },
  { weight: 1, arbitrary: inheritStep },
);

/**
 * A run: grants before; then any interleaving of grants (by either set), freezes and inheritances;
 * then every remaining old member frozen and every new member inheriting (each from its own choice of
 * reporters, each Byzantine reporter with its own lie); then grants after.
 */
function runOf(oldF: number, newF: number): fc.Arbitrary<Step[]> {
  const closing = fc.tuple(
    ...Array.from({ length: 3 * newF + 1 }, (_, k) => inheritStep.map((s) => ({ ...s, member: k }) satisfies Step)),
  );
  return fc
    .tuple(
      fc.array(grantStep, { maxLength: 12 }),
      fc.array(anyStep, { maxLength: 30 }),
      closing,
      fc.array(grantStep, { maxLength: 16 }),
    )
    .map(([before, during, inherits, after]) => [
      ...before,
      ...during,
      ...Array.from({ length: 3 * oldF + 1 }, (_, k): Step => ({ kind: 'freeze', member: k })),
      ...inherits,
      ...after,
    ]);
}

/** Members 1..n ordered by the step's choice (ties by index). */
function ordered(n: number, order: readonly number[]): number[] {
  return Array.from({ length: n }, (_, k) => k + 1).sort((x, y) => order[x - 1]! - order[y - 1]! || x - y);
}

interface Run {
  readonly tokens: Token[];
  /** Runs where both sets issued a token for one resource: the interesting ones, counted so the test is not vacuous. */
  readonly crossed: boolean;
}

/**
 * Plays the steps. `inheritFrom` lets a mutation check shrink the quorum of reports (the real rule is
 * 2f_old+1); the property must then fail.
 */
function play(
  oldF: number,
  newF: number,
  byzantineOld: ReadonlySet<number>,
  byzantineNew: ReadonlySet<number>,
  steps: readonly Step[],
  inheritFrom = (f: number) => 2 * f + 1,
): Run {
  const oldN = 3 * oldF + 1;
  const newN = 3 * newF + 1;
  const old = new Map<number, { records: Map<string, SignedRecord>; frozen: boolean }>();
  for (let i = 1; i <= oldN; i++) if (!byzantineOld.has(i)) old.set(i, { records: new Map(), frozen: false });
  /** Honest new members that have inherited; until then they sign nothing. */
  const fresh = new Map<number, { records: Map<string, SignedRecord>; floor: bigint }>();
  const tokens: Token[] = [];

  const reportOf = (replica: number, lie: Lie): OldRecordReport => {
    const honest = old.get(replica);
    if (honest) {
      return { replica, floor: 0n, entries: [...honest.records].map(([resource, record]) => ({ resource, record })) };
    }
    // A Byzantine old member reports whatever it likes, built from what it saw issued.
    const issued = tokens.filter((t) => t.generation === 0);
    const entries: RecordEntry[] = [];
    switch (lie) {
      case 'silent':
        break;
      case 'low':
        for (const r of resources) entries.push({ resource: r, record: signed(r, 1n, holders[2]!) });
        break;
      case 'absurd':
        // As high as a lie may go and still be inherited whatever the others report: 2^62 and above is refused as
        // impossible, and so is a value more than 1/1024 of the epochs left below 2^62 above what f+1 reports back.
        entries.push({ resource: resources[0], record: signed(resources[0], unbackedLeadAllowed(0n), holders[2]!) });
        break;
      case 'other-holder':
      case 'truthful': {
        const top = new Map<string, Token>();
        for (const t of issued)
          if (!top.has(t.resource) || top.get(t.resource)!.epoch < t.epoch) top.set(t.resource, t);
        for (const [resource, t] of top) {
          const holder = lie === 'truthful' ? t.holder : (t.holder + 1) % holders.length;
          entries.push({ resource, record: signed(resource, t.epoch, holders[holder]!) });
        }
      }
    }
    return { replica, floor: 0n, entries };
  };

  for (const s of steps) {
    switch (s.kind) {
      case 'freeze': {
        const member = old.get((s.member % oldN) + 1);
        if (member) member.frozen = true;
        break;
      }
      case 'inherit': {
        const member = (s.member % newN) + 1;
        if (byzantineNew.has(member) || fresh.has(member)) break;
        // Exports come only from frozen old members; a Byzantine one hands over whatever it likes.
        const available = ordered(oldN, s.reporters).filter((i) => byzantineOld.has(i) || old.get(i)!.frozen);
        const needed = inheritFrom(oldF);
        if (available.length < needed) break;
        const inherited = inheritRecords(
          available.slice(0, needed).map((i) => reportOf(i, s.lie)),
          Math.floor((needed - 1) / 2),
          clusterId,
        );
        fresh.set(member, {
          records: new Map(inherited.entries.map((e) => [e.resource, e.record])),
          floor: inherited.floor,
        });
        break;
      }
      case 'grant': {
        const n = s.generation === 0 ? oldN : newN;
        const t = 2 * (s.generation === 0 ? oldF : newF) + 1;
        const byzantine = s.generation === 0 ? byzantineOld : byzantineNew;
        const resource = resources[s.resource]!;
        const next = signed(resource, BigInt(s.epoch), holders[s.holder]!);
        const asked = ordered(n, s.order).slice(0, Math.min(n, t + s.extra));
        let partials = 0;
        for (const i of asked) {
          if (byzantine.has(i)) {
            partials++;
            continue;
          }
          // An honest member signs by the replica's rule and records before its partial leaves.
          if (s.generation === 0) {
            const member = old.get(i)!;
            if (member.frozen || !mayReplace(member.records.get(resource), next)) continue;
            member.records.set(resource, next);
          } else {
            const member = fresh.get(i);
            if (!member || !mayReplace(member.records.get(resource), next, member.floor)) continue;
            member.records.set(resource, next);
          }
          partials++;
        }
        if (partials >= t) tokens.push({ generation: s.generation, resource, epoch: next.epoch, holder: s.holder });
      }
    }
  }
  const crossed = resources.some(
    (r) =>
      tokens.some((t) => t.resource === r && t.generation === 0) &&
      tokens.some((t) => t.resource === r && t.generation === 1),
  );
  return { tokens, crossed };
}

/** The violations of S1 and of continuity in one run's tokens. */
function violations(tokens: readonly Token[]): string[] {
  const found: string[] = [];
  for (const a of tokens) {
    for (const b of tokens) {
      if (a.resource !== b.resource) continue;
      if (a.epoch === b.epoch && a.holder !== b.holder) {
        found.push(`two holders at ${a.resource}/${a.epoch} (generations ${a.generation}, ${b.generation})`);
      }
      if (
        a.generation === 0 &&
        b.generation === 1 &&
        (b.epoch < a.epoch || (b.epoch === a.epoch && b.holder !== a.holder))
      ) {
        found.push(`new token ${b.resource}/${b.epoch} not above old ${a.resource}/${a.epoch}`);
      }
    }
  }
  return found;
}

const scenario = fc.record({ oldF: fc.constantFrom(1, 2), newF: fc.constantFrom(1, 2) }).chain(({ oldF, newF }) =>
  fc.record({
    oldF: fc.constant(oldF),
    newF: fc.constant(newF),
    byzantineOld: fc.uniqueArray(fc.integer({ min: 1, max: 3 * oldF + 1 }), { minLength: oldF, maxLength: oldF }),
    byzantineNew: fc.uniqueArray(fc.integer({ min: 1, max: 3 * newF + 1 }), { minLength: newF, maxLength: newF }),
    steps: runOf(oldF, newF),
  }),
);

describe('S1 across a reshare: grants before, during and after, f_old and f_new Byzantine', () => {
  it('never two tokens for one (resource, epoch), and the new set continues above the old one (4 -> 4, 4 -> 7, 7 -> 4, 7 -> 7)', () => {
    let crossedRuns = 0;
    fc.assert(
      fc.property(scenario, ({ oldF, newF, byzantineOld, byzantineNew, steps }) => {
        const run = play(oldF, newF, new Set(byzantineOld), new Set(byzantineNew), steps);
        if (run.crossed) crossedRuns++;
        expect(violations(run.tokens)).toEqual([]);
      }),
      { numRuns: 400 },
    );
    // Not vacuous: many runs had both sets issue tokens for one resource.
    expect(crossedRuns).toBeGreaterThan(20);
  });

  it('the check could fail: new members that inherit from f_old+1 records instead of 2f_old+1 re-grant old epochs', () => {
    const counterexample = fc.check(
      fc.property(scenario, ({ oldF, newF, byzantineOld, byzantineNew, steps }) => {
        const run = play(oldF, newF, new Set(byzantineOld), new Set(byzantineNew), steps, (f) => f + 1);
        return violations(run.tokens).length === 0;
      }),
      { numRuns: 2000, seed: 12 },
    );
    expect(counterexample.failed).toBe(true);
  });
});
