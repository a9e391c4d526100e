/**
 * Getting an admission token from a quorum (DESIGN.md, Client rules).
 *
 * Each attempt picks an epoch, asks every connected replica to sign
 * (resource, epoch, holder), and combines the first t partials that verify.
 * The epoch comes from what replicas reported (the (f+1)-th largest, plus
 * one), from a status round when nothing is known yet, or from the epoch
 * this client was last granted. Failed attempts are classified:
 *
 * - busy (f+1 replicas hold someone else's lease): wait, within the caller's
 *   wait time, for the time at least one honest replica says remains, polling
 *   because replicas do not announce releases;
 * - outdated (no grants, only stale or too_far answers): the epoch moved on
 *   while we were not looking; retry at once with what the answers reported;
 * - contended (split votes): retry after jittered exponential backoff,
 *   releasing whatever partial grants we got so the other contender is not
 *   blocked by our half-won lease;
 * - forbidden / invalid (f+1 say so, so at least one honest replica): stop;
 * - unavailable (fewer than t replicas could answer): stop at once.
 *
 * Under contention (any retry, or a resource whose last acquire needed
 * retries) an attempt goes leader-first: it asks one replica chosen by the
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
import { encodeToken, type AdmissionToken } from '../token/admission-token.js';
import { grantMessage, type Grant } from '../token/grant.js';
import { backoffDelay } from './backoff.js';
import { delay } from './delay.js';
import { chooseEpoch, fPlusOneLargest, quorumRemainingMs } from './epoch-choice.js';
import type { ReplicaFault } from './evidence.js';
import { PartialCollector } from './partial-collector.js';
import { CallFaults, type QuorumContext } from './quorum-context.js';
import { QuorumTally } from './quorum-tally.js';
import { Round } from './round.js';

export interface AcquireRequest {
  readonly resource: string;
  readonly ttlMs: number;
  /** How long to keep waiting while the resource is held by someone else. */
  readonly waitMs: number;
  /** The whole call ends by then (ms from the start), whatever happens. */
  readonly timeoutMs: number;
  readonly signal?: AbortSignal | undefined;
}

export interface AcquiredGrant {
  readonly token: AdmissionToken;
  /** Client clock reading taken before the first acquire request for this epoch left. */
  readonly sentAt: number;
  readonly ttlMs: number;
  /** Replicas whose partials made the token. */
  readonly signers: readonly number[];
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

type Attempt =
  | { readonly kind: 'granted'; readonly grant: AcquiredGrant }
  /** `leaderOnly`: only the leader answered (leader-first), so f+1 replicas have not confirmed it. */
  | { readonly kind: 'busy'; readonly epoch: bigint; readonly remainingMs: number; readonly leaderOnly: boolean }
  | { readonly kind: 'contended'; readonly message: string }
  | { readonly kind: 'outdated'; readonly leaderOnly: boolean }
  | { readonly kind: 'stop'; readonly reason: Exclude<AcquireRefusalReason, 'busy'>; readonly message: string };

/**
 * Leader-first attempts are made for at most this long after the last attempt that asked every replica: so a
 * leader that refuses everyone, or reports a made-up epoch, costs a client at most this much before the
 * (f+1)-th rules of a full attempt decide again. Short enough to be a small delay, long enough that a waiter's
 * polls mostly go to the leader alone.
 */
const LEADER_FIRST_WINDOW_MS = 250;

/** Once 2f+1 replicas answered without a token, the rest get this many times the time those took (and at least stragglerMinMs). */
const STRAGGLER_FACTOR = 3;

/** Extra wait beyond the quorum's remaining time, so that we arrive just after the lease ends, not just before. */
const BUSY_SLACK_MS = 1;

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
      const status = await statusForEpoch(ctx, request, deadline, report, faults);
      if (status.kind === 'stop') return refuse(status.reason, status.message);
      if (status.kind === 'slow') continue;
      if (status.kind === 'busy') {
        const waited = await waitWhileBusy(ctx, request, status, waitUntil, deadline);
        if (waited !== 'retry')
          return waited === 'aborted'
            ? refuse('aborted', 'the caller aborted the acquire')
            : busyRefusal(status, faults);
        continue;
      }
      epoch = maxEpoch(chooseEpoch([...known.values()], f), floor);
    }
    const leaderFirst =
      contended &&
      clock.now() - lastFullAttemptAt < LEADER_FIRST_WINDOW_MS &&
      ctx.channels.channels[leader - 1]?.state.phase === 'ready';
    // Leader-first, the leader's own record decides, so follow it even when the (f+1)-th rule lags behind it:
    // a leader ahead of the quorum (partial grants it gave) would otherwise refuse every attempt as stale.
    const leaderEpoch = known.get(leader);
    if (leaderFirst && leaderEpoch !== undefined && leaderEpoch + 1n > epoch && leaderEpoch < MAX_EPOCH)
      epoch = leaderEpoch + 1n;
    if (retryAtOnce && epoch <= lastEpoch) {
      // The answers did not move the epoch (liars, or a lagging quorum): back off as for a split vote.
      if (!(await pauseBeforeRetry())) return refuse('aborted', 'the caller aborted the acquire');
      continue;
    }
    retryAtOnce = false;
    lastEpoch = epoch;

    if (!leaderFirst) lastFullAttemptAt = clock.now();
    const attempt = await attemptEpoch(
      ctx,
      request,
      epoch,
      deadline,
      report,
      faults,
      leaderFirst ? leader : undefined,
      (released) => {
        if (released >= floor) floor = released + 1n;
      },
    );
    if (attempt.kind !== 'granted') contended = retried = true;
    switch (attempt.kind) {
      case 'granted':
        ctx.epochHints.set(request.resource, { epoch, contended: retried });
        return { ok: true, grant: attempt.grant, faults: faults.list() };
      case 'stop':
        return refuse(attempt.reason, attempt.message);
      case 'busy': {
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

/** The replica contended attempts ask first: spread over replicas by resource name (FNV-1a of the UTF-16 units). */
export function leaderOf(resource: string, n: number): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < resource.length; i++) hash = Math.imul(hash ^ resource.charCodeAt(i), 0x01000193) >>> 0;
  return (hash % n) + 1;
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
 * Sleeps toward the end of a busy lease, in poll-sized steps.
 * @returns 'retry' to try again, 'expired' when the wait time is used up, 'aborted'.
 */
async function waitWhileBusy(
  ctx: QuorumContext,
  request: AcquireRequest,
  busy: { remainingMs: number },
  waitUntil: number,
  deadline: number,
): Promise<'retry' | 'expired' | 'aborted'> {
  const { clock, busyPollMs, random } = ctx.options;
  const now = clock.now();
  const limit = Math.min(waitUntil, deadline);
  if (now >= limit) return 'expired';
  // Jitter spreads the waiters' polls, so the first to see the release is not always the same one.
  const poll = busyPollMs * (0.5 + random());
  const pause = Math.min(busy.remainingMs + BUSY_SLACK_MS, poll, limit - now);
  // A replica's release notice ends the wait early; the poll still bounds it, since a notice may never come.
  return new Promise((resolve) => {
    const signal = request.signal;
    const finish = (result: 'retry' | 'aborted') => {
      clock.clearTimeout(timer);
      stopListening();
      signal?.removeEventListener('abort', onAbort);
      resolve(result);
    };
    const onAbort = () => finish('aborted');
    const timer = clock.setTimeout(() => finish('retry'), Math.max(0, pause));
    const stopListening = ctx.onReleased(request.resource, () => finish('retry'));
    if (signal?.aborted) finish('aborted');
    else signal?.addEventListener('abort', onAbort, { once: true });
  });
}

type StatusForEpoch =
  | { readonly kind: 'known' }
  | { readonly kind: 'slow' }
  | { readonly kind: 'busy'; readonly epoch: bigint; readonly remainingMs: number }
  | {
      readonly kind: 'stop';
      readonly reason: 'timeout' | 'unavailable' | 'aborted' | 'forbidden' | 'invalid';
      readonly message: string;
    };

/** A status round: at least 2f+1 epochs for the (f+1)-th rule, and whether f+1 replicas see a lease running. */
async function statusForEpoch(
  ctx: QuorumContext,
  request: AcquireRequest,
  deadline: number,
  report: (replica: number, epoch: bigint) => void,
  faults: CallFaults,
): Promise<StatusForEpoch> {
  const { f } = ctx.cluster;
  const need = 2 * f + 1;
  const roundDeadline = Math.min(deadline, ctx.options.clock.now() + ctx.options.requestTimeoutMs);
  const round = new Round<'status'>(ctx.channels, () => ({ type: 'status', resource: request.resource }), {
    clock: ctx.options.clock,
    deadline: roundDeadline,
    signal: request.signal,
  });
  const leased: { epoch: bigint; remainingMs: number }[] = [];
  const tally = new QuorumTally<'forbidden' | 'invalid'>(f, need);
  let ended: 'exhausted' | 'deadline' | 'aborted' | undefined;
  try {
    while (tally.open(round.possible)) {
      const event = await round.next();
      if (event.type === 'end') {
        ended = event.why;
        break;
      }
      if (event.type !== 'answer') continue;
      const { answer, replica } = event;
      faults.fromAnswer(replica, answer);
      if (answer.kind !== 'reply') continue;
      const outcome = answer.outcome;
      if (outcome.status === 'ok') {
        tally.accept();
        report(replica, outcome.epoch);
        if (outcome.leased) leased.push({ epoch: outcome.epoch, remainingMs: outcome.remainingMs });
      } else tally.refuse(outcome.status, outcome.status === 'invalid' ? outcome.message : '');
    }
  } finally {
    round.close();
  }
  if (ended === 'aborted') return { kind: 'stop', reason: 'aborted', message: 'the caller aborted the acquire' };
  const refused = confirmedRefusal(tally, request.resource);
  if (refused) return refused;
  const answered = tally.accepted;
  if (answered < need) {
    if (ended !== 'deadline')
      return { kind: 'stop', reason: 'unavailable', message: unavailableMessage(ctx, answered, need) };
    // Connected replicas that are slow: ask again while the caller's deadline allows.
    return roundDeadline >= deadline
      ? {
          kind: 'stop',
          reason: 'timeout',
          message: `only ${answered} of the ${need} status answers needed arrived within ${request.timeoutMs} ms`,
        }
      : { kind: 'slow' };
  }
  if (leased.length > f) {
    const remainingMs = quorumRemainingMs(
      leased.map((l) => l.remainingMs),
      f,
    )!;
    return {
      kind: 'busy',
      epoch: fPlusOneLargest(
        leased.map((l) => l.epoch),
        f,
      )!,
      remainingMs,
    };
  }
  return { kind: 'known' };
}

/** A refusal f+1 replicas agree on ends the acquire: at least one honest replica refuses it. */
function confirmedRefusal(
  tally: QuorumTally<'forbidden' | 'invalid'>,
  resource: string,
): { kind: 'stop'; reason: 'forbidden' | 'invalid'; message: string } | undefined {
  const refused = tally.confirmed('forbidden', 'invalid');
  if (refused?.kind === 'forbidden')
    return {
      kind: 'stop',
      reason: 'forbidden',
      message: `${refused.count} replicas refuse this identity access to "${resource}"`,
    };
  if (refused?.kind === 'invalid')
    return { kind: 'stop', reason: 'invalid', message: `replicas refused the request: ${refused.first}` };
  return undefined;
}

function unavailableMessage(ctx: QuorumContext, answered: number, need: number): string {
  const down = ctx.channels.channels.filter((c) => c.state.phase !== 'ready').map((c) => c.index);
  return (
    `only ${answered} replicas answered and ${need} are needed` +
    (down.length ? `; not connected: replica ${down.join(', ')}` : '')
  );
}

/** One acquire round at `epoch`. */
async function attemptEpoch(
  ctx: QuorumContext,
  request: AcquireRequest,
  epoch: bigint,
  deadline: number,
  report: (replica: number, epoch: bigint) => void,
  faults: CallFaults,
  leader: number | undefined,
  onReleased: (epoch: bigint) => void,
): Promise<Attempt> {
  const { cluster, options, identity } = ctx;
  const { f, t } = cluster;
  const { clock } = options;
  const grant: Grant = { clusterId: cluster.id, resource: request.resource, epoch, holder: identity.publicKey };
  const message = grantMessage(grant);
  const collector = new PartialCollector(cluster, ctx.backend, grant, message, ctx.evidence);
  // Taken before the first request leaves, so the holder's lease view starts before any replica's (DESIGN.md).
  const sentAt = clock.now();
  const roundDeadline = Math.min(deadline, sentAt + options.requestTimeoutMs);
  const round = new Round<'acquire'>(
    ctx.channels,
    () => ({ type: 'acquire', resource: request.resource, epoch, ttlMs: request.ttlMs }),
    {
      clock,
      deadline: roundDeadline,
      signal: request.signal,
      first: leader,
    },
  );
  // A leader that is slow to answer does not hold the attempt up for long: then everyone is asked.
  const leaderTimer = leader === undefined ? undefined : clock.setTimeout(() => round.widen(), options.stragglerMinMs);
  let leaderRefusal: Attempt | undefined;
  const voted = new Set<number>();
  const granted = new Set<number>();
  const busy: number[] = [];
  const busyEpochs: bigint[] = [];
  // Only the refusals that end the call; grants, busy and outdated answers have rules of their own below.
  const refusals = new QuorumTally<'forbidden' | 'invalid'>(f, t);
  let outdated = 0;
  let straggling = false;
  let ended: 'exhausted' | 'deadline' | 'aborted' | undefined;
  // Replicas that answered or still could when the round stopped: below t, no epoch could have won.
  let reachable: number;
  let signature: ReturnType<PartialCollector['tryCombine']> | undefined;

  try {
    while (collector.count + round.possible >= t) {
      const event = await round.next();
      if (event.type === 'end') {
        ended = event.why;
        break;
      }
      if (event.type !== 'answer') continue;
      const { replica, answer } = event;
      faults.fromAnswer(replica, answer);
      if (answer.kind !== 'reply') {
        if (replica === leader) round.widen();
        continue;
      }
      voted.add(replica);
      const outcome = answer.outcome;
      switch (outcome.status) {
        case 'granted': {
          granted.add(replica);
          report(replica, epoch);
          const added = collector.add(replica, outcome.partial);
          if (!added.ok) {
            if (added.reason !== 'duplicate')
              faults.add(
                replica,
                added.reason === 'undecodable' ? 'undecodable_partial' : 'invalid_partial',
                added.message,
              );
            break;
          }
          if (collector.count >= t) {
            signature = collector.tryCombine();
            if (!signature.ok)
              for (const bad of signature.bad)
                faults.add(bad, 'invalid_partial', `partial from replica ${bad} does not verify under its key share`);
          }
          break;
        }
        case 'stale':
        case 'too_far':
          report(replica, outcome.epoch);
          outdated++;
          break;
        case 'busy':
          report(replica, outcome.epoch);
          busy.push(outcome.remainingMs);
          busyEpochs.push(outcome.epoch);
          break;
        case 'forbidden':
          refusals.refuse('forbidden');
          break;
        case 'invalid':
          refusals.refuse('invalid', outcome.message);
          break;
      }
      if (signature?.ok) break;
      if (round.narrow && replica === leader) {
        // Leader-first: a grant opens the attempt to everyone; a refusal that only says "not now" ends it here.
        if (outcome.status === 'busy') {
          leaderRefusal = { kind: 'busy', epoch: outcome.epoch, remainingMs: outcome.remainingMs, leaderOnly: true };
          break;
        }
        if (outcome.status === 'stale' || outcome.status === 'too_far') {
          leaderRefusal = { kind: 'outdated', leaderOnly: true };
          break;
        }
        round.widen();
      }
      if (refusals.confirmed('forbidden', 'invalid') || busy.length > f) break;
      if (!straggling && voted.size >= 2 * f + 1) {
        // Enough answers to choose the next epoch. A slow or silent replica may still hold the deciding vote, but
        // waiting out the full request timeout for it would let one silent replica stall every contended acquire.
        straggling = true;
        const elapsed = clock.now() - sentAt;
        round.shortenDeadline(clock.now() + Math.max(options.stragglerMinMs, elapsed * STRAGGLER_FACTOR));
      }
    }
  } finally {
    clock.clearTimeout(leaderTimer);
    reachable = voted.size + round.possible;
    round.close();
  }
  if (leaderRefusal) return leaderRefusal;

  if (signature?.ok) {
    return {
      kind: 'granted',
      grant: {
        token: encodeToken(grant, signature.signature),
        sentAt,
        ttlMs: request.ttlMs,
        signers: signature.signers,
      },
    };
  }

  // No token: hand back what we half-won so that another contender is not kept out by it until the ttl runs out.
  if (granted.size > 0) {
    onReleased(epoch);
    releasePartialGrants(ctx, request.resource, epoch, (replica) => granted.has(replica) || !voted.has(replica));
  }

  if (ended === 'aborted') return { kind: 'stop', reason: 'aborted', message: 'the caller aborted the acquire' };
  const refused = confirmedRefusal(refusals, request.resource);
  if (refused) return refused;
  if (busy.length > f)
    return {
      kind: 'busy',
      epoch: fPlusOneLargest(busyEpochs, f)!,
      remainingMs: quorumRemainingMs(busy, f)!,
      leaderOnly: false,
    };
  if (granted.size === 0 && outdated > 0 && busy.length === 0) return { kind: 'outdated', leaderOnly: false };
  if (reachable >= t || straggling) return { kind: 'contended', message: `split vote at epoch ${epoch}` };
  if (ended === 'deadline') {
    // Replicas that are connected but slow: worth another try while the caller's deadline allows.
    return roundDeadline >= deadline
      ? { kind: 'stop', reason: 'timeout', message: `no grant within ${request.timeoutMs} ms` }
      : { kind: 'contended', message: `too few answers at epoch ${epoch} within ${options.requestTimeoutMs} ms` };
  }
  return { kind: 'stop', reason: 'unavailable', message: unavailableMessage(ctx, reachable, t) };
}

/** Fire and forget: a release that is lost only delays the other contender until our partial lease ends. */
function releasePartialGrants(
  ctx: QuorumContext,
  resource: string,
  epoch: bigint,
  include: (replica: number) => boolean,
): void {
  for (const channel of ctx.channels.channels) {
    if (!include(channel.index) || channel.state.phase !== 'ready') continue;
    void channel.request<'release'>({ type: 'release', resource, epoch }, ctx.options.requestTimeoutMs);
  }
}
