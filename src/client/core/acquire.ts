/**
 * The acquire call, sans I/O (docs/protocol.md, Client rules; src/client/acquire.ts describes the protocol and
 * runs this core): each attempt picks an epoch, asks t replicas to sign (attempt.ts), and a failed attempt is
 * classified and acted on: busy (a place in the leader's line, or the polling wait), outdated (retry at once at
 * what the answers reported), contended (back off, release what was won, go above a blocker), a refusal f+1
 * replicas agree on, or unavailable (stop). Under contention attempts go leader-first, and at least once every
 * LEADER_FIRST_WINDOW_MS one asks every replica, whose (f+1)-th rules decide again.
 *
 * Nothing a replica sends can make it throw, and every wait ends by the caller's deadline or abort.
 */
import { MAX_EPOCH } from '../../common/limits.js';
import type { AcquireGrantResult, AcquireRefusal, AcquireRefusalReason, EpochHint } from './results.js';
import { backoffDelay } from '../backoff.js';
import { escalationEpoch } from '../catch-up.js';
import { firstEpoch } from '../epoch-choice.js';
import { CallFaults } from './faults.js';
import { leaderFor } from '../signer-choice.js';
import { busyPauseMs, turnWaitMs } from './waits.js';
import { AttemptCore } from './attempt.js';
import type { Attempt } from './attempt-result.js';
import { CLIENT_RULES, newCallState, type CallState, type CoreEnv } from './env.js';
import { outbox, type CallCore, type ConnectionView, type CoreAction, type CoreEvent } from './io.js';

/**
 * Leader-first attempts are made for at most this long after the last attempt that asked every replica: so a
 * leader that refuses everyone, or reports a made-up epoch, costs a client at most this much before the
 * (f+1)-th rules of a full attempt decide again. Short enough to be a small delay, long enough that a waiter's
 * polls mostly go to the leader alone.
 */
export const LEADER_FIRST_WINDOW_MS = 250;

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

type Phase =
  | {
      readonly kind: 'attempt';
      readonly attempt: AttemptCore;
      readonly waitTurnMs: number;
      /** Nothing was known of the resource's epoch (no 2f+1 answers, no epoch of our own): its stale answers teach it. */
      readonly unknown: boolean;
    }
  | { readonly kind: 'pause'; readonly timer: number }
  | { readonly kind: 'busy_wait'; readonly timer: number; readonly busy: Extract<Attempt, { kind: 'busy' }> }
  | { readonly kind: 'done' };

export class AcquireCore implements CallCore<AcquireEnd> {
  readonly #env: CoreEnv;
  readonly #request: AcquireCall;
  readonly #call: CallState;
  readonly #faults = new CallFaults();
  /** The highest epoch each replica reported during this call. A liar's entry is outvoted by the (f+1)-th rule. */
  readonly #known = new Map<number, bigint>();
  #deadline = 0;
  #waitUntil = 0;
  /** The lowest epoch still worth asking for, raised by releases of partial grants (floorAfterRelease). */
  #floor = 1n;
  #hint: bigint | undefined;
  #retries = 0;
  #lastEpoch = 0n;
  #retryAtOnce = false;
  /** Leader-first mode; `retried` is what we remember for next time, so a resource that calms down goes back to full fan-out. */
  #contended: boolean;
  #retried = false;
  #lastFullAttemptAt = 0;
  /**
   * Set once the leader kept us in its line for the whole wait without our turn coming (a long line, or a leader
   * that serves nobody): the rest of this call polls instead, with the (f+1)-th rules of full attempts.
   */
  #turnMissed = false;
  /**
   * Turns the leader granted us that were lost all the same (the others' answers split the vote): the first is
   * retried in the line, a second counts as a missed turn, so a leader that grants turns the others refuse costs
   * at most two turn waits per call.
   */
  #turnsLost = 0;
  /**
   * Blockers whose claim an attempt has gone above in this call, and the epoch the next attempt goes to for one
   * (escalationEpoch in catch-up.ts): the (f+1)-th rule alone would never pass a lone replica ahead of the rest.
   */
  readonly #escalationTried = new Set<number>();
  #escalateTo: bigint | undefined;
  #phase: Phase = { kind: 'done' };
  #end: AcquireEnd | undefined;

  /**
   * @param hint what the last call remembered about the resource (its epoch, whether it was contended).
   * @param aborted the caller's signal had fired before the call began.
   */
  constructor(
    env: CoreEnv,
    request: AcquireCall,
    connections: readonly ConnectionView[],
    hint: EpochHint | undefined,
    aborted = false,
  ) {
    this.#env = env;
    this.#request = request;
    this.#call = newCallState(connections, aborted);
    this.#hint = hint?.epoch;
    this.#contended = hint?.contended ?? false;
    this.#turnMissed = request.pollOnly === true;
  }

  get result(): AcquireEnd | undefined {
    return this.#end;
  }

  /**
   * The resource's leader now: its hash leader, or the next connected one in ring order when that one is down or
   * answers far slower than the rest (leaderFor); undefined with no replica connected.
   */
  get #leader(): number | undefined {
    return leaderFor(this.#call.connections, this.#request.resource, this.#env.cluster.t);
  }

  start(at: number): CoreAction[] {
    this.#deadline = at + this.#request.timeoutMs;
    this.#waitUntil = at + this.#request.waitMs;
    this.#lastFullAttemptAt = at;
    // Replicas whose last connection ended because they broke the protocol are named even though no request reached them.
    for (const { index, state } of this.#call.connections) {
      const failure = state.lastFailure;
      if (state.phase !== 'ready' && (failure?.kind === 'protocol' || failure?.kind === 'bad_challenge'))
        this.#faults.add(index, failure.kind, failure.message);
    }
    this.#next(at);
    return outbox.take(this.#call.out);
  }

  step(event: CoreEvent): CoreAction[] {
    if (this.#end) return [];
    const phase = this.#phase;
    if (event.type === 'connections') this.#call.connections = event.connections;
    if (event.type === 'abort') this.#call.aborted = true;
    if (phase.kind === 'attempt') this.#stepAttempt(phase, event);
    else if (phase.kind === 'pause') this.#stepPause(phase, event);
    else if (phase.kind === 'busy_wait') this.#stepBusyWait(phase, event);
    return outbox.take(this.#call.out);
  }

  #stepAttempt(phase: Extract<Phase, { kind: 'attempt' }>, event: CoreEvent): void {
    const { attempt } = phase;
    switch (event.type) {
      case 'answer':
        attempt.answer(event.request, event.answer, event.at);
        break;
      case 'timer':
        attempt.timer(event.timer, event.at);
        break;
      case 'connections':
        attempt.connectionsChanged(event.at);
        break;
      case 'turn':
        attempt.turn(event.replica, event.epoch, event.at);
        break;
      case 'combined':
        attempt.combined(event.outcome, event.at);
        break;
      case 'abort':
        attempt.abort(event.at);
        break;
      case 'released':
        break;
    }
    if (attempt.result) this.#afterAttempt(phase, attempt.result, event.at);
  }

  #stepPause(phase: Extract<Phase, { kind: 'pause' }>, event: CoreEvent): void {
    if (event.type === 'abort') {
      outbox.clearTimer(this.#call.out, phase.timer);
      this.#refuse('aborted', 'the caller aborted the acquire');
    } else if (event.type === 'timer' && event.timer === phase.timer) this.#next(event.at);
  }

  #stepBusyWait(phase: Extract<Phase, { kind: 'busy_wait' }>, event: CoreEvent): void {
    if (event.type === 'abort') {
      outbox.clearTimer(this.#call.out, phase.timer);
      this.#refuse('aborted', 'the caller aborted the acquire');
      return;
    }
    // A replica's release notice ends the wait early; the poll still bounds it, since a notice may never come.
    const woken = event.type === 'released' || (event.type === 'timer' && event.timer === phase.timer);
    if (!woken) return;
    outbox.clearTimer(this.#call.out, phase.timer);
    this.#retries = 0;
    this.#next(event.at);
  }

  /** The loop's head: stop, pause, or start the next attempt at the epoch the rules choose. */
  #next(at: number): void {
    if (this.#call.aborted) return this.#refuse('aborted', 'the caller aborted the acquire');
    if (at >= this.#deadline) return this.#refuse('timeout', `no grant within ${this.#request.timeoutMs} ms`);
    const leaderFirst =
      this.#contended && at - this.#lastFullAttemptAt < LEADER_FIRST_WINDOW_MS && this.#leader !== undefined;
    const guessed = this.#known.size < 2 * this.#env.cluster.f + 1;
    const unknown = guessed && this.#hint === undefined;
    const epoch = this.#chooseEpoch(leaderFirst);
    if (this.#retryAtOnce && epoch <= this.#lastEpoch) {
      // The answers did not move the epoch (liars, or a lagging quorum): back off as for a split vote.
      return this.#pause(at);
    }
    this.#retryAtOnce = false;
    this.#lastEpoch = epoch;
    if (!leaderFirst) this.#lastFullAttemptAt = at;
    const waitTurnMs =
      leaderFirst && !this.#turnMissed
        ? turnWaitMs(at, this.#waitUntil, this.#deadline, this.#env.options.requestTimeoutMs)
        : 0;
    const attempt = new AttemptCore(
      this.#env,
      this.#call,
      {
        request: this.#request,
        epoch,
        deadline: this.#deadline,
        report: (replica, reported) => this.#report(replica, reported),
        faults: this.#faults,
        leader: leaderFirst ? this.#leader : undefined,
        waitTurnMs,
        learnEpochs: guessed,
        onReleased: (released, holders) => {
          this.#floor = floorAfterRelease(this.#floor, released, holders, this.#env.cluster.f);
        },
      },
      at,
    );
    const phase = { kind: 'attempt', attempt, waitTurnMs, unknown } as const;
    this.#phase = phase;
    if (attempt.result) this.#afterAttempt(phase, attempt.result, at);
  }

  /** The epoch of the next attempt (docs/protocol.md: Epoch choice, Leader-first, Catch-up and escalation). */
  #chooseEpoch(leaderFirst: boolean): bigint {
    const { f } = this.#env.cluster;
    let epoch: bigint;
    const { chooseEpoch } = this.#env.rules ?? CLIENT_RULES;
    if (this.#known.size >= 2 * f + 1) epoch = maxEpoch(chooseEpoch([...this.#known.values()], f), this.#floor);
    else if (this.#hint !== undefined) {
      epoch = maxEpoch(this.#hint + 1n, this.#floor);
      this.#hint = undefined;
    } else {
      // Nothing known: propose above the first signers' floors. Stale answers carry each replica's epoch, and the
      // retry uses them.
      epoch = maxEpoch(this.#firstEpoch(), this.#floor);
    }
    // Leader-first, the leader's own record decides, so follow it even when the (f+1)-th rule lags behind it:
    // a leader ahead of the quorum (partial grants it gave) would otherwise refuse every attempt as stale.
    const leader = this.#leader;
    const leaderEpoch = leader === undefined ? undefined : this.#known.get(leader);
    if (leaderFirst && leaderEpoch !== undefined && leaderEpoch + 1n > epoch && leaderEpoch < MAX_EPOCH)
      epoch = leaderEpoch + 1n;
    const escalateTo = this.#escalateTo;
    this.#escalateTo = undefined;
    return escalateTo !== undefined && escalateTo > epoch && escalateTo <= MAX_EPOCH ? escalateTo : epoch;
  }

  /**
   * The first attempt's epoch for a resource nothing is known of (firstEpoch in epoch-choice.ts): above the floor of
   * every connected replica, not only of the first signers, so that the replicas that do not sign can join the lease
   * (docs/protocol.md, "Leases that outlive f signers"); one with a higher floor could not.
   */
  #firstEpoch(): bigint {
    const { f } = this.#env.cluster;
    const ready = this.#call.connections.filter(({ state }) => state.phase === 'ready');
    const floors = ready.map(({ state }: ConnectionView) => state.floor ?? 0n);
    return firstEpoch(floors, floors, f, this.#env.options.maxEpochStep);
  }

  #report(replica: number, epoch: bigint): void {
    const previous = this.#known.get(replica);
    if (previous === undefined || epoch > previous) this.#known.set(replica, epoch);
  }

  #afterAttempt(phase: Extract<Phase, { kind: 'attempt' }>, attempt: Attempt, at: number): void {
    this.#phase = { kind: 'done' };
    this.#noteContention(phase, attempt);
    switch (attempt.kind) {
      case 'granted':
        // A grant that waited its turn in the leader's line is contention too, and so is one some replica refused
        // (`busy`, or `stale` at or above its epoch: a lease, a line or another contender was there, and the grant
        // came from the others): the next call goes to the line first rather than racing the line's next turn at
        // the other replicas with a full attempt.
        this.#end = {
          result: { ok: true, grant: attempt.grant, faults: this.#faults.list() },
          hint: {
            epoch: attempt.grant.token.grant.epoch,
            contended: this.#retried || attempt.waited || attempt.crowded,
          },
        };
        return;
      case 'stop':
        return this.#refuse(attempt.reason, attempt.message);
      case 'busy':
        return this.#busy(attempt, at);
      case 'outdated':
        this.#retryAtOnce = true;
        return this.#next(at);
      case 'contended':
        this.#escalateTo = escalationEpoch(attempt.blockers, this.#escalationTried);
        return this.#pause(at);
      case 'leader_gone':
        return this.#next(at);
    }
  }

  #noteContention(phase: Extract<Phase, { kind: 'attempt' }>, attempt: Attempt): void {
    // Kept in the leader's line without our turn coming (busy when the wait ended, or no answer at all).
    if (phase.waitTurnMs > 0 && attempt.kind === 'busy') this.#turnMissed = true;
    if (phase.waitTurnMs > 0 && attempt.kind === 'contended' && (!attempt.turnCame || ++this.#turnsLost > 1))
      this.#turnMissed = true;
    // A guess that came back stale is how an unknown resource is learnt, not a sign of contention. An epoch of our
    // own that came back stale is: someone else took the resource since our last grant, and the holder that asks
    // again at once after its release (a hot resource) must go to the line, not race the waiter whose turn it is.
    if (attempt.kind !== 'granted' && !(attempt.kind === 'outdated' && phase.unknown))
      this.#contended = this.#retried = true;
  }

  /** f+1 replicas say it is held: take a place in the leader's line now rather than poll for the release. */
  #busy(busy: Extract<Attempt, { kind: 'busy' }>, at: number): void {
    if (!busy.leaderOnly && !this.#turnMissed && this.#leader !== undefined && at < this.#waitUntil)
      return this.#next(at);
    const limit = Math.min(this.#waitUntil, this.#deadline);
    if (at >= limit) return this.#finish(busyRefusal(busy, this.#faults));
    if (this.#call.aborted) return this.#refuse('aborted', 'the caller aborted the acquire');
    const { busyPollMs } = this.#env.options;
    const timer = outbox.setTimer(
      this.#call.out,
      busyPauseMs(at, limit, busy.remainingMs, busyPollMs, this.#env.random()),
    );
    this.#phase = { kind: 'busy_wait', timer, busy };
  }

  /** Jittered exponential backoff before the next attempt. */
  #pause(at: number): void {
    this.#retryAtOnce = false;
    const { retryBaseMs, retryMaxMs } = this.#env.options;
    const pause = backoffDelay(this.#retries++, { baseMs: retryBaseMs, maxMs: retryMaxMs }, this.#env.random());
    if (this.#call.aborted) return this.#refuse('aborted', 'the caller aborted the acquire');
    const timer = outbox.setTimer(this.#call.out, Math.min(pause, Math.max(0, this.#deadline - at)));
    this.#phase = { kind: 'pause', timer };
  }

  #refuse(reason: Exclude<AcquireRefusalReason, 'busy'>, message: string): void {
    this.#finish({ ok: false, reason, message, faults: this.#faults.list() });
  }

  #finish(result: AcquireGrantResult): void {
    this.#phase = { kind: 'done' };
    this.#end = { result };
  }
}

function maxEpoch(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}

function busyRefusal(busy: { epoch: bigint; remainingMs: number }, faults: CallFaults): AcquireRefusal {
  return {
    ok: false,
    reason: 'busy',
    message: `held by another holder at epoch ${busy.epoch} for about ${busy.remainingMs} ms more`,
    epoch: busy.epoch,
    remainingMs: busy.remainingMs,
    faults: faults.list(),
  };
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
