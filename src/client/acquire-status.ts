/**
 * The acquire's status round (the epoch to propose when nothing is known yet) and its wait while the resource
 * is held by someone else, plus the refusals and messages the attempt shares with it.
 */
import type { AcquireRequest } from './acquire.js';
import { fPlusOneLargest, quorumRemainingMs } from './epoch-choice.js';
import type { CallFaults, QuorumContext } from './quorum-context.js';
import { collectReplies, QuorumTally } from './quorum-tally.js';
import { Round } from './round.js';

/** Extra wait beyond the quorum's remaining time, so that we arrive just after the lease ends, not just before. */
const BUSY_SLACK_MS = 1;

/**
 * Sleeps toward the end of a busy lease, in poll-sized steps.
 * @returns 'retry' to try again, 'expired' when the wait time is used up, 'aborted'.
 */
export async function waitWhileBusy(
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

export type StatusForEpoch =
  | { readonly kind: 'known' }
  | { readonly kind: 'slow' }
  | { readonly kind: 'busy'; readonly epoch: bigint; readonly remainingMs: number }
  | {
      readonly kind: 'stop';
      readonly reason: 'timeout' | 'unavailable' | 'aborted' | 'forbidden' | 'invalid';
      readonly message: string;
    };

/** A status round: at least 2f+1 epochs for the (f+1)-th rule, and whether f+1 replicas see a lease running. */
export async function statusForEpoch(
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
    ended = await collectReplies(
      round,
      faults,
      () => tally.open(round.possible),
      (replica, outcome) => {
        if (outcome.status === 'ok') {
          tally.accept();
          report(replica, outcome.epoch);
          if (outcome.leased) leased.push({ epoch: outcome.epoch, remainingMs: outcome.remainingMs });
        } else tally.refuse(outcome.status, outcome.status === 'invalid' ? outcome.message : '');
      },
    );
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
export function confirmedRefusal(
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

export function unavailableMessage(ctx: QuorumContext, answered: number, need: number): string {
  const down = ctx.channels.channels.filter((c) => c.state.phase !== 'ready').map((c) => c.index);
  return (
    `only ${answered} replicas answered and ${need} are needed` +
    (down.length ? `; not connected: replica ${down.join(', ')}` : '')
  );
}
