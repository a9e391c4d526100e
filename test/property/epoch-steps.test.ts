/**
 * Epoch steps (docs/protocol.md): no client, alone or with f Byzantine replicas, can push a resource's epochs out of
 * an honest client's reach. A model cluster of honest replicas decides with the real pure policy (`decide`, with
 * the support an acquire's evidence gives), an attacker with a valid key grants itself epochs at any subset of
 * replicas with any evidence it can hold (its own grants' partials, and the Byzantine replicas' partials on anything),
 * releases, and lets records be compacted into floors; the Byzantine replicas then lie, refuse or go silent. After
 * one lease, an honest client following the real client rules (the (f+1)-th epoch choice, catch-up steps with its
 * partials as evidence, escalation above a blocker) must gather t grants of one epoch.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { bytesEqual } from '../../src/common/bytes.js';
import { MAX_EPOCH } from '../../src/common/limits.js';
import { catchUpStep, escalationEpoch, type HeldPartial } from '../../src/client/catch-up.js';
import { chooseEpoch } from '../../src/client/epoch-choice.js';
import type { AcquireRequest } from '../../src/protocol/messages.js';
import { OPEN_ACCESS } from '../../src/replica/access.js';
import {
  decide,
  epochStepAllowed,
  type EpochSupport,
  type PolicyConfig,
  type PolicyRecord,
} from '../../src/replica/policy.js';

const FREE = 4n;
const MAX_STEP = 100n;
const TTL = 1_000;
const attacker = new Uint8Array(32).fill(0xa1);
const honest = new Uint8Array(32).fill(0x40);
const PARTIAL = new Uint8Array(96);

type Behaviour = 'silent' | 'lie_low' | 'lie_high' | 'grant_all';

interface ModelReplica {
  readonly index: number;
  readonly byzantine: boolean;
  readonly records: Map<string, PolicyRecord>;
  floor: bigint;
}

/** A partial this client was given: by `replica`, on (resource, epoch, this client). */
interface Signed {
  readonly replica: number;
  readonly resource: string;
  readonly epoch: bigint;
}

function configFor(f: number): PolicyConfig {
  return {
    clusterId: new Uint8Array(32),
    minTtlMs: 10,
    maxTtlMs: TTL,
    freeEpochStep: FREE,
    maxEpochStep: MAX_STEP,
    faultTolerance: f,
    access: OPEN_ACCESS,
  };
}

/** One honest replica's decision on an acquire, applied to its model state; the partial, when granted. */
function honestAcquire(
  replica: ModelReplica,
  resource: string,
  epoch: bigint,
  holder: Uint8Array,
  support: readonly EpochSupport[],
  now: number,
  config: PolicyConfig,
): 'granted' | { status: string; epoch?: bigint } {
  const record = replica.records.get(resource);
  const request: AcquireRequest = { type: 'acquire', id: 1, resource, epoch, ttlMs: TTL };
  const decision = decide(record, request, holder, now, config, replica.floor, support);
  if (decision.action === 'grant') {
    replica.records.set(resource, {
      ...decision.record,
      leaseEndsAt: decision.leaseEndsAt,
      released: false,
      session: '',
    });
    return 'granted';
  }
  if (decision.action === 'resend') return 'granted';
  if (decision.action === 'reply') return decision.outcome as { status: string; epoch?: bigint };
  return { status: decision.action };
}

/** What an acquire's evidence gives a replica: distinct other replicas that signed the holder at >= epoch. */
function supportFrom(held: readonly Signed[], resource: string, self: number): EpochSupport[] {
  const best = new Map<number, bigint>();
  for (const signed of held) {
    if (signed.resource !== resource || signed.replica === self) continue;
    if ((best.get(signed.replica) ?? -1n) < signed.epoch) best.set(signed.replica, signed.epoch);
  }
  return [...best].map(([replica, epoch]) => ({ replica, epoch }));
}

type AttackStep =
  | {
      kind: 'acquire';
      resource: number;
      replicas: number[];
      how: 'next' | 'free' | 'step' | 'huge' | 'byzantine';
      offset: bigint;
    }
  | { kind: 'release'; resource: number; replicas: number[] }
  | { kind: 'compact'; replica: number }
  | { kind: 'advance'; ms: number };

const RESOURCES = ['orders/1', 'orders/2', 'tmp/x', 'tmp/y'];

function attackStep(n: number): fc.Arbitrary<AttackStep> {
  const replicas = fc.uniqueArray(fc.integer({ min: 1, max: n }), { minLength: 1, maxLength: n });
  return fc.oneof(
    {
      weight: 6,
      arbitrary: fc.record({
        kind: fc.constant('acquire' as const),
        resource: fc.integer({ min: 0, max: RESOURCES.length - 1 }),
        replicas,
        how: fc.constantFrom('next', 'free', 'step', 'huge', 'byzantine'),
        offset: fc.bigInt({ min: 0n, max: 3n }),
      }),
    },
    {
      weight: 2,
      arbitrary: fc.record({
        kind: fc.constant('release' as const),
        resource: fc.integer({ min: 0, max: RESOURCES.length - 1 }),
        replicas,
      }),
    },
    {
      weight: 1,
      arbitrary: fc.record({ kind: fc.constant('compact' as const), replica: fc.integer({ min: 1, max: n }) }),
    },
    {
      weight: 1,
      arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 2 * TTL }) }),
    },
  );
}

/** Plays the attacker's steps against the honest replicas of `cluster`. */
function attack(cluster: ModelReplica[], steps: readonly AttackStep[], config: PolicyConfig, clock: { now: number }) {
  const held: Signed[] = [];
  const byzantine = cluster.filter((r) => r.byzantine).map((r) => r.index);
  for (const step of steps) {
    if (step.kind === 'advance') clock.now += step.ms;
    else if (step.kind === 'compact') {
      const replica = cluster[step.replica - 1]!;
      if (replica.byzantine) continue;
      for (const [resource, record] of replica.records) {
        if (record.leaseEndsAt > clock.now && !record.released) continue;
        if (record.epoch > replica.floor) replica.floor = record.epoch;
        replica.records.delete(resource);
      }
    } else if (step.kind === 'release') {
      const resource = RESOURCES[step.resource]!;
      for (const index of step.replicas) {
        const record = cluster[index - 1]!.records.get(resource);
        if (record && bytesEqual(record.holder, attacker))
          cluster[index - 1]!.records.set(resource, { ...record, released: true });
      }
    } else {
      const resource = RESOURCES[step.resource]!;
      const targets = step.replicas.map((i) => cluster[i - 1]!).filter((r) => !r.byzantine);
      const top = targets.reduce((m, r) => {
        const e = r.records.get(resource)?.epoch ?? r.floor;
        return e > m ? e : m;
      }, 0n);
      const epoch =
        {
          next: top + 1n,
          free: top + FREE,
          step: top + MAX_STEP,
          huge: MAX_EPOCH - step.offset,
          byzantine: top + MAX_STEP * 3n,
        }[step.how] - (step.how === 'huge' ? 0n : step.offset);
      if (epoch < 1n || epoch > MAX_EPOCH) continue;
      // The Byzantine replicas sign whatever the attacker wants: evidence at any epoch.
      const evidence = [...held, ...byzantine.map((replica) => ({ replica, resource, epoch }))];
      for (const replica of targets) {
        const answer = honestAcquire(
          replica,
          resource,
          epoch,
          attacker,
          supportFrom(evidence, resource, replica.index),
          clock.now,
          config,
        );
        if (answer === 'granted') held.push({ replica: replica.index, resource, epoch });
      }
    }
  }
}

/** A Byzantine replica's answer to the honest client. */
function byzantineAnswer(
  behaviour: Behaviour,
  epoch: bigint,
): 'granted' | { status: string; epoch?: bigint } | undefined {
  switch (behaviour) {
    case 'silent':
      return undefined;
    case 'lie_low':
      return { status: 'stale', epoch };
    case 'lie_high':
      return { status: 'stale', epoch: MAX_EPOCH - 1n };
    case 'grant_all':
      return 'granted';
  }
}

function byzantineStatus(behaviour: Behaviour): bigint | undefined {
  return behaviour === 'silent' ? undefined : behaviour === 'lie_high' ? MAX_EPOCH - 1n : 0n;
}

/**
 * The honest client, by the rules of src/client/core (acquire.ts, answers.ts): asks every reachable replica,
 * catches laggards up with the partials it holds (catchUpStep), escalates above a blocker (escalationEpoch) when
 * grants fall short, else takes the (f+1)-th choice. Returns the epoch of its token, or undefined.
 */
function honestAcquires(
  cluster: ModelReplica[],
  behaviours: Map<number, Behaviour>,
  resource: string,
  f: number,
  config: PolicyConfig,
  now: number,
): bigint | undefined {
  const t = 2 * f + 1;
  const known = new Map<number, bigint>();
  for (const replica of cluster) {
    const reported = replica.byzantine
      ? byzantineStatus(behaviours.get(replica.index)!)
      : (replica.records.get(resource)?.epoch ?? replica.floor);
    if (reported !== undefined) known.set(replica.index, reported);
  }
  const tried = new Set<number>();
  let epoch = chooseEpoch([...known.values()], f);
  for (let attempt = 0; attempt < 12; attempt++) {
    const partials: HeldPartial[] = [];
    const blockers: { replica: number; epoch: bigint }[] = [];
    const lagging = new Map<number, bigint>();
    const answerOf = (replica: ModelReplica, at: bigint, evidence: readonly HeldPartial[]) =>
      replica.byzantine
        ? byzantineAnswer(behaviours.get(replica.index)!, at)
        : honestAcquire(
            replica,
            resource,
            at,
            honest,
            evidence.filter((p) => p.replica !== replica.index).map((p) => ({ replica: p.replica, epoch: p.epoch })),
            now,
            config,
          );
    for (const replica of cluster) {
      const answer = answerOf(replica, epoch, []);
      if (answer === undefined) continue;
      if (answer === 'granted') partials.push({ replica: replica.index, epoch, partial: PARTIAL });
      else if (answer.status === 'stale' && answer.epoch !== undefined && answer.epoch >= epoch)
        blockers.push({ replica: replica.index, epoch: answer.epoch });
      else if (answer.status === 'too_far' && answer.epoch !== undefined) lagging.set(replica.index, answer.epoch);
      if (typeof answer === 'object' && answer.epoch !== undefined) known.set(replica.index, answer.epoch);
    }
    // Catch-up: each lagging replica, in steps, with the partials held (as the attempt does when they arrive).
    for (const [index, current] of lagging) {
      let at = current;
      for (let steps = 0; steps < 8; steps++) {
        const step = catchUpStep(index, at, epoch, partials, f, MAX_STEP);
        if (!step) break;
        const answer = answerOf(cluster[index - 1]!, step.epoch, step.evidence);
        if (answer !== 'granted') break;
        if (step.epoch === epoch) {
          partials.push({ replica: index, epoch, partial: PARTIAL });
          break;
        }
        at = step.epoch;
      }
    }
    if (new Set(partials.map((p) => p.replica)).size >= t) return epoch;
    const escalated = escalationEpoch(blockers, tried);
    const chosen = chooseEpoch([...known.values()], f);
    let next = escalated !== undefined && escalated > chosen ? escalated : chosen;
    if (next <= epoch) next = epoch + 1n;
    if (next > MAX_EPOCH) return undefined;
    epoch = next;
  }
  return undefined;
}

const behaviourArb = fc.constantFrom<Behaviour>('silent', 'lie_low', 'lie_high', 'grant_all');

describe('epoch steps: no client, alone or with f Byzantine replicas, locks a resource or the floor', () => {
  for (const f of [1, 2]) {
    const n = 3 * f + 1;
    it(`f = ${f}: after one lease, an honest client acquires every attacked resource and a new one`, () => {
      const config = configFor(f);
      fc.assert(
        fc.property(
          fc.uniqueArray(fc.integer({ min: 1, max: n }), { minLength: 0, maxLength: f }),
          fc.array(behaviourArb, { minLength: f, maxLength: f }),
          fc.array(attackStep(n), { minLength: 1, maxLength: 40 }),
          (byzantineIndices, behaviourList, steps) => {
            const cluster: ModelReplica[] = Array.from({ length: n }, (_, i) => ({
              index: i + 1,
              byzantine: byzantineIndices.includes(i + 1),
              records: new Map(),
              floor: 0n,
            }));
            const behaviours = new Map(byzantineIndices.map((index, k) => [index, behaviourList[k]!]));
            const clock = { now: 1_000 };
            attack(cluster, steps, config, clock);
            // One lease later: every lease the attacker holds has ended (it stopped renewing).
            const after = clock.now + TTL + 1;
            for (const resource of [...RESOURCES, 'never/seen']) {
              const epoch = honestAcquires(cluster, behaviours, resource, f, config, after);
              expect(epoch, `${resource} locked out`).toBeDefined();
            }
          },
        ),
        { numRuns: 300 },
      );
    });
  }

  it('a planted bug is caught: the old rule (every replica steps from its own record, no evidence)', () => {
    const f = 1;
    const old: PolicyConfig = { ...configFor(f), freeEpochStep: MAX_STEP, faultTolerance: 99 };
    // Finding 1 of issue 30: two replicas pushed two steps ahead of the others, lease released.
    const cluster: ModelReplica[] = Array.from({ length: 4 }, (_, i) => ({
      index: i + 1,
      byzantine: false,
      records: new Map(),
      floor: 0n,
    }));
    const clock = { now: 1_000 };
    attack(
      cluster,
      [
        { kind: 'acquire', resource: 0, replicas: [1, 2, 3, 4], how: 'next', offset: 0n },
        { kind: 'acquire', resource: 0, replicas: [1, 2], how: 'step', offset: 0n },
        { kind: 'acquire', resource: 0, replicas: [1, 2], how: 'step', offset: 0n },
        { kind: 'release', resource: 0, replicas: [1, 2] },
      ],
      old,
      clock,
    );
    expect(honestAcquires(cluster, new Map(), RESOURCES[0]!, f, old, clock.now + TTL + 1)).toBeUndefined();
    // The same history under the real rule: the laggards follow with the leaders' partials as evidence.
    const fixed: ModelReplica[] = cluster.map((r) => ({ ...r, records: new Map(r.records) }));
    expect(honestAcquires(fixed, new Map(), RESOURCES[0]!, f, configFor(f), clock.now + TTL + 1)).toBeDefined();
  });
});

describe('epoch steps: the rule (epochStepAllowed)', () => {
  const config = configFor(1);
  it('grants within the free step of a record, and within maxEpochStep above a floor, without evidence', () => {
    expect(epochStepAllowed(10n, true, 10n + FREE, [], config)).toBe(true);
    expect(epochStepAllowed(10n, true, 11n + FREE, [], config)).toBe(false);
    expect(epochStepAllowed(10n, false, 10n + MAX_STEP, [], config)).toBe(true);
    expect(epochStepAllowed(10n, false, 11n + MAX_STEP, [], config)).toBe(false);
  });

  it('one supporter at or above the epoch: up to maxEpochStep; f+1: any distance; supporters below count for nothing', () => {
    expect(epochStepAllowed(10n, true, 10n + MAX_STEP, [{ replica: 2, epoch: 10n + MAX_STEP }], config)).toBe(true);
    expect(epochStepAllowed(10n, true, 11n + MAX_STEP, [{ replica: 2, epoch: MAX_EPOCH }], config)).toBe(false);
    const two = [
      { replica: 2, epoch: 1n << 40n },
      { replica: 3, epoch: 1n << 40n },
    ];
    expect(epochStepAllowed(10n, true, 1n << 40n, two, config)).toBe(true);
    expect(epochStepAllowed(10n, true, (1n << 40n) + 1n, two, config)).toBe(false);
  });
});
