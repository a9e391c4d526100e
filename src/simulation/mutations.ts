/**
 * Planted bugs (`quorumfence-dev simulate --list-mutations`, `--mutate NAME`): each turns one rule of the project
 * off in a run, through the parameters the cores take (the replica's decision function, hello check and line placement, the
 * simulated store's flush, the client's threshold, the guard's fence, the reshare's count of records, how many
 * turns a line tells ahead, whether a client's release waits), never through a switch in production code. Each
 * must be caught by the checks that watch its rule, which proves those checks can fail: the seeded runs' checks,
 * or for a bug that costs only time, the timing scenarios' bounds (`simulate --timing`, timing.ts).
 */
import { bytesEqual } from '../common/bytes.js';
import { chooseEpoch } from '../client/epoch-choice.js';
import { decideFence } from '../guard/fence.js';
import type { Request } from '../protocol/messages.js';
import { inLineOrder } from '../replica/core/line-core.js';
import { OPEN_ACCESS } from '../replica/access.js';
import {
  decide,
  decideChecked,
  precheck,
  type Caller,
  type PolicyConfig,
  type PolicyRecord,
} from '../replica/policy.js';
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

/** Steps 1 and 2 as a mutated `precheck` has them, and the rest of the rules as they are. */
function withPrecheck(mutated: typeof precheck): ReplicaMutation {
  return {
    precheck: mutated,
    decide: (record, request, holder, now, config, floor, support, session) =>
      mutated(request, holder, config) ?? decideChecked(record, request, holder, now, config, floor, support, session),
  };
}

/** The rules, deciding on a record (and lease) the mutation shows them instead of the real one. */
function deciding(show: (record: PolicyRecord, request: Request, caller: Caller) => PolicyRecord): typeof decide {
  return (record, request, holder, now, config, floor, support, session = '') =>
    decide(record && show(record, request, { holder, session }), request, holder, now, config, floor, support, session);
}

/** The lease now on `record` (a lease joined below it, or the record's grant's) as `caller`'s. */
function leaseAsCallers(record: PolicyRecord, caller: Caller, epoch: bigint): PolicyRecord {
  if (record.joined)
    return { ...record, joined: { ...record.joined, epoch, holder: caller.holder, session: caller.session } };
  return { ...record, epoch, holder: caller.holder, session: caller.session };
}

const sameHolder = (record: { readonly holder: Uint8Array }, caller: Caller) =>
  bytesEqual(record.holder, caller.holder);

/** The epoch choice trusting the highest answer: a liar's epoch far ahead becomes the client's proposal. */
const highestEpochPlusOne: typeof chooseEpoch = (reported, _f, floor) => chooseEpoch(reported, 0, floor);

/** A guard that compares with ≤ where the rule says <: a write at the barrier's own epoch is refused as stale. */
const fenceWithLessOrEqual: typeof decideFence = (current, token, counter) =>
  current !== undefined && token.epoch <= current.epoch
    ? { ok: false, reason: 'stale', barrier: current.epoch }
    : decideFence(current, token, counter);

/** Each of the replica rules' mutations (docs/protocol.md, "Replica rules"), as the rules would decide with it. */
const replicaRules = {
  /** Step 1: the ttl's upper bound is not checked. */
  acceptsLongTtl: withPrecheck((request, holder, config) =>
    precheck(request, holder, { ...config, maxTtlMs: Number.MAX_SAFE_INTEGER }),
  ),
  /** Step 2: the access rules are not applied. */
  skipsAccess: withPrecheck((request, holder, config) => precheck(request, holder, { ...config, access: OPEN_ACCESS })),
  /** Step 3: the partial is handed again to any session of the holder. */
  resendsToAnySession: deciding((record, request, caller) =>
    request.type === 'acquire' && record.epoch === request.epoch && sameHolder(record, caller)
      ? { ...record, session: caller.session }
      : record,
  ),
  /** Step 3: the partial of a released grant is handed again. */
  resendsReleased: deciding((record, request) =>
    request.type === 'acquire' ? { ...record, released: false } : record,
  ),
  /** Step 5: a running lease is not in the way of an acquire. */
  ignoresRunningLease: deciding((record, request) =>
    request.type === 'acquire' ? { ...record, leaseEndsAt: 0 } : record,
  ),
  /** Step 6: the free step is as wide as the maximum step (no evidence needed within it). */
  ignoresFreeStep: ((record, request, holder, now, config, floor, support, session) =>
    decide(
      record,
      request,
      holder,
      now,
      { ...config, freeEpochStep: config.maxEpochStep },
      floor,
      support,
      session,
    )) as typeof decide,
  /**
   * Step 6: evidence from f replicas counts as from f+1 (any distance): the replica believes f is one less, in its
   * evidence checks (which stop looking once the evidence could not be enough) as in its rules.
   */
  trustsFSupporters: (config: PolicyConfig): PolicyConfig => ({ ...config, faultTolerance: config.faultTolerance - 1 }),
  /** Renew: whatever lease runs is extended for the caller, as if it were the caller's. */
  renewsOthersLeases: deciding((record, request, caller) =>
    request.type === 'renew' && record.leaseEndsAt > 0 ? leaseAsCallers(record, caller, request.epoch) : record,
  ),
  /** Release: the lease at the epoch released is ended whoever asks. */
  releasesForAnyone: deciding((record, request, caller) =>
    request.type === 'release' && (record.joined ?? record).epoch === request.epoch
      ? leaseAsCallers(record, caller, request.epoch)
      : record,
  ),
  /** Joins: a renew that would join sees no lease in its way. */
  joinsOverRunningLease: deciding((record, request, caller) => {
    if (request.type !== 'renew') return record;
    const lease = record.joined ?? record;
    const callers = lease.epoch === request.epoch && sameHolder(lease, caller);
    return callers ? record : { ...record, leaseEndsAt: 0 };
  }),
  /** Sessions: a lease is its holder's, whichever session holds it. */
  ignoresSessions: deciding((record, _request, caller) => {
    const lease = record.joined ?? record;
    return sameHolder(lease, caller) ? leaseAsCallers(record, caller, lease.epoch) : record;
  }),
  /** The restart rule: a lease the replica holds only by it (untouched since the restart) does not run. */
  forgetsLeasesOnRestart: deciding((record) =>
    record.session === undefined && !record.joined ? { ...record, leaseEndsAt: 0 } : record,
  ),
};

export const MUTATIONS: readonly Mutation[] = [
  {
    name: 'replica-accepts-long-ttl',
    description: 'a replica accepts a ttl above maxTtl (step 1 checks only the lower bound)',
    breaks: 'replica step 1 (invalid), and the restart rule that counts on maxTtl',
    effects: { replica: replicaRules.acceptsLongTtl },
  },
  {
    name: 'replica-skips-access',
    description: 'a replica does not apply its access rules',
    breaks: 'replica step 2 (forbidden)',
    effects: { replica: replicaRules.skipsAccess },
  },
  {
    name: 'replica-resends-to-any-session',
    description: "a replica hands a grant's partial again to another session of its holder",
    breaks: "replica step 3 (the resend is the holding session's), hence one token per session",
    effects: { replica: { decide: replicaRules.resendsToAnySession } },
  },
  {
    name: 'replica-resends-released',
    description: "a replica hands a released grant's partial again",
    breaks: 'replica step 3 (a released grant is stale)',
    effects: { replica: { decide: replicaRules.resendsReleased } },
  },
  {
    name: 'replica-skips-s2',
    description: 'every replica signs an acquire at or below its record (the stale check is skipped)',
    breaks: 'replica step 4, S2 monotonic signing, hence S1',
    effects: { replica: { decide: skipS2 } },
  },
  {
    name: 'replica-ignores-running-lease',
    description: "a replica grants an acquire while another holder's lease runs",
    breaks: 'replica step 5 (busy): leases exclude each other',
    effects: { replica: { decide: replicaRules.ignoresRunningLease } },
  },
  {
    name: 'replica-ignores-free-step',
    description: 'a replica grants up to maxEpochStep above its record without evidence',
    breaks: 'replica step 6 (too_far): the free step',
    effects: { replica: { decide: replicaRules.ignoresFreeStep } },
  },
  {
    name: 'replica-trusts-f-supporters',
    description: "a replica takes f other replicas' partials as enough for any epoch step",
    breaks: 'replica step 6 (too_far): f+1 supporters for a step beyond maxEpochStep',
    effects: { replica: { policy: replicaRules.trustsFSupporters } },
  },
  {
    name: 'flush-acknowledged-early',
    description: "a replica's record write is acknowledged before its flush completes",
    breaks: 'replica step 7, S3 durable before visible',
    effects: { replica: { acknowledgeBeforeFlush: true } },
  },
  {
    name: 'replica-renews-others-leases',
    description: 'a replica renews whatever lease runs for whoever asks',
    breaks: "renew: only the lease's holder (its session) extends it",
    effects: { replica: { decide: replicaRules.renewsOthersLeases } },
  },
  {
    name: 'replica-releases-for-anyone',
    description: 'a replica ends the lease at the released epoch whoever asks',
    breaks: "release: only the lease's holder (its session) ends it",
    effects: { replica: { decide: replicaRules.releasesForAnyone } },
  },
  {
    name: 'replica-never-joins',
    description: 'a replica answers not_holder to a renew of a lease it did not sign, instead of joining it',
    breaks: 'joins: leases outlive any f of their signers',
    effects: { replica: { decide: neverJoins } },
  },
  {
    name: 'replica-joins-over-running-lease',
    description: "a replica joins a lease while another holder's lease runs there",
    breaks: 'joins: a lease starts only where no other lease runs',
    effects: { replica: { decide: replicaRules.joinsOverRunningLease } },
  },
  {
    name: 'replica-ignores-sessions',
    description: "a replica takes a lease as its holder's, whichever of the holder's sessions asks",
    breaks: "sessions: a lease is the session's that got it (step 3, step 5, renew, release)",
    effects: { replica: { decide: replicaRules.ignoresSessions } },
  },
  {
    name: 'replica-forgets-leases-on-restart',
    description: 'a restarted replica counts the leases of its records as over',
    breaks: 'the restart rule (every recorded lease runs maxTtl from a restart)',
    effects: { replica: { decide: replicaRules.forgetsLeasesOnRestart } },
  },
  {
    name: 'replica-skips-hello-check',
    description: 'a replica takes every hello as verified: a connection speaks for whatever holder key its hello names',
    breaks:
      "the handshake (a hello signed by the named holder's key over this connection's challenge), caught by the " +
      "malicious client's forged, replayed and tampered hellos",
    effects: { replica: { helloVerifies: () => true } },
  },
  {
    name: 'line-serves-newest-first',
    description: "a replica's line puts each new waiter at the front",
    breaks: 'lines serve waiters in arrival order',
    effects: { replica: { linePlacement: () => 0 } },
  },
  {
    name: 'replica-lets-newcomers-overtake',
    description: "a replica grants a newcomer while its resource's line waits, instead of sending it to the back",
    breaks: 'nobody overtakes a line (not even the holder that has just released and asks again at once)',
    effects: { replica: { lineOrder: (decision, facts) => inLineOrder(decision, { ...facts, lineWaits: false }) } },
  },
  {
    name: 'line-tells-no-turn-ahead',
    description: "a leader's line tells no waiter its turn's epoch before that turn is decided",
    breaks: 'lines: a hot handoff costs one round trip',
    effects: { replica: { turnsToldAhead: 0 } },
    caughtBy: 'timing',
  },
  {
    name: 'reshare-inherits-f-plus-1',
    description: 'a reshare inherits the signing records of f+1 old replicas instead of 2f+1',
    breaks: 'the reshare record carry-over (docs/resharing.md), hence S1',
    effects: { reshareRecords: (f) => f + 1 },
  },
  {
    name: 'client-trusts-one-answer',
    description: "a client believes f is 0: one replica's word decides where f+1 must agree",
    breaks: 'client epoch choice (the (f+1)-th answer), and the other (f+1)-th rules: busy, waits, a lost lease',
    effects: { client: { believedF: () => 0 } },
  },
  {
    name: 'client-takes-the-highest-epoch',
    description: 'a client proposes one above the highest epoch any replica reports, not the (f+1)-th largest',
    breaks: 'client epoch choice: one liar cannot push the epoch above every honest answer (else too_far for ever)',
    effects: { client: { rules: { chooseEpoch: highestEpochPlusOne } } },
  },
  {
    name: 'client-asks-everyone-at-once',
    description: 'a client asks every replica to sign at once (no straggler wait, no grant latency learnt)',
    breaks: 'client: t signers first',
    effects: { client: { asksEveryoneAtOnce: true } },
    caughtBy: 'timing',
  },
  {
    name: 'client-skips-catch-up',
    description: 'a client never brings a replica that answers too_far up with evidence',
    breaks: 'client catch-up (docs/protocol.md, "Epoch steps")',
    effects: { client: { rules: { catchUpStep: () => undefined } } },
  },
  {
    name: 'client-ignores-turns',
    description: 'a client hears no turn push: a waiter asks the other signers only once the leader granted it',
    breaks: 'client lines: a hot handoff costs one round trip',
    effects: { client: { ignoresTurns: true } },
    caughtBy: 'timing',
  },
  {
    name: 'client-combines-t-minus-1',
    description: 'a client combines t-1 partials into a token',
    breaks: 'client partials: S5 (a token needs t partials)',
    effects: { clientThreshold: (t) => t - 1 },
  },
  {
    name: 'client-trusts-any-signature',
    description: 'a client takes every partial and combined signature as valid, unchecked',
    breaks: 'client partial verification (a client holds only a token that verifies)',
    effects: { client: { trustsAnySignature: true } },
  },
  {
    name: 'client-view-outlasts-leases',
    description: "a client's lease view ends a margin after its ttl instead of before",
    breaks: "client lease view: the holder's view ends before any replica's lease",
    effects: { client: { viewOutlastsLeases: true } },
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
    breaks: 'client epoch choice: the first acquire of a resource costs one round trip while floors differ',
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
    name: 'guard-compares-le',
    description: 'the guard refuses epoch <= barrier instead of epoch < barrier',
    breaks: "the guard rule (the barrier's own token is accepted again)",
    effects: { fence: fenceWithLessOrEqual },
  },
];

/** @returns the mutation named `name`, or undefined when there is none. */
export function mutationNamed(name: string): Mutation | undefined {
  return MUTATIONS.find((mutation) => mutation.name === name);
}
