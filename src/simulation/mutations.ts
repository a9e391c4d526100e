/**
 * Planted bugs (`quorumfence-dev simulate --list-mutations`, `--mutate NAME`): each turns one rule of the project
 * off in a run, through the parameters the cores take (the replica's decision function and line placement, the
 * simulated store's flush, the client's threshold, the guard's fence, the reshare's count of records, how many
 * turns a line tells ahead, whether a client's release waits), never through a switch in production code. Each
 * must be caught by the checks that watch its rule, which proves those checks can fail: the seeded runs' checks,
 * or for a bug that costs only time, the timing scenarios' bounds (`simulate --timing`, timing.ts).
 */
import { decideFence } from '../guard/fence.js';
import { decide } from '../replica/policy.js';
import type { ClientMutation } from './client-node.js';
import type { ReplicaMutation } from './replica-node.js';

export interface MutationEffects {
  readonly replica?: ReplicaMutation;
  /** What the clients do differently (client-node.ts). */
  readonly client?: ClientMutation;
  /** The guard's fence instead of decideFence. */
  readonly fence?: typeof decideFence;
  /** The threshold clients combine at, from the cluster's t. */
  readonly clientThreshold?: (t: number) => number;
  /** How many old records a reshare inherits from, from the old f (2f+1 in the protocol). */
  readonly reshareRecords?: (f: number) => number;
}

export interface Mutation {
  readonly name: string;
  /** What the planted bug does. */
  readonly description: string;
  /** The rule it breaks (docs/protocol.md). */
  readonly breaks: string;
  readonly effects: MutationEffects;
  /** `timing`: it costs round trips, not safety, so the timing scenarios catch it (`simulate --timing --mutate`). */
  readonly caughtBy?: 'timing';
}

/** A replica that skips S2: an acquire at or below its record is signed anyway, without recording it. */
const skipS2: typeof decide = (record, request, holder, now, config, floor, support) => {
  const decision = decide(record, request, holder, now, config, floor, support);
  if (request.type === 'acquire' && decision.action === 'reply' && decision.outcome.status === 'stale')
    return { action: 'resend', leaseEndsAt: now + request.ttlMs };
  return decision;
};

/** A replica that never joins a lease it did not sign: a renew of one is answered `not_holder`. */
const neverJoins: typeof decide = (record, request, holder, now, config, floor, support, session) => {
  const decision = decide(record, request, holder, now, config, floor, support, session);
  if (decision.action !== 'join') return decision;
  return { action: 'reply', outcome: { status: 'not_holder', epoch: record?.epoch ?? floor ?? 0n } };
};

/** A guard that compares with ≤ where the rule says <: a write at the barrier's own epoch is refused as stale. */
const fenceWithLessOrEqual: typeof decideFence = (current, token, counter) =>
  current !== undefined && token.epoch <= current.epoch
    ? { ok: false, reason: 'stale', barrier: current.epoch }
    : decideFence(current, token, counter);

export const MUTATIONS: readonly Mutation[] = [
  {
    name: 'replica-skips-s2',
    description: 'every replica signs an acquire at or below its record (the stale check is skipped)',
    breaks: 'S2 monotonic signing, hence S1',
    effects: { replica: { decide: skipS2 } },
  },
  {
    name: 'flush-acknowledged-early',
    description: "a replica's record write is acknowledged before its flush completes",
    breaks: 'S3 durable before visible',
    effects: { replica: { acknowledgeBeforeFlush: true } },
  },
  {
    name: 'client-combines-t-minus-1',
    description: 'a client combines t-1 partials into a token',
    breaks: 'S5 (a token needs t partials)',
    effects: { clientThreshold: (t) => t - 1 },
  },
  {
    name: 'replica-never-joins',
    description: 'a replica answers not_holder to a renew of a lease it did not sign, instead of joining it',
    breaks: 'leases outlive any f of their signers',
    effects: { replica: { decide: neverJoins } },
  },
  {
    name: 'guard-compares-le',
    description: 'the guard refuses epoch <= barrier instead of epoch < barrier',
    breaks: "the guard rule (the barrier's own token is accepted again)",
    effects: { fence: fenceWithLessOrEqual },
  },
  {
    name: 'line-serves-newest-first',
    description: "a replica's line puts each new waiter at the front",
    breaks: 'lines serve waiters in arrival order',
    effects: { replica: { linePlacement: () => 0 } },
  },
  {
    name: 'line-tells-no-turn-ahead',
    description: "a leader's line tells no waiter its turn's epoch before that turn is decided",
    breaks: 'a hot handoff costs one round trip',
    effects: { replica: { turnsToldAhead: 0 } },
    caughtBy: 'timing',
  },
  {
    name: 'release-waits-for-answers',
    description: "a client's release waits for the replicas' answers before its next operation",
    breaks: 'an acquire + release cycle costs one round trip',
    effects: { client: { releaseWaits: true } },
    caughtBy: 'timing',
  },
  {
    name: 'client-forgets-floors',
    description: "a client keeps no replica's epoch floor, so its first acquire of a resource proposes epoch 1",
    breaks: 'the first acquire of a resource costs one round trip while floors differ',
    effects: { client: { forgetsFloors: true } },
    caughtBy: 'timing',
  },
  {
    name: 'client-blind-to-latency',
    description:
      "a client's connections report no latency: its acquires ask, and queue at, slow or hung replicas first",
    breaks: 'one slow or hung replica slows no fast path (docs/protocol.md, "Slow replicas")',
    effects: { client: { blindToLatency: true } },
    caughtBy: 'timing',
  },
  {
    name: 'reshare-inherits-f-plus-1',
    description: 'a reshare inherits the signing records of f+1 old replicas instead of 2f+1',
    breaks: 'the reshare record carry-over (docs/resharing.md), hence S1',
    effects: { reshareRecords: (f) => f + 1 },
  },
];

/** @returns the mutation named `name`, or undefined when there is none. */
export function mutationNamed(name: string): Mutation | undefined {
  return MUTATIONS.find((mutation) => mutation.name === name);
}
