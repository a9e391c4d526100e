/**
 * What a ReplicaService is given (`ReplicaServiceOptions`: its store, signer, clocks and deferral, the rules and the
 * simulator's hooks) and what a caller of `handle` may add to a request (`HandleContext`). Apart from service.ts so
 * that the service's file holds what it does, not the list of what it can be given.
 */
import type { Clock, MonotonicClock } from '../common/clock.js';
import type { inLineOrder } from './core/line-core.js';
import type { EvidenceBudget, EvidenceChecker } from './grant-evidence.js';
import type { LinePlacement } from './handoff-queue.js';
import type { LeaseDecisionNote } from './lease-decision-note.js';
import type { ReplicaMetrics } from './metrics.js';
import type { decide, PolicyConfig, precheck } from './policy.js';
import type { RecordStore } from './record-store.js';
import type { PartialSigner } from './signer.js';

export interface ReplicaServiceOptions {
  /** The signing record: LMDB's SigningRecord in production, a simulated one in src/simulation. */
  readonly store: RecordStore;
  readonly signer: PartialSigner;
  readonly clock: MonotonicClock;
  readonly policy: PolicyConfig;
  /**
   * The share generation this replica signs with (its cluster description's membershipVersion); sent with
   * every grant when not 0, so clients combine partials of one generation only (docs/resharing.md).
   */
  readonly generation?: number;
  readonly metrics?: ReplicaMetrics;
  /** How long a record is kept after its grant once its lease has ended (wall-clock ms; see docs/storage.md). */
  readonly retentionMs?: number;
  /** Records looked at per compaction transaction. */
  readonly compactionBatch?: number;
  /** Wall-clock milliseconds, compared with the records' grant times (default Date.now). */
  readonly wallClock?: () => number;
  /** Timers for acquires that wait their turn (default: the system's). */
  readonly timers?: Clock;
  /** Acquires that may wait their turn per resource; more are answered `busy` at once (default 256). */
  readonly maxWaitersPerResource?: number;
  /** Checks acquires' catch-up evidence (docs/protocol.md, "Epoch steps"); without it evidence counts for nothing. */
  readonly evidence?: Pick<EvidenceChecker, 'support'>;
  /** Runs `run` after the I/O already waiting (default setImmediate): lets a record's write start before its signing. */
  readonly defer?: (run: () => void) => void;
  /** The replica rules (default policy.ts's `decide`); the simulator plants its mutations here. */
  readonly decide?: typeof decide;
  /** Steps 1 and 2 as the service applies them before the record's critical section (default policy.ts's `precheck`). */
  readonly precheck?: typeof precheck;
  /** Where a new waiter takes its place in a resource's line (default: at the back; see handoff-queue.ts). */
  readonly linePlacement?: LinePlacement;
  /** How many waiters at the head of a line know their turn's epoch (default TURNS_TOLD_AHEAD; handoff-queue.ts). */
  readonly turnsToldAhead?: number;
  /** The rule that nobody overtakes a line (default core/line-core.ts's `inLineOrder`; the simulator plants here). */
  readonly lineOrder?: typeof inLineOrder;
  /**
   * Hears every decision that starts, extends or ends a lease, as it is taken (inside the record's critical section):
   * the simulator checks from these, independently of the rules, that leases exclude each other (src/simulation).
   */
  readonly onLeaseDecision?: (note: LeaseDecisionNote) => void;
}

/** What a caller of `handle` may add to a request besides its holder. */
export interface HandleContext {
  /**
   * The client session of the connection ('' or absent for a sessionless client): a running lease is the session's
   * that holds it, not its identity's (docs/protocol.md, "Sessions").
   */
  readonly session?: string;
  /** The connection closed: an acquire waiting its turn leaves the line. */
  readonly signal?: AbortSignal;
  /** An acquire waiting its turn (nextEpoch) hears the epoch its turn will grant once it is near the head of the line. */
  readonly onTurn?: (epoch: bigint) => void;
  /** The connection's allowance of evidence pairing checks (default: none). */
  readonly evidenceBudget?: EvidenceBudget;
}
