/**
 * The acquire's wait while the resource is held by someone else, plus the refusals and messages its attempts
 * share.
 */
import type { AcquireRequest } from './acquire.js';
import type { QuorumContext } from './quorum-context.js';
import type { QuorumTally } from './quorum-tally.js';

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

/**
 * @param frozen replicas that answered REPLICA_FROZEN (frozen for a reshare: they vote no more)
 * @param otherGeneration replicas that granted with another share generation than the cluster description's
 */
export function unavailableMessage(
  ctx: QuorumContext,
  answered: number,
  need: number,
  frozen: readonly number[] = [],
  otherGeneration: readonly number[] = [],
): string {
  const down = ctx.channels.channels.filter((c) => c.state.phase !== 'ready').map((c) => c.index);
  return (
    `only ${answered} replicas answered and ${need} are needed` +
    (down.length ? `; not connected: replica ${down.join(', ')}` : '') +
    (frozen.length ? `; frozen for a reshare: replica ${[...frozen].sort((a, b) => a - b).join(', ')}` : '') +
    (otherGeneration.length
      ? `; on another share generation than this cluster description (${ctx.cluster.membershipVersion}): replica ` +
        `${[...otherGeneration].sort((a, b) => a - b).join(', ')}`
      : '')
  );
}
