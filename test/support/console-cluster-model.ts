/**
 * A model of what the console's polls see (docs/console.md, "Why these rules"), for property tests of its
 * verdicts: honest replicas keep a signing record per resource (epochs only rise, compaction raises the floor),
 * honest clients' acquires ask t signers first in ring order from the resource's leader (sometimes widening to
 * every replica), a malicious client with a valid key is granted by one replica alone (a "lone grant", up to
 * maxEpochStep ahead), replicas crash and restart with their records, the console's link to one is
 * partitioned, and up to f Byzantine replicas answer with the lies of src/testing/byzantine/lies.ts (and a few
 * more) instead of their honest answers.
 */
import fc from 'fast-check';
import { MAX_EPOCH } from '../../src/common/limits.js';
import type { ReplicaObservation } from '../../src/console/view.js';
import type { ActiveLease } from '../../src/protocol/messages.js';

/** How a Byzantine replica answers one poll. */
export const LIE_KINDS = [
  /** as an honest replica would, from its own records */
  'honest',
  /** lie-epoch-huge: every status at 2^63-1, every listed lease at 2^63-1 plus a phantom lease */
  'huge',
  /** lie-epoch-zero: every status 0, no lease */
  'zero',
  /** another replica's answers as its own */
  'mimic',
  /** made-up epochs below the ceiling and made-up leases */
  'plausible',
  /** malformed, flood: the console's client closes the connection as faulty */
  'protocol',
  /** silent, slow, drop: no answer in time */
  'silent',
  /** a /healthz naming another replica index */
  'identity',
] as const;
export type LieKind = (typeof LIE_KINDS)[number];

export type Step =
  | { type: 'acquire'; resource: number; holder: number; widen: boolean; jump: number; keep: boolean }
  | { type: 'lone'; replica: number; resource: number; holder: number; jump: number }
  | { type: 'end'; resource: number }
  | { type: 'compact'; replica: number; resource: number }
  | { type: 'crash'; replica: number }
  | { type: 'restart'; replica: number }
  | { type: 'partition'; replica: number; on: boolean }
  | { type: 'poll'; lies: readonly LieKind[]; noise: number };

export interface Scenario {
  readonly f: number;
  readonly n: number;
  /** At most f replicas, each lying as its poll step says. */
  readonly byzantine: readonly number[];
  readonly steps: readonly Step[];
}

export const RESOURCES = ['orders/1', 'orders/2', 'ledger', 'jobs/7'];
const MAX_EPOCH_STEP = 1_000_000;

const replicaIndex = (n: number) => fc.integer({ min: 1, max: n });
const resourceIndex = fc.integer({ min: 0, max: RESOURCES.length - 1 });

function stepArbitrary(n: number, f: number): fc.Arbitrary<Step> {
  return fc.oneof(
    {
      weight: 5,
      arbitrary: fc.record({
        type: fc.constant('acquire' as const),
        resource: resourceIndex,
        holder: fc.integer({ min: 1, max: 3 }),
        widen: fc.boolean(),
        jump: fc.oneof(fc.constant(1), fc.integer({ min: 1, max: 20 })),
        keep: fc.boolean(),
      }),
    },
    {
      weight: 2,
      arbitrary: fc.record({
        type: fc.constant('lone' as const),
        replica: replicaIndex(n),
        resource: resourceIndex,
        holder: fc.integer({ min: 4, max: 5 }),
        jump: fc.oneof(fc.constant(1), fc.constant(MAX_EPOCH_STEP), fc.integer({ min: 1, max: MAX_EPOCH_STEP })),
      }),
    },
    { weight: 2, arbitrary: fc.record({ type: fc.constant('end' as const), resource: resourceIndex }) },
    {
      weight: 1,
      arbitrary: fc.record({
        type: fc.constant('compact' as const),
        replica: replicaIndex(n),
        resource: resourceIndex,
      }),
    },
    { weight: 2, arbitrary: fc.record({ type: fc.constant('crash' as const), replica: replicaIndex(n) }) },
    { weight: 2, arbitrary: fc.record({ type: fc.constant('restart' as const), replica: replicaIndex(n) }) },
    {
      weight: 1,
      arbitrary: fc.record({ type: fc.constant('partition' as const), replica: replicaIndex(n), on: fc.boolean() }),
    },
    {
      weight: 6,
      arbitrary: fc.record({
        type: fc.constant('poll' as const),
        lies: fc.array(fc.constantFrom(...LIE_KINDS), { minLength: f, maxLength: f }),
        noise: fc.integer({ min: 0, max: 1_000_000 }),
      }),
    },
  );
}

export function scenarioArbitrary(fs: readonly number[] = [1, 2]): fc.Arbitrary<Scenario> {
  return fc.constantFrom(...fs).chain((f) => {
    const n = 3 * f + 1;
    return fc.record({
      f: fc.constant(f),
      n: fc.constant(n),
      byzantine: fc.uniqueArray(replicaIndex(n), { minLength: 0, maxLength: f }),
      steps: fc.array(stepArbitrary(n, f), { minLength: 10, maxLength: 60 }),
    });
  });
}

interface Rec {
  epoch: bigint;
  holder: number;
  /** Listed by `leases`: granted since the last start, neither released nor ended. */
  running: boolean;
}

interface ReplicaModel {
  readonly index: number;
  records: Map<string, Rec>;
  floor: bigint;
  crashed: boolean;
  partitioned: boolean;
  /** The console's connection will be a new one at its next answer (it restarted, or a partition healed). */
  reconnects: boolean;
}

export interface PollObservation {
  readonly observations: ReplicaObservation[];
  /** Per replica: what it was told to do this poll (honest replicas: 'honest'). */
  readonly behaviour: ReadonlyMap<number, LieKind>;
  /** Per replica: it answered the console and is honest. */
  readonly honestAnswered: ReadonlySet<number>;
  /** Leases some honest replica lists now: resource, epoch, holder (hex). */
  readonly honestLeases: ReadonlySet<string>;
}

const holderKey = (holder: number) => new Uint8Array(32).fill(holder);
const hex = (holder: number) => holder.toString(16).padStart(2, '0').repeat(32);
export const leaseId = (resource: string, epoch: bigint, holderHex: string) => `${resource} ${epoch} ${holderHex}`;

/** Runs the scenario's steps; calls `onPoll` with what the console's poll saw at each poll step. */
export function runScenario(scenario: Scenario, onPoll: (poll: PollObservation, at: number) => void): void {
  const { n, f } = scenario;
  const t = 2 * f + 1;
  const byzantine = new Set(scenario.byzantine);
  const replicas: ReplicaModel[] = Array.from({ length: n }, (_, k) => ({
    index: k + 1,
    records: new Map(),
    floor: 0n,
    crashed: false,
    partitioned: false,
    reconnects: false,
  }));
  const at = (i: number) => replicas[i - 1]!;
  const epochAt = (r: ReplicaModel, resource: string) => r.records.get(resource)?.epoch ?? r.floor;
  const grant = (r: ReplicaModel, resource: string, epoch: bigint, holder: number): boolean => {
    const rec = r.records.get(resource);
    if (epoch <= epochAt(r, resource)) return false;
    if (rec?.running && rec.holder !== holder) return false;
    if (epoch > epochAt(r, resource) + BigInt(MAX_EPOCH_STEP)) return false;
    r.records.set(resource, { epoch, holder, running: true });
    return true;
  };
  const crashedHonest = () => replicas.filter((r) => r.crashed && !byzantine.has(r.index)).length;
  let polls = 0;
  for (const step of scenario.steps) {
    switch (step.type) {
      case 'acquire': {
        const resource = RESOURCES[step.resource]!;
        // Ring order from the resource's leader, connected (not crashed) replicas only; t first unless widened.
        const leader = step.resource % n;
        const ring = Array.from({ length: n }, (_, k) => replicas[(leader + k) % n]!).filter((r) => !r.crashed);
        const asked = step.widen ? ring : ring.slice(0, t);
        if (asked.length === 0) break;
        const known = asked.map((r) => epochAt(r, resource)).sort((a, b) => (a > b ? -1 : a < b ? 1 : 0));
        // The client's (f+1)-th largest (or the top one when fewer answered), plus a jump within maxEpochStep.
        const epoch = known[Math.min(f, known.length - 1)]! + BigInt(step.jump);
        const granted = asked.filter((r) => grant(r, resource, epoch, step.holder));
        // Fewer than t partials, or the holder is done at once: the client releases at every replica that granted.
        if (granted.length < t || !step.keep) for (const r of granted) r.records.get(resource)!.running = false;
        break;
      }
      case 'lone': {
        const r = at(step.replica);
        if (r.crashed) break;
        const resource = RESOURCES[step.resource]!;
        grant(r, resource, epochAt(r, resource) + BigInt(step.jump), step.holder);
        break;
      }
      case 'end':
        for (const r of replicas) {
          const rec = r.records.get(RESOURCES[step.resource]!);
          if (rec) rec.running = false;
        }
        break;
      case 'compact': {
        const r = at(step.replica);
        const resource = RESOURCES[step.resource]!;
        const rec = r.records.get(resource);
        if (!rec || rec.running) break;
        if (rec.epoch > r.floor) r.floor = rec.epoch;
        r.records.delete(resource);
        break;
      }
      case 'crash':
        // Up to f honest replicas down at once (any number of Byzantine ones).
        if (!byzantine.has(step.replica) && crashedHonest() >= f) break;
        at(step.replica).crashed = true;
        break;
      case 'restart': {
        const r = at(step.replica);
        if (!r.crashed) break;
        r.crashed = false;
        r.reconnects = true;
        // The records survive (S3); the leases they held run by the restart rule, which `leases` does not list.
        for (const rec of r.records.values()) rec.running = false;
        break;
      }
      case 'partition': {
        const r = at(step.replica);
        // A healed partition resets the connections that lived through it (the fault proxy does).
        if (r.partitioned && !step.on) r.reconnects = true;
        r.partitioned = step.on;
        break;
      }
      case 'poll':
        onPoll(observe(step), ++polls);
        break;
    }
  }

  function honestView(r: ReplicaModel): { leases: ActiveLease[]; statusEpochs: Map<string, bigint> } {
    const leases: ActiveLease[] = [];
    for (const [resource, rec] of r.records)
      if (rec.running) leases.push({ resource, epoch: rec.epoch, holder: holderKey(rec.holder), remainingMs: 5_000 });
    return { leases, statusEpochs: new Map(RESOURCES.map((resource) => [resource, epochAt(r, resource)])) };
  }

  function observe(step: Extract<Step, { type: 'poll' }>): PollObservation {
    const behaviour = new Map<number, LieKind>();
    const honestAnswered = new Set<number>();
    const honestLeases = new Set<string>();
    const observations = replicas.map((r): ReplicaObservation => {
      const lie = byzantine.has(r.index) ? step.lies[scenario.byzantine.indexOf(r.index)]! : 'honest';
      behaviour.set(r.index, lie);
      const newConnection = r.reconnects && !r.crashed && !r.partitioned;
      if (newConnection) r.reconnects = false;
      const base = { replica: r.index, newConnection, identityMismatch: null };
      if (r.crashed || r.partitioned || lie === 'silent')
        return { ...base, answer: 'unreachable', leases: undefined, statusEpochs: new Map() };
      if (lie === 'protocol')
        return { ...base, answer: 'protocol', message: 'malformed frame', leases: undefined, statusEpochs: new Map() };
      const honest = honestView(r);
      if (!byzantine.has(r.index)) {
        honestAnswered.add(r.index);
        for (const l of honest.leases) honestLeases.add(leaseId(l.resource, l.epoch, hex(l.holder[0]!)));
      }
      const answered = { ...base, answer: 'ok' as const };
      switch (lie) {
        case 'honest':
          return { ...answered, ...honest };
        case 'identity':
          return { ...answered, ...honest, identityMismatch: `its /healthz says it is replica ${(r.index % n) + 1}` };
        case 'huge':
          return {
            ...answered,
            leases: [
              { resource: 'byzantine/phantom', epoch: MAX_EPOCH, holder: holderKey(7), remainingMs: 60_000 },
              ...honest.leases.map((l) => ({ ...l, epoch: MAX_EPOCH })),
            ],
            statusEpochs: new Map(RESOURCES.map((resource) => [resource, MAX_EPOCH])),
          };
        case 'zero':
          return { ...answered, leases: [], statusEpochs: new Map(RESOURCES.map((resource) => [resource, 0n])) };
        case 'mimic': {
          const other = honestView(replicas[step.noise % n]!);
          return { ...answered, ...other };
        }
        case 'plausible': {
          const made = (k: number) => BigInt((step.noise * (k + 7)) % 10_000_000);
          return {
            ...answered,
            leases: RESOURCES.slice(0, step.noise % 3).map((resource, k) => ({
              resource,
              epoch: made(k),
              holder: holderKey(9),
              remainingMs: 60_000,
            })),
            statusEpochs: new Map(RESOURCES.map((resource, k) => [resource, made(k)])),
          };
        }
      }
    });
    return { observations, behaviour, honestAnswered, honestLeases };
  }
}

export { hex as holderHex };
