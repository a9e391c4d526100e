/**
 * Getting an admission token from a quorum (docs/protocol.md, Client rules).
 *
 * Each attempt picks an epoch, asks t replicas to sign (resource, epoch,
 * holder), the others too as soon as one of those says anything else or is
 * late, and combines the first t partials that verify. The epoch comes from
 * what replicas reported (the (f+1)-th largest, plus one), from the epoch
 * this client was last granted, or, when nothing is known yet, is simply the
 * lowest one not tried: an uncontended acquire is then one round trip, and a
 * resource that has moved on answers `stale` with each replica's epoch, which
 * the immediate retry uses. Failed attempts are classified:
 *
 * - busy (f+1 replicas hold someone else's lease): take a place in the line
 *   of the resource's leader, which answers when our turn comes, granting
 *   the resource's next epoch (docs/protocol.md, Hot handoffs); if the line
 *   is full, or our turn did not come within the wait we asked for, wait as
 *   before lines existed: for the time at least one honest replica says
 *   remains, or a replica's release notice, polling meanwhile;
 * - outdated (no grants, only stale or too_far answers): the epoch moved on
 *   while we were not looking; retry at once with what the answers reported;
 * - contended (split votes): retry after jittered exponential backoff,
 *   releasing whatever partial grants we got so the other contender is not
 *   blocked by our half-won lease; a turn the leader granted that was lost
 *   this way is retried in the line once before the call falls back to polling;
 * - forbidden / invalid (f+1 say so, so at least one honest replica): stop;
 * - unavailable (fewer than t replicas could answer): stop at once.
 *
 * Under contention (any retry, or a resource whose last acquire needed
 * retries or waited its turn in a line) an attempt goes leader-first: it asks one replica chosen by the
 * resource name, and the others only once that one granted. Contenders then
 * queue at one replica instead of splitting the votes of all of them, and a
 * waiter's poll costs one request instead of N. A replica that refuses
 * everyone cannot stall a client this way: every LEADER_FIRST_WINDOW_MS at
 * least one attempt asks all replicas, whose (f+1)-th rules decide again.
 *
 * Nothing a replica sends can make this throw, and every wait is cut short
 * by the caller's deadline and AbortSignal.
 */
import { MAX_EPOCH } from '../common/limits.js';
import type { AdmissionToken } from '../token/admission-token.js';
import { backoffDelay } from './backoff.js';
import { delay } from './delay.js';
import { chooseEpoch } from './epoch-choice.js';
import type { ReplicaFault } from './evidence.js';
import { CallFaults, type QuorumContext } from './quorum-context.js';
import { attemptEpoch } from './acquire-attempt.js';
import { waitWhileBusy } from './acquire-status.js';
import { escalationEpoch } from './catch-up.js';
import { leaderOf } from './signer-choice.js';

export interface AcquireRequest {
  readonly resource: string;
  readonly ttlMs: number;
  /** How long to keep waiting while the resource is held by someone else. */
  readonly waitMs: number;
  /** The whole call ends by then (ms from the start), whatever happens. */
  readonly timeoutMs: number;
  readonly signal?: AbortSignal | undefined;
  /** End this identity's lease held under another session (a crashed process's) instead of waiting it out. */
  readonly resume?: boolean;
}

export interface AcquiredGrant {
  readonly token: AdmissionToken;
  /** Client clock reading taken before the first acquire request for this epoch left. */
  readonly sentAt: number;
  readonly ttlMs: number;
  /** Replicas whose partials made the token. */
  readonly signers: readonly number[];
  /** Replicas asked for this grant: the only ones that can hold its lease. */
  readonly asked?: readonly number[];
}

export type AcquireRefusalReason = 'busy' | 'timeout' | 'unavailable' | 'aborted' | 'forbidden' | 'invalid';

export type AcquireRefusal =
  | {
      readonly ok: false;
      /** Another holder's lease runs (per at least f+1 replicas) past the caller's wait time. */
      readonly reason: 'busy';
      readonly message: string;
      /** The epoch of the lease in the way, as f+1 replicas report it. */
      readonly epoch: bigint;
      /** How long at least one honest replica says that lease still runs. */
      readonly remainingMs: number;
      readonly faults: readonly ReplicaFault[];
    }
  | {
      readonly ok: false;
      readonly reason: Exclude<AcquireRefusalReason, 'busy'>;
      readonly message: string;
      readonly faults: readonly ReplicaFault[];
    };

export type AcquireGrantResult =
  { readonly ok: true; readonly grant: AcquiredGrant; readonly faults: readonly ReplicaFault[] } | AcquireRefusal;

/**
 * Leader-first attempts are made for at most this long after the last attempt that asked every replica: so a
 * leader that refuses everyone, or reports a made-up epoch, costs a client at most this much before the
 * (f+1)-th rules of a full attempt decide again. Short enough to be a small delay, long enough that a waiter's
 * polls mostly go to the leader alone.
 */
const LEADER_FIRST_WINDOW_MS = 250;

/**
 * Runs the acquire protocol. Resolves with a grant or a refusal; the caller
 * (QuorumFenceClient) validates the request first and wraps the grant in a Lease.
 * @throws QuorumFenceError EPOCH_OUT_OF_RANGE when the resource's epochs are used up (2^63-1 grants).
 */
export async function acquireGrant(ctx: QuorumContext, request: AcquireRequest): Promise<AcquireGrantResult> {
  const { cluster, options } = ctx;
  const { clock } = options;
  const { f } = cluster;
  const start = clock.now();
  const deadline = start + request.timeoutMs;
  const waitUntil = start + request.waitMs;
  const faults = new CallFaults();
  // Replicas whose last connection ended because they broke the protocol are named even though no request reached them.
  for (const channel of ctx.channels.channels) {
    const failure = channel.state.lastFailure;
    if (
      channel.state.phase !== 'ready' &&
      failure &&
      (failure.kind === 'protocol' || failure.kind === 'bad_challenge')
    ) {
      faults.add(channel.index, failure.kind, failure.message);
    }
  }
  const refuse = (reason: Exclude<AcquireRefusalReason, 'busy'>, message: string): AcquireRefusal => ({
    ok: false,
    reason,
    message,
    faults: faults.list(),
  });

  // The highest epoch each replica reported during this call. A liar's entry is outvoted by the (f+1)-th rule.
  const known = new Map<number, bigint>();
  const report = (replica: number, epoch: bigint) => {
    const previous = known.get(replica);
    if (previous === undefined || epoch > previous) known.set(replica, epoch);
  };
  // After we release partial grants at an epoch, we never ask for that epoch again: a released record should not be revived.
  let floor = 1n;
  const remembered = ctx.epochHints.get(request.resource);
  let hint = remembered?.epoch;
  let retries = 0;
  let lastEpoch = 0n;
  let retryAtOnce = false;
  // Leader-first mode; `retried` is what we remember for next time, so a resource that calms down goes back to full fan-out.
  let contended = remembered?.contended ?? false;
  let retried = false;
  const leader = leaderOf(request.resource, cluster.n);
  let lastFullAttemptAt = start;
  // Set once the leader kept us in its line for the whole wait without our turn coming (a long line, or a leader
  // that serves nobody): the rest of this call polls instead, with the (f+1)-th rules of full attempts.
  let turnMissed = false;
  // Turns the leader granted us that were lost all the same (the others' answers split the vote): the first is
  // retried in the line, a second counts as a missed turn, so a leader that grants turns the others refuse costs
  // at most two turn waits per call.
  let turnsLost = 0;
  // Blockers whose claim an attempt has gone above in this call, and the epoch the next attempt goes to for one
  // (escalationEpoch in catch-up.ts): the (f+1)-th rule alone would never pass a lone replica ahead of the rest.
  const escalationTried = new Set<number>();
  let escalateTo: bigint | undefined;
  const leaderReady = () => ctx.channels.channels[leader - 1]?.state.phase === 'ready';

  for (;;) {
    if (request.signal?.aborted) return refuse('aborted', 'the caller aborted the acquire');
    if (clock.now() >= deadline) return refuse('timeout', `no grant within ${request.timeoutMs} ms`);

    let epoch: bigint;
    if (known.size >= 2 * f + 1) {
      epoch = maxEpoch(chooseEpoch([...known.values()], f), floor);
    } else if (hint !== undefined) {
      epoch = maxEpoch(hint + 1n, floor);
      hint = undefined;
    } else {
      // Nothing known: propose directly. Stale answers carry each replica's epoch, and the retry uses them.
      epoch = floor;
    }
    const leaderFirst = contended && clock.now() - lastFullAttemptAt < LEADER_FIRST_WINDOW_MS && leaderReady();
    const waitTurnMs =
      leaderFirst && !turnMissed ? turnWaitMs(clock.now(), waitUntil, deadline, options.requestTimeoutMs) : 0;
    // Leader-first, the leader's own record decides, so follow it even when the (f+1)-th rule lags behind it:
    // a leader ahead of the quorum (partial grants it gave) would otherwise refuse every attempt as stale.
    const leaderEpoch = known.get(leader);
    if (leaderFirst && leaderEpoch !== undefined && leaderEpoch + 1n > epoch && leaderEpoch < MAX_EPOCH)
      epoch = leaderEpoch + 1n;
    if (escalateTo !== undefined && escalateTo > epoch && escalateTo <= MAX_EPOCH) epoch = escalateTo;
    escalateTo = undefined;
    if (retryAtOnce && epoch <= lastEpoch) {
      // The answers did not move the epoch (liars, or a lagging quorum): back off as for a split vote.
      if (!(await pauseBeforeRetry())) return refuse('aborted', 'the caller aborted the acquire');
      continue;
    }
    retryAtOnce = false;
    lastEpoch = epoch;

    if (!leaderFirst) lastFullAttemptAt = clock.now();
    const guessed = known.size < 2 * f + 1;
    const attempt = await attemptEpoch(ctx, {
      request,
      epoch,
      deadline,
      report,
      faults,
      leader: leaderFirst ? leader : undefined,
      waitTurnMs,
      learnEpochs: guessed,
      onReleased: (released) => {
        if (released >= floor) floor = released + 1n;
      },
    });
    // Kept in the leader's line without our turn coming (busy when the wait ended, or no answer at all).
    if (waitTurnMs > 0 && attempt.kind === 'busy') turnMissed = true;
    if (waitTurnMs > 0 && attempt.kind === 'contended' && (!attempt.turnCame || ++turnsLost > 1)) turnMissed = true;
    // A guess that came back stale is how an unknown resource is learnt, not a sign of contention.
    if (attempt.kind !== 'granted' && !(attempt.kind === 'outdated' && guessed)) contended = retried = true;
    switch (attempt.kind) {
      case 'granted':
        // A grant that waited its turn in the leader's line is contention too: the next call goes to the line first
        // rather than racing the line's next turn at the other replicas with a full attempt.
        ctx.epochHints.set(request.resource, {
          epoch: attempt.grant.token.grant.epoch,
          contended: retried || attempt.waited,
        });
        return { ok: true, grant: attempt.grant, faults: faults.list() };
      case 'stop':
        return refuse(attempt.reason, attempt.message);
      case 'busy': {
        // f+1 replicas say it is held: take a place in the leader's line now rather than poll for the release.
        if (!attempt.leaderOnly && !turnMissed && leaderReady() && clock.now() < waitUntil) continue;
        const waited = await waitWhileBusy(ctx, request, attempt, waitUntil, deadline);
        if (waited !== 'retry')
          return waited === 'aborted'
            ? refuse('aborted', 'the caller aborted the acquire')
            : busyRefusal(attempt, faults);
        retries = 0;
        continue;
      }
      case 'outdated':
        retryAtOnce = true;
        continue;
      case 'contended': {
        escalateTo = escalationEpoch(attempt.blockers, escalationTried);
        if (!(await pauseBeforeRetry())) return refuse('aborted', 'the caller aborted the acquire');
        continue;
      }
    }
  }

  /** Jittered exponential backoff before the next attempt; false when aborted. */
  function pauseBeforeRetry(): Promise<boolean> {
    retryAtOnce = false;
    const pause = backoffDelay(retries++, { baseMs: options.retryBaseMs, maxMs: options.retryMaxMs }, options.random());
    return delay(Math.min(pause, Math.max(0, deadline - clock.now())), request.signal, clock);
  }
}

/** The longest a leader may keep one attempt in its line (then the client falls back to polling). */
const MAX_TURN_WAIT_MS = 5_000;

/**
 * How long the leader may keep this attempt in its line: within the caller's wait, and leaving time (up to a
 * request timeout, at most half of what remains) to gather the others' partials once our turn comes.
 */
function turnWaitMs(now: number, waitUntil: number, deadline: number, requestTimeoutMs: number): number {
  const left = deadline - now;
  return Math.floor(
    Math.max(0, Math.min(waitUntil - now, left - Math.min(left / 2, requestTimeoutMs), MAX_TURN_WAIT_MS)),
  );
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
