/**
 * The acquire call's state, plain data (docs/protocol.md, Client rules): what the loop knows (acquire.ts), the
 * attempt under way (attempt.ts) and how its answers were judged (answers.ts). No class instance, no function:
 * structuredClone copies it, and the copy steps to the same actions as the original
 * (test/unit/client-core-plain-state.test.ts). What is not plain (a combined signature, a token) never enters it:
 * it lives only in the step that makes it (AttemptStep) and leaves with the call's end.
 */
import type { AcquireOutcome } from '../../protocol/messages.js';
import type { Grant } from '../../token/grant.js';
import type { HeldPartial } from '../catch-up.js';
import type { ReplicaFault } from '../evidence.js';
import type { CombineOutcome, PartialSet } from '../partial-collector.js';
import type { Attempt, Blocker } from './attempt-result.js';
import type { CallState, CoreEnv } from './env.js';
import type { AcquireGrantResult, EpochHint } from './results.js';
import type { RoundState } from './round.js';

/** The call's request, as the caller validated it. */
export interface AcquireCall {
  readonly resource: string;
  readonly ttlMs: number;
  /** How long to keep waiting while the resource is held by someone else. */
  readonly waitMs: number;
  /** The whole call ends by then (ms from the start), whatever happens. */
  readonly timeoutMs: number;
  /** Crash recovery: end this identity's lease held under another session (docs/protocol.md, "Sessions"). */
  readonly resume?: boolean | undefined;
  /**
   * Wait by polling, not in the leader's line: a grant this call got from the line came after its lease had ended
   * at the replicas that granted it at once (src/client/acquire.ts), so the line is no way to a lease this time.
   */
  readonly pollOnly?: boolean | undefined;
}

/** The call's end: the result, and what to remember about the resource for the next call (granted only). */
export interface AcquireEnd {
  readonly result: AcquireGrantResult;
  readonly hint?: EpochHint;
}

/** A replica that said `too_far` and is being brought up with evidence (catch-up.ts). */
export interface Lagging {
  /** Its record (or floor) as it last said, or the last catch-up step it granted us. */
  current: bigint;
  /** The epoch of the catch-up request in flight, if any. */
  asking: bigint | undefined;
  steps: number;
}

/** What an attempt's answers said, as the judge counted them (answers.ts). */
export interface JudgeState {
  readonly voted: Set<number>;
  readonly granted: Set<number>;
  readonly busy: number[];
  readonly busyEpochs: bigint[];
  /** Only the refusals that end the call, in order (each with what the replica said); grants, busy and outdated answers have rules of their own. */
  readonly refusals: { readonly kind: 'forbidden' | 'invalid'; readonly message: string }[];
  outdated: number;
  readonly blockers: Blocker[];
  readonly frozen: number[];
  /** Replicas that granted with another share generation than the cluster description's (not combined). */
  readonly otherGeneration: number[];
  /** Partials usable at this attempt's epoch, kept as evidence for replicas that lag (catch-up.ts). */
  readonly held: HeldPartial[];
  readonly lagging: Map<number, Lagging>;
  /** Catch-up steps granted below the attempt's epoch (each a lease of ours to release if the attempt fails). */
  readonly steppedTo: Map<number, bigint>;
}

/** One attempt at a chosen epoch (attempt.ts). */
export interface AttemptState {
  /** Leader-first: ask this replica first and the others once it granted; undefined asks t replicas first. */
  readonly leader: number | undefined;
  /**
   * Leader-first only: how long the leader may keep the request in its line while the resource is held
   * (docs/protocol.md, Hot handoffs); it then grants the resource's next epoch when our turn comes. 0: answer now.
   */
  readonly waitTurnMs: number;
  /**
   * The loop knows fewer than 2f+1 replicas' epochs (the epoch was a guess): keep listening until 2f+1 have
   * answered even once this epoch can no longer win, so the next attempt can choose by the (f+1)-th rule.
   */
  readonly learnEpochs: boolean;
  readonly roundDeadline: number;
  readonly round: RoundState;
  epoch: bigint;
  grant: Grant;
  collector: PartialSet;
  /** Taken before the first request leaves, so the holder's lease view starts before any replica's (docs/protocol.md). */
  sentAt: number;
  /** Leader-first: true until the leader granted or announced our turn. */
  leaderOnly: boolean;
  /** Announced by the leader: we were first in its line behind a running lease. */
  waited: boolean;
  /** Told or granted by the leader: our turn came (should the others' answers lose it, a lost turn). */
  turnCame: boolean;
  /** The leader's turn came at another epoch than it announced (someone got in first): this attempt is lost. */
  turnMoved: boolean;
  leaderRefusal: Extract<Attempt, { kind: 'busy' | 'outdated' }> | undefined;
  widenTimer: number | undefined;
  lateTimer: number | undefined;
  leaderCheckTimer: number | undefined;
  /** The leader waited at stopped being the resource's leader (slow, hung, down): see checkLeader. */
  leaderGone: boolean;
  straggling: boolean;
  /** The answer whose partials are being combined, judged further once `combined` comes. */
  combining: { readonly replica: number; readonly outcome: AcquireOutcome } | undefined;
  ended: 'exhausted' | 'deadline' | 'aborted' | undefined;
  finished: boolean;
  readonly judge: JudgeState;
}

export type AcquirePhase =
  | {
      readonly kind: 'attempt';
      readonly attempt: AttemptState;
      readonly waitTurnMs: number;
      /** Nothing was known of the resource's epoch (no 2f+1 answers, no epoch of our own): its stale answers teach it. */
      readonly unknown: boolean;
    }
  | { readonly kind: 'pause'; readonly timer: number }
  | {
      readonly kind: 'busy_wait';
      readonly timer: number;
      readonly busy: Extract<Attempt, { kind: 'busy' }>;
    }
  | { readonly kind: 'done' };

/** The whole acquire call (acquire.ts). */
export interface AcquireState {
  readonly request: AcquireCall;
  readonly call: CallState;
  readonly faults: ReplicaFault[];
  /** The highest epoch each replica reported during this call. A liar's entry is outvoted by the (f+1)-th rule. */
  readonly known: Map<number, bigint>;
  deadline: number;
  waitUntil: number;
  /** The lowest epoch still worth asking for, raised by releases of partial grants (floorAfterRelease). */
  floor: bigint;
  hint: bigint | undefined;
  retries: number;
  lastEpoch: bigint;
  retryAtOnce: boolean;
  /** Leader-first mode; `retried` is what we remember for next time, so a resource that calms down goes back to full fan-out. */
  contended: boolean;
  retried: boolean;
  lastFullAttemptAt: number;
  /**
   * Set once the leader kept us in its line for the whole wait without our turn coming (a long line, or a leader
   * that serves nobody): the rest of this call polls instead, with the (f+1)-th rules of full attempts.
   */
  turnMissed: boolean;
  /**
   * Turns the leader granted us that were lost all the same (the others' answers split the vote): the first is
   * retried in the line, a second counts as a missed turn, so a leader that grants turns the others refuse costs
   * at most two turn waits per call.
   */
  turnsLost: number;
  /**
   * Blockers whose claim an attempt has gone above in this call, and the epoch the next attempt goes to for one
   * (escalationEpoch in catch-up.ts): the (f+1)-th rule alone would never pass a lone replica ahead of the rest.
   */
  readonly escalationTried: Set<number>;
  escalateTo: bigint | undefined;
  phase: AcquirePhase;
  /** The call has ended (its end left with the step that ended it). */
  done: boolean;
}

/** One step of an attempt: its state, the call's, and what the step made that is not plain data. */
export interface AttemptStep {
  readonly env: CoreEnv;
  readonly acquire: AcquireState;
  readonly attempt: AttemptState;
  /** The partials combined in this step: the attempt ends with them now. */
  won: Extract<CombineOutcome, { ok: true }> | undefined;
  /** Set once the attempt has ended, in the step that ended it. */
  result: Attempt | undefined;
}

/** A replica reported its epoch: kept for the next attempt's (f+1)-th choice. */
export function reportEpoch(acquire: AcquireState, replica: number, epoch: bigint): void {
  const previous = acquire.known.get(replica);
  if (previous === undefined || epoch > previous) acquire.known.set(replica, epoch);
}

/** Partial grants at `released` that `holders` replicas granted were released (floorAfterRelease). */
export function noteReleased(acquire: AcquireState, f: number, released: bigint, holders: number): void {
  acquire.floor = floorAfterRelease(acquire.floor, released, holders, f);
}

/**
 * The lowest epoch an acquire still asks for after releasing partial grants at `released` that `holders` replicas
 * granted (pure; a replica that may still grant is not counted, see releaseWhatWasWon in answers.ts). With f+1 or more, at least one honest replica keeps a released record there and answers any
 * request at or below it `stale`, so fewer than 2f+1 could grant such an epoch: skip past it. With f or fewer the
 * grants may all be liars' (a leader pushed far ahead names its own epoch as our turn; docs/protocol.md, "Epoch
 * steps"), and the 2f+1 others can still grant below it: rising would follow the liars out of the honest
 * replicas' reach for good, so the floor stays.
 */
export function floorAfterRelease(floor: bigint, released: bigint, holders: number, f: number): bigint {
  if (holders <= f || released < floor) return floor;
  return released + 1n;
}
