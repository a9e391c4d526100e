/**
 * The inherit rule (src/replica/inherit.ts) against f_old liars, over random old clusters (f = 1, 2), random
 * grant histories (a token is 2f+1 signatures; Byzantine members sign anything, honest ones by the replica's
 * own mayReplace with its floor), random compactions (an honest member folds a record into its floor), and
 * random reporter subsets of 2f+1 .. N members whose Byzantine members report anything: any records, any
 * floors, up to 2^63-1.
 *
 * Checked:
 *  - S1/S2 across the reshare: a new member raised from the inherited record signs no epoch below a token's,
 *    and no token's epoch for another holder (or inherit refuses: then only for a claim at or above 2^62, or
 *    a value far above what f_old+1 reports back, naming liars only);
 *  - with all N members reporting, no liar raises any inherited epoch or the floor above what the honest
 *    reports say;
 *  - with any number reporting, no inherited value lies more than 1/1024 of the epochs left below 2^62 above
 *    the largest honest report (issue 43, finding 4: one liar among 2f+1 reporters pushed the floor to
 *    2^62 - 3), so no sequence of reshares brings an honest replica to 2^62.
 * And that the checks could fail: the old rule (the largest report) lets one liar raise everything with all
 * N reporting, the (f+1)-th largest of 2f+1 reports misses tokens, and the rank alone (without the refusal of
 * unbacked values) lets one liar push values to just below 2^62.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { isQuorumFenceError } from '../../src/common/errors.js';
import { bytesEqual } from '../../src/common/bytes.js';
import { HONEST_EPOCH_CEILING, MAX_EPOCH } from '../../src/common/limits.js';
import { mayReplace } from '../../src/replica/check-and-record.js';
import {
  CONTESTED_HOLDER,
  inheritRecords,
  mergeReports,
  unbackedLeadAllowed,
  type InheritedRecord,
  type OldRecordReport,
} from '../../src/replica/inherit.js';
import type { SignedRecord } from '../../src/replica/policy.js';
import { grantDigest } from '../../src/token/grant.js';

/** The v2 cluster id depends on the group key alone: the same before and after the reshare. */
const clusterId = new Uint8Array(32).fill(9);
const holders = [0xa1, 0xb2, 0xc3, 0xd4].map((b) => new Uint8Array(32).fill(b));
const resources = ['a', 'b', 'c'] as const;

function signed(resource: string, epoch: bigint, holder: Uint8Array): SignedRecord {
  return { epoch, holder, grantDigest: grantDigest({ clusterId, resource, epoch, holder }) };
}

/** What a liar may claim: small epochs, huge ones below the ceiling, the ceiling itself and the top. */
const claim = fc.oneof(
  { weight: 6, arbitrary: fc.bigInt({ min: 0n, max: 40n }) },
  { weight: 2, arbitrary: fc.constantFrom(HONEST_EPOCH_CEILING - 1n, HONEST_EPOCH_CEILING / 2n, 1n << 40n) },
  { weight: 1, arbitrary: fc.constantFrom(HONEST_EPOCH_CEILING, MAX_EPOCH) },
);
const lie = fc.record({
  floor: claim,
  entries: fc.array(
    fc.record({ resource: fc.nat(resources.length - 1), epoch: claim, holder: fc.nat(holders.length - 1) }),
    {
      maxLength: 4,
    },
  ),
});

const scenario = fc.constantFrom(1, 2).chain((f) => {
  const n = 3 * f + 1;
  return fc.record({
    f: fc.constant(f),
    byzantine: fc.uniqueArray(fc.integer({ min: 1, max: n }), { minLength: f, maxLength: f }),
    steps: fc.array(
      fc.oneof(
        {
          weight: 4,
          arbitrary: fc.record({
            kind: fc.constant('grant' as const),
            resource: fc.nat(resources.length - 1),
            epoch: fc.integer({ min: 1, max: 30 }),
            holder: fc.nat(holders.length - 2), // the last holder never gets a token: "another holder"
            order: fc.array(fc.nat(), { minLength: n, maxLength: n }),
          }),
        },
        {
          weight: 1,
          arbitrary: fc.record({
            kind: fc.constant('compact' as const),
            member: fc.integer({ min: 1, max: n }),
            resource: fc.nat(resources.length - 1),
          }),
        },
      ),
      { maxLength: 24 },
    ),
    reporters: fc.shuffledSubarray(
      Array.from({ length: n }, (_, k) => k + 1),
      { minLength: 2 * f + 1 },
    ),
    lies: fc.array(lie, { minLength: f, maxLength: f }),
  });
});

type Scenario = typeof scenario extends fc.Arbitrary<infer S> ? S : never;

interface Token {
  readonly resource: string;
  readonly epoch: bigint;
  readonly holder: number;
}

interface Played {
  readonly tokens: Token[];
  readonly reports: OldRecordReport[];
  readonly liars: Set<number>;
  readonly honestReports: OldRecordReport[];
}

/** Plays the old set's history, then builds the reports of the chosen reporters. */
function play({ f, byzantine, steps, reporters, lies }: Scenario): Played {
  const n = 3 * f + 1;
  const liars = new Set(byzantine);
  const members = new Map<number, { records: Map<string, SignedRecord>; floor: bigint }>();
  for (let i = 1; i <= n; i++) if (!liars.has(i)) members.set(i, { records: new Map(), floor: 0n });
  const tokens: Token[] = [];
  for (const step of steps) {
    const resource = resources[step.resource]!;
    if (step.kind === 'compact') {
      const member = members.get(step.member);
      const record = member?.records.get(resource);
      if (member && record) {
        member.records.delete(resource);
        if (record.epoch > member.floor) member.floor = record.epoch;
      }
      continue;
    }
    const next = signed(resource, BigInt(step.epoch), holders[step.holder]!);
    const willing = Array.from({ length: n }, (_, k) => k + 1)
      .filter((i) => liars.has(i) || mayReplace(members.get(i)!.records.get(resource), next, members.get(i)!.floor))
      .sort((x, y) => step.order[x - 1]! - step.order[y - 1]! || x - y);
    if (willing.length < 2 * f + 1) continue;
    for (const i of willing.slice(0, 2 * f + 1)) members.get(i)?.records.set(resource, next);
    tokens.push({ resource, epoch: next.epoch, holder: step.holder });
  }
  let lieIndex = 0;
  const reports = reporters.map((replica): OldRecordReport => {
    const source = `replica ${replica}`;
    const member = members.get(replica);
    if (member)
      return {
        replica,
        source,
        floor: member.floor,
        entries: [...member.records].map(([resource, record]) => ({ resource, record })),
      };
    const told = lies[lieIndex++]!;
    const entries = new Map(
      told.entries
        .filter((e) => e.epoch >= 1n)
        .map((e) => {
          const resource = resources[e.resource]!;
          return [resource, { resource, record: signed(resource, e.epoch, holders[e.holder]!) }] as const;
        }),
    );
    return { replica, source, floor: told.floor, entries: [...entries.values()] };
  });
  return { tokens, reports, liars, honestReports: reports.filter((r) => !liars.has(r.replica)) };
}

/** Tokens a new member raised from `inherited` could sign again wrongly (an epoch below, or another holder). */
function violations(tokens: readonly Token[], inherited: InheritedRecord): string[] {
  const records = new Map(inherited.entries.map((e) => [e.resource, e.record]));
  const found: string[] = [];
  for (const t of tokens) {
    const record = records.get(t.resource);
    const others = holders.filter((_, k) => k !== t.holder);
    if (others.some((h) => mayReplace(record, signed(t.resource, t.epoch, h), inherited.floor)))
      found.push(`${t.resource}@${t.epoch} could be signed for another holder`);
    if (t.epoch > 1n && mayReplace(record, signed(t.resource, t.epoch - 1n, holders[t.holder]!), inherited.floor))
      found.push(`${t.resource}@${t.epoch - 1n} could be signed below a token at ${t.epoch}`);
    if (
      record &&
      record.epoch === t.epoch &&
      !bytesEqual(record.holder, CONTESTED_HOLDER) &&
      !bytesEqual(record.holder, holders[t.holder]!)
    )
      found.push(`${t.resource}@${t.epoch} inherited for another holder`);
  }
  return found;
}

/** Inherited values above the largest honest report (of a resource, or the floor). */
function raisedByLiars(honest: readonly OldRecordReport[], inherited: InheritedRecord): string[] {
  const max = (values: bigint[]) => values.reduce((m, v) => (v > m ? v : m), 0n);
  const honestOf = (resource: string) =>
    max(honest.map((r) => r.entries.find((e) => e.resource === resource)?.record.epoch ?? r.floor));
  const found: string[] = [];
  if (inherited.floor > max(honest.map((r) => r.floor))) found.push(`floor ${inherited.floor}`);
  for (const e of inherited.entries)
    if (e.record.epoch > honestOf(e.resource)) found.push(`${e.resource}@${e.record.epoch}`);
  return found;
}

type Rule = (reports: readonly OldRecordReport[], f: number) => InheritedRecord;
const theRule: Rule = (reports, f) => inheritRecords(reports, f, clusterId);

/** Inherited values more than unbackedLeadAllowed above the largest honest report (of a resource, or the floor). */
function pushedTowardTheCeiling(honest: readonly OldRecordReport[], inherited: InheritedRecord): string[] {
  const max = (values: bigint[]) => values.reduce((m, v) => (v > m ? v : m), 0n);
  const honestOf = (resource: string) =>
    max(honest.map((r) => r.entries.find((e) => e.resource === resource)?.record.epoch ?? r.floor));
  const tooFar = (value: bigint, honestMax: bigint) => value - honestMax > unbackedLeadAllowed(honestMax);
  const found: string[] = [];
  if (tooFar(inherited.floor, max(honest.map((r) => r.floor)))) found.push(`floor ${inherited.floor}`);
  for (const e of inherited.entries)
    if (tooFar(e.record.epoch, honestOf(e.resource))) found.push(`${e.resource}@${e.record.epoch}`);
  return found;
}

/**
 * Runs one scenario under `rule`; undefined when the rule refused (checked to be a liar's impossible claim, or a
 * value only liars reach far ahead, every named reporter a liar).
 */
function inheritUnder(
  rule: Rule,
  played: Played,
  f: number,
  refusals?: Map<string, number>,
): InheritedRecord | undefined {
  try {
    return rule(played.reports, f);
  } catch (error) {
    if (!isQuorumFenceError(error, 'EXPORT_IMPOSSIBLE_EPOCH') && !isQuorumFenceError(error, 'EXPORT_UNBACKED_EPOCH'))
      throw error;
    // Only liars are named.
    const named = (error.details as { replicas: number[] }).replicas;
    expect(named.length).toBeGreaterThan(0);
    for (const replica of named) expect(played.liars.has(replica)).toBe(true);
    refusals?.set(error.code, (refusals.get(error.code) ?? 0) + 1);
    return undefined;
  }
}

describe('the inherit rule: the (r - 2f_old)-th largest report, claims at or above 2^62 refused', () => {
  it('f_old liars among any r >= 2f_old+1 reporters: no token epoch is signable again, and with all N reporting no liar raises anything', () => {
    let checked = 0;
    let allReporting = 0;
    let tokens = 0;
    let compacted = 0;
    let liesInherited = 0;
    const refusals = new Map<string, number>();
    fc.assert(
      fc.property(scenario, (s) => {
        const played = play(s);
        const inherited = inheritUnder(theRule, played, s.f, refusals);
        if (!inherited) return;
        checked++;
        tokens += played.tokens.length;
        if (played.tokens.length > 0 && played.honestReports.some((r) => r.floor > 0n)) compacted++;
        expect(violations(played.tokens, inherited)).toEqual([]);
        expect(pushedTowardTheCeiling(played.honestReports, inherited)).toEqual([]);
        if (raisedByLiars(played.honestReports, inherited).length > 0) liesInherited++;
        if (s.reporters.length === 3 * s.f + 1) {
          allReporting++;
          expect(raisedByLiars(played.honestReports, inherited)).toEqual([]);
        }
      }),
      { numRuns: 1500 },
    );
    // Not vacuous: most runs inherit, with tokens to protect and compacted floors among the honest reports; some
    // refuse a liar each way, some inherit a lie within the allowance; many have every member reporting.
    expect({ checked, tokens, compacted, refusals: Object.fromEntries(refusals), liesInherited, allReporting }).toEqual(
      {
        checked: expect.toSatisfy((v: number) => v > 700),
        tokens: expect.toSatisfy((v: number) => v > 1500),
        compacted: expect.toSatisfy((v: number) => v > 80),
        refusals: {
          EXPORT_IMPOSSIBLE_EPOCH: expect.toSatisfy((v: number) => v > 20),
          EXPORT_UNBACKED_EPOCH: expect.toSatisfy((v: number) => v > 20),
        },
        liesInherited: expect.toSatisfy((v: number) => v > 20),
        allReporting: expect.toSatisfy((v: number) => v > 150),
      },
    );
  });

  it('the check could fail: the largest report (the old rule) lets one liar raise values with all N reporting', () => {
    const largest: Rule = (reports) => mergeReports(reports, 1, clusterId);
    const result = fc.check(
      fc.property(scenario, (s) => {
        const played = play(s);
        if (s.reporters.length !== 3 * s.f + 1) return true;
        return raisedByLiars(played.honestReports, largest(played.reports, s.f)).length === 0;
      }),
      { numRuns: 2000, seed: 30 },
    );
    expect(result.failed).toBe(true);
  });

  it('the check could fail: the rank alone, without refusing unbacked values, lets one liar push values toward 2^62', () => {
    const rankAlone: Rule = (reports, f) => mergeReports(reports, reports.length - 2 * f, clusterId);
    const result = fc.check(
      fc.property(scenario, (s) => {
        const played = play(s);
        if (played.reports.some((r) => r.floor >= HONEST_EPOCH_CEILING)) return true;
        return pushedTowardTheCeiling(played.honestReports, rankAlone(played.reports, s.f)).length === 0;
      }),
      { numRuns: 2000, seed: 43 },
    );
    expect(result.failed).toBe(true);
  });

  it('the check could fail: the (f+1)-th largest of 2f_old+1 reports lets a token epoch be signed again', () => {
    const fPlusFirst: Rule = (reports, f) => mergeReports(reports, f + 1, clusterId);
    const result = fc.check(
      fc.property(scenario, (s) => {
        const played = play(s);
        if (s.reporters.length !== 2 * s.f + 1) return true;
        return violations(played.tokens, fPlusFirst(played.reports, s.f)).length === 0;
      }),
      { numRuns: 4000, seed: 30 },
    );
    expect(result.failed).toBe(true);
  });

  it('a claim at or above 2^62 is refused naming its source, one below it is kept; the floor is the (r - 2f)-th largest', () => {
    const honest = (replica: number, floor: bigint): OldRecordReport => ({ replica, floor, entries: [] });
    const liar = (floor: bigint): OldRecordReport => ({ replica: 1, floor, entries: [], source: 'frozen-1.json' });
    let message = '';
    try {
      inheritRecords([liar(MAX_EPOCH), honest(2, 5n), honest(3, 7n)], 1, clusterId);
    } catch (error) {
      expect(isQuorumFenceError(error, 'EXPORT_IMPOSSIBLE_EPOCH')).toBe(true);
      message = (error as Error).message;
    }
    expect(message).toMatch(/^frozen-1\.json reports floor 9223372036854775807, at or above 2\^62/);
    // Just below it, from one of three: far above what two reports back (7), so refused, naming the liar.
    let unbacked: unknown;
    try {
      inheritRecords([liar(HONEST_EPOCH_CEILING - 3n), honest(2, 5n), honest(3, 7n)], 1, clusterId);
    } catch (error) {
      unbacked = error;
    }
    expect(isQuorumFenceError(unbacked, 'EXPORT_UNBACKED_EPOCH')).toBe(true);
    expect((unbacked as { details: unknown }).details).toMatchObject({ replicas: [1], backed: '7' });
    // Within 1/1024 of what is left above the backed 7: inherited as told.
    const within = 7n + unbackedLeadAllowed(7n);
    expect(inheritRecords([liar(within), honest(2, 5n), honest(3, 7n)], 1, clusterId).floor).toBe(within);
    // Two of three at or above the ceiling: an honest one is there (a cluster that crossed it before this rule),
    // so it is no proof; a value may then lie one maximum epoch step above what two reports back.
    const crossed = HONEST_EPOCH_CEILING + 3n;
    expect(inheritRecords([liar(crossed + 5n), honest(2, crossed), honest(3, 7n)], 1, clusterId).floor).toBe(
      crossed + 5n,
    );
    expect(() => inheritRecords([liar(crossed + 2_000_000n), honest(2, crossed), honest(3, 7n)], 1, clusterId)).toThrow(
      /more than 1000000 \(one maximum epoch step, past 2\^62\) above the 4611686018427387907/,
    );
    // All four reporting: the liar's floor is outvoted (2nd largest).
    const all = inheritRecords(
      [liar(HONEST_EPOCH_CEILING - 1n), honest(2, 5n), honest(3, 7n), honest(4, 6n)],
      1,
      clusterId,
    );
    expect([all.floor, all.rank]).toEqual([7n, 2]);
  });
});
