/**
 * The replica's request handling without a transport: policy + signing
 * record + leases + signer. The server calls `handle` for each authenticated
 * request; tests can call it directly.
 *
 * Order for a grant (S3): the policy decides inside the signing record's
 * per-resource critical section, the record is written and flushed, and only
 * then is the partial returned. The partial is computed while the flush is in
 * flight (it is deterministic and stays in the process until the flush is
 * done), which takes the signing time off the acquire's latency.
 *
 * Beside it: what it is given (service-options.ts), what the simulator hears of its lease decisions
 * (lease-decision-note.ts), how it treats an acquire around the rules (service-acquire.ts) and compaction
 * (compaction.ts). Their exports are exported from here too.
 */
import { systemClock, type MonotonicClock } from '../common/clock.js';
import {
  MAX_LEASES_PER_REPLY,
  type AcquireRequest,
  type ActiveLease,
  type LeasesOutcome,
  type LeasesRequest,
  type Outcome,
  type Request,
} from '../protocol/messages.js';
import { mayAccess } from './access.js';
import { compactAll, DEFAULT_COMPACTION_BATCH, type CompactionSummary } from './compaction.js';
import { HandoffQueue, type BusyLease } from './handoff-queue.js';
import { lineTimersOn } from './line-timers.js';
import { leaseNote, type LeaseDecisionNote } from './lease-decision-note.js';
import { LeaseTable, latestLeases } from './leases.js';
import { DEFAULT_REPLICA_LIMITS } from './options.js';
import type { ReplicaMetrics, RefusalReason } from './metrics.js';
import type { EvidenceBudget, EvidenceChecker } from './grant-evidence.js';
import {
  decide,
  epochStepAllowed,
  floorRecord,
  precheck,
  remainingMs,
  type Caller,
  type Decision,
  type EpochSupport,
  type PolicyConfig,
  type PolicyRecord,
  type SignedRecord,
} from './policy.js';
import type { RecordChange } from './check-and-record.js';
import type { RecordStore } from './record-store.js';
import type { PartialSigner } from './signer.js';
import { nextEpochOf, waitsWhenBusy, withFloor } from './service-acquire.js';
import type { HandleContext, ReplicaServiceOptions } from './service-options.js';
import { applyLeaseChange, failed, RequestRun, type LeaseSection } from './service-run.js';
import { evidenceNeed } from './core/evidence-need.js';
import { afterAnswer, inLineOrder, routeArrival, type ArrivalFacts } from './core/line-core.js';
import { createRequestCore, stepRequest, type CoreAction, type RequestCore } from './core/request-core.js';

export { DEFAULT_COMPACTION_BATCH, type CompactionSummary } from './compaction.js';
export type { LeaseDecisionNote } from './lease-decision-note.js';
export type { HandleContext, ReplicaServiceOptions } from './service-options.js';

/** What one decision inside the critical section reads. */
interface SectionInput {
  readonly received: Request;
  readonly caller: Caller;
  /** An acquire that waited its turn in the line. */
  readonly queued: boolean;
  readonly support: readonly EpochSupport[];
  /** The durable record now. */
  readonly current: SignedRecord | undefined;
  readonly run: RequestRun;
}

export class ReplicaService {
  readonly store: RecordStore;
  readonly leases: LeaseTable;
  readonly #signer: PartialSigner;
  readonly #clock: MonotonicClock;
  readonly #policy: PolicyConfig;
  readonly #generation: number;
  readonly #metrics: ReplicaMetrics | undefined;
  readonly #retentionMs: number;
  readonly #compactionBatch: number;
  readonly #wallClock: () => number;
  readonly #evidence: Pick<EvidenceChecker, 'support'> | undefined;
  readonly #defer: (run: () => void) => void;
  readonly #decide: typeof decide;
  readonly #precheck: typeof precheck;
  readonly #lineOrder: typeof inLineOrder;
  readonly #onLeaseDecision: ((note: LeaseDecisionNote) => void) | undefined;
  #compacting: Promise<CompactionSummary> | undefined;
  readonly handoffs: HandoffQueue;
  /** The requests between their decision and their answer (core/request-core.ts). */
  readonly #core: RequestCore = createRequestCore();
  #nextRequestId = 0;

  constructor(options: ReplicaServiceOptions) {
    this.store = options.store;
    this.#signer = options.signer;
    this.#clock = options.clock;
    this.#policy = options.policy;
    this.#generation = options.generation ?? 0;
    this.#metrics = options.metrics;
    this.#retentionMs = options.retentionMs ?? DEFAULT_REPLICA_LIMITS.retentionMs;
    this.#compactionBatch = options.compactionBatch ?? DEFAULT_COMPACTION_BATCH;
    this.#wallClock = options.wallClock ?? Date.now;
    this.#evidence = options.evidence;
    this.#defer = options.defer ?? setImmediate;
    this.#decide = options.decide ?? decide;
    this.#precheck = options.precheck ?? precheck;
    this.#lineOrder = options.lineOrder ?? inLineOrder;
    this.#onLeaseDecision = options.onLeaseDecision;
    this.leases = new LeaseTable(options.clock, options.policy.maxTtlMs, options.store.openedWith.resources);
    // The line sets no timer of its own: this service performs its timer actions on its clock and tells it when one fires.
    this.handoffs = new HandoffQueue(
      lineTimersOn(options.timers ?? systemClock, (timer) => this.handoffs.timerFired(timer)),
      (request, caller, queued) => this.#handleOnce(request, caller, queued),
      options.maxWaitersPerResource ?? 256,
      {
        onExit: (how) => this.#metrics?.lineExits.inc({ how }),
        placement: options.linePlacement,
        turnsToldAhead: options.turnsToldAhead,
      },
    );
  }

  /**
   * Answers one authenticated request from `holder`. An acquire that says it may wait (`waitMs`) and finds the
   * resource held is answered when its turn comes (see handoff-queue.ts); `waiting.signal` (the connection
   * closed) ends that wait, and `waiting.onTurn` hears the epoch its turn will grant once it is near the head.
   * @throws QuorumFenceError INTERNAL (storage or signing failed), CLOSED
   */
  async handle(request: Request, holder: Uint8Array, waiting?: HandleContext): Promise<Outcome> {
    const outcome = await this.#handle(request, holder, waiting);
    return request.type === 'acquire' ? withFloor(outcome, this.store.floor) : outcome;
  }

  /**
   * The waiting-acquire path (core/line-core.ts decides it, this performs it): a release withdraws the caller's
   * waiters first; a waiting acquire may go straight into its line (`routeArrival`); otherwise the rules decide, and
   * their answer (`afterAnswer`) sends a waiting acquire told `busy` into the line, or wakes the line after a release.
   */
  async #handle(request: Request, holder: Uint8Array, waiting?: HandleContext): Promise<Outcome> {
    this.#metrics?.requests.inc({ type: request.type });
    const caller: Caller = { holder, session: waiting?.session ?? '' };
    if (request.type === 'release') this.handoffs.withdraw(request.resource, caller, request.epoch);
    const joined = this.#joinLine(request, caller, waiting);
    if (joined) return joined;
    const support = await this.#support(request, holder, waiting?.evidenceBudget);
    const outcome = await this.#handleOnce(request, caller, false, support);
    const next = afterAnswer(waitsWhenBusy(request), request.type === 'release', outcome);
    if (next.type === 'waitInLine' && request.type === 'acquire') {
      this.handoffs.arrived(request.resource); // announced by the decision, in #handleOnce
      return this.#waitInLine(request, caller, next.busy, waiting) ?? outcome;
    }
    if (next.type === 'wakeLine') this.handoffs.wake(request.resource);
    return outcome;
  }

  /** A waiting acquire routed straight into its line (`routeArrival`): its answer, or undefined (the line is full). */
  #joinLine(request: Request, caller: Caller, waiting: HandleContext | undefined): Promise<Outcome> | undefined {
    if (!waitsWhenBusy(request) || routeArrival(this.#arrivalFacts(request, caller)) !== 'joinLine') return undefined;
    return this.#waitInLine(request, caller, undefined, waiting);
  }

  /** Takes `request` into its line (handoff-queue.ts): its answer when its turn or its wait comes; undefined when full. */
  #waitInLine(
    request: AcquireRequest,
    caller: Caller,
    busy: BusyLease | undefined,
    waiting: HandleContext | undefined,
  ): Promise<Outcome> | undefined {
    return this.handoffs.wait(request, caller, busy, waiting?.signal, waiting?.onTurn);
  }

  /**
   * What decides whether a waiting acquire goes straight to the back of its resource's line (`routeArrival`): a
   * nextEpoch acquire's decision could only be `busy` there (the lease in the way, or the line's turn on its way:
   * nobody overtakes the line) once the bounds and access checks pass, and taking it now, without waiting for the
   * record's critical section (a grant's flush may hold it), lets the line tell it its turn's epoch a flush sooner.
   */
  #arrivalFacts(request: AcquireRequest, caller: Caller): ArrivalFacts {
    return {
      waits: true,
      nextEpoch: request.nextEpoch === true,
      carriesEvidence: (request.evidence?.length ?? 0) > 0,
      lineJoinable: this.handoffs.joinable(request.resource),
      storeFrozen: this.store.frozen !== undefined,
      refused: this.#precheck(request, caller.holder, this.#policy) !== undefined,
    };
  }

  /**
   * One pass of the rules. A `nextEpoch` acquire is decided at the resource's next epoch (or its own, if higher;
   * the answer then names the epoch). `queued`: an acquire that waited its turn in the line; any other new grant
   * waits behind the line's requests (see handoff-queue.ts).
   */
  async #handleOnce(
    received: Request,
    caller: Caller,
    queued: boolean,
    support: readonly EpochSupport[] = [],
  ): Promise<Outcome> {
    const { holder } = caller;
    const refused = this.#precheck(received, holder, this.#policy);
    if (refused) return this.#answer(refused);
    const { resource } = received;
    const id = this.#nextRequestId++;
    const run = new RequestRun(id);
    let decision: Decision;
    try {
      decision = await this.store.checkAndRecord<Decision>(resource, (current) =>
        this.#decideInSection({ received, caller, queued, support, current, run }),
      );
    } catch (error) {
      failed(stepRequest(this.#core, { type: 'writeFailed', id, error }), error);
    }
    // The record is durable by now (checkAndRecord resolved): the core may let the partial leave.
    this.#perform(stepRequest(this.#core, { type: 'durable', id }), run);
    while (!run.reply && run.signing) {
      const signing = run.signing;
      run.signing = undefined;
      let partial: Uint8Array;
      try {
        partial = await signing;
      } catch (error) {
        failed(stepRequest(this.#core, { type: 'signFailed', id, error }), error);
      }
      this.#perform(stepRequest(this.#core, { type: 'signed', id, partial }), run);
    }
    return this.#replied(run, decision);
  }

  /**
   * The rules' decision inside the record's critical section, handed to the core; performs the lease changes it
   * calls for and returns the record the section writes durably.
   */
  #decideInSection(section: SectionInput): RecordChange<Decision> {
    const { received, caller, queued, support, current, run } = section;
    const { holder, session } = caller;
    const { resource } = received;
    const id = run.id;
    // A waiter asks for the resource's next epoch whatever it knew: on its first decision too, so an epoch that
    // moved on while the request travelled does not send it back with `stale` instead of into the line.
    const request =
      received.type === 'acquire' && received.nextEpoch ? nextEpochOf(received, current, this.store.floor) : received;
    const now = this.#clock.now();
    const d = this.#inLineOrder(
      this.#decide(
        this.#policyRecord(resource, current),
        request,
        holder,
        now,
        this.#policy,
        this.store.floor,
        support,
        session,
      ),
      request,
      current,
      queued,
    );
    if (this.#onLeaseDecision && d.action !== 'reply')
      this.#onLeaseDecision(
        leaseNote(d, request, caller, now, current, this.store.floor, {
          fromLine: queued,
          lineWaits: this.handoffs.hasWaiters(resource),
        }),
      );
    const epoch = request.type === 'status' ? 0n : request.epoch;
    const extras = {
      ...(request.type === 'acquire' && request.nextEpoch ? { epoch } : {}),
      ...(this.#generation > 0 ? { generation: this.#generation } : {}),
    };
    const grant = { clusterId: this.#policy.clusterId, resource, epoch, holder };
    const actions = stepRequest(this.#core, { type: 'decided', id, decision: d, grant, extras });
    this.#perform(actions, run, { resource, current, session });
    return run.record ? { record: run.record, result: d } : { result: d };
  }

  /** The durable record of `resource` with its volatile lease state, as the rules read it (the floor's without one). */
  #policyRecord(resource: string, current: SignedRecord | undefined): PolicyRecord | undefined {
    const leaseEndsAt = this.leases.endsAt(resource, current);
    const joined = this.leases.joinedOf(resource);
    if (!current) return joined && floorRecord(this.store.floor, joined, leaseEndsAt);
    return {
      ...current,
      joined,
      leaseEndsAt,
      released: this.leases.isReleased(resource, current),
      session: this.leases.sessionOf(resource),
    };
  }

  /**
   * Performs the core's actions for `run`: lease changes (inside the critical section, `section` says which), the
   * record to write (the section writes it), signing, the reply; a `fail` throws its error.
   */
  #perform(actions: readonly CoreAction[], run: RequestRun, section?: LeaseSection): void {
    for (const action of actions) {
      switch (action.type) {
        case 'lease':
          if (section) applyLeaseChange(this.leases, section, action.change);
          break;
        case 'write':
          run.record = action.record;
          break;
        case 'sign':
          run.signing = this.#startSigning(action.message, action.whileFlushing);
          break;
        case 'reply':
          run.reply = action;
          break;
        case 'fail':
          failed([action], action.error);
      }
    }
  }

  /**
   * Starts signing `message`. While its record is being flushed, deferred to the next turn, so the record's write is
   * queued first and the flush overlaps the signing; the core holds the partial until the record is durable.
   */
  #startSigning(message: Uint8Array, whileFlushing: boolean): Promise<Uint8Array> {
    if (!whileFlushing) return this.#sign(message);
    const early = new Promise<void>((resolve) => this.#defer(resolve)).then(() => this.#sign(message));
    early.catch(() => undefined); // Awaited unless the write failed; then nobody needs it.
    return early;
  }

  /** The answer the core replied with, counted in the metrics. */
  #replied(run: RequestRun, decision: Decision): Outcome {
    const reply = run.reply;
    if (!reply) throw new Error(`unreachable: request ${run.id} left the core without a reply`);
    if (!reply.signed) return this.#answer(decision);
    this.#metrics?.grantsSigned.inc({ kind: reply.signed });
    return reply.outcome;
  }

  /**
   * The rules' decision, as the resource's line allows it (inside the record's critical section). Others wait in
   * the line: the lease in their way just ended (a release, whose wake of the line is on its way, or its end on this
   * clock) and the next grant is the first waiter's. A newcomer granted now would overtake the whole line (typically
   * the holder that just released, asking again at once); `busy` sends it to the back of the line instead (with
   * waitMs), and the line's own try follows. A waiting acquire told `busy` joins the line once its answer is back
   * from the section (#handle); until then it counts as waiting (`arriving`), so that no grant decided in between
   * overtakes it. `queued`: the line's own try, which none of this applies to. The rule is the core's
   * (core/line-core.ts, `inLineOrder`); this driver reads the line and the record for it and announces the arrival.
   */
  #inLineOrder(d: Decision, request: Request, current: SignedRecord | undefined, queued: boolean): Decision {
    const { resource } = request;
    const ordered = this.#lineOrder(d, {
      queued,
      lineWaits: !queued && this.handoffs.hasWaiters(resource),
      recordEpoch: current?.epoch ?? this.store.floor,
      waits: waitsWhenBusy(request),
    });
    if (ordered.arriving) this.handoffs.arriving(resource);
    return ordered.decision;
  }

  /**
   * The verified catch-up evidence of an acquire that needs it (core/evidence-need.ts decides whether it does), no
   * more than the epoch-step rule still needs (grant-evidence.ts). The check is this driver's I/O: it awaits the
   * pairings, batched with the process's other checks.
   */
  async #support(request: Request, holder: Uint8Array, budget: EvidenceBudget | undefined): Promise<EpochSupport[]> {
    if ((request.type !== 'acquire' && request.type !== 'renew') || !request.evidence?.length || !this.#evidence)
      return [];
    const need = evidenceNeed(
      {
        requestedEpoch: request.epoch,
        recordEpoch: this.store.get(request.resource)?.epoch,
        floor: this.store.floor,
        refused: this.#precheck(request, holder, this.#policy) !== undefined,
      },
      this.#policy,
    );
    if (!need.check) return [];
    const enough = (support: readonly EpochSupport[]) =>
      epochStepAllowed(need.current, need.hasRecord, request.epoch, support, this.#policy);
    return this.#evidence.support(request, holder, budget ?? (() => false), enough);
  }

  /**
   * The `leases` request (read-only, for the operator console): the leases running now on resources `holder`
   * may access, the ones ending last first, at most `limit`. A bounded walk of the lease table's end index
   * (latestLeases: at most MAX_LEASES_EXAMINED entries, each a record read at most), however many leases run;
   * a lease released since it was granted is not running.
   */
  activeLeases(request: LeasesRequest, holder: Uint8Array): LeasesOutcome {
    this.#metrics?.requests.inc({ type: request.type });
    if (!Number.isSafeInteger(request.limit) || request.limit < 1 || request.limit > MAX_LEASES_PER_REPLY) {
      this.#metrics?.refusals.inc({ reason: 'invalid' });
      return { status: 'invalid', message: `limit must be in 1..${MAX_LEASES_PER_REPLY}` };
    }
    const now = this.#clock.now();
    const describe = (resource: string, endsAt: number): ActiveLease | undefined => {
      if (!mayAccess(this.#policy.access, holder, resource)) return undefined;
      const record = this.store.get(resource);
      const grant = this.leases.grantOf(resource, record);
      if (!grant || this.leases.leaseReleased(resource, record)) return undefined;
      return { resource, epoch: grant.epoch, holder: grant.holder, remainingMs: remainingMs(endsAt, now) };
    };
    return { status: 'leases', ...latestLeases(this.leases.runningLatestFirst(), describe, request.limit) };
  }

  /**
   * Folds into the floor every record whose lease is not running (the restart
   * rule included) and whose grant is older than the retention window, one
   * batch per transaction, yielding between batches. A call while one runs
   * joins it.
   * @throws QuorumFenceError CLOSED, STORE_CORRUPT, INTERNAL
   */
  compact(): Promise<CompactionSummary> {
    this.#compacting ??= compactAll({
      store: this.store,
      leases: this.leases,
      retentionMs: this.#retentionMs,
      batch: this.#compactionBatch,
      wallClock: this.#wallClock,
      defer: this.#defer,
    }).finally(() => (this.#compacting = undefined));
    return this.#compacting;
  }

  async #sign(message: Uint8Array): Promise<Uint8Array> {
    if (!this.#metrics) return this.#signer.sign(message);
    const started = performance.now();
    const partial = await this.#signer.sign(message);
    this.#metrics.signSeconds.observe((performance.now() - started) / 1000);
    return partial;
  }

  #answer(decision: Decision): Outcome {
    if (decision.action === 'join') this.#metrics?.leaseJoins.inc();
    if (decision.action === 'grant' || decision.action === 'resend') {
      throw new Error(`unreachable: ${decision.action} has no outcome of its own`);
    }
    const status = decision.outcome.status;
    if (status !== 'ok' && status !== 'renewed' && status !== 'released' && status !== 'granted') {
      this.#metrics?.refusals.inc({ reason: status satisfies RefusalReason });
    }
    return decision.outcome;
  }
}
