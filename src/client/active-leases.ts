/**
 * Each replica's list of running leases (the read-only `leases` request), for the operator console. Nothing
 * here decides anything, and each list is one replica's word: the console believes a lease only when f+1
 * replicas list the same (resource, epoch, holder) (src/console/view.ts).
 */
import { MAX_LEASES_PER_REPLY, type ActiveLease } from '../protocol/messages.js';
import type { QuorumContext } from './quorum-context.js';
import { Round } from './round.js';
import { failedAnswerView, unansweredView, type UnansweredView } from './status.js';

export type ReplicaLeases =
  | {
      readonly replica: number;
      readonly endpoint: string;
      readonly state: 'ok';
      readonly leases: readonly ActiveLease[];
      /** The replica left leases out to keep to the limit. */
      readonly more: boolean;
    }
  | UnansweredView;

/** Asks every replica for its running leases (at most `limit` each), waiting up to `timeoutMs`. */
export async function replicaLeases(
  ctx: QuorumContext,
  timeoutMs: number,
  limit = MAX_LEASES_PER_REPLY,
  signal?: AbortSignal,
): Promise<ReplicaLeases[]> {
  const round = new Round<'leases'>(ctx.channels, () => ({ type: 'leases', limit }), {
    clock: ctx.options.clock,
    deadline: ctx.options.clock.now() + timeoutMs,
    signal,
  });
  const views = new Map<number, ReplicaLeases>();
  try {
    for (;;) {
      const event = await round.next();
      if (event.type === 'end') break;
      if (event.type !== 'answer') continue;
      const { replica, answer } = event;
      const endpoint = ctx.cluster.replicas[replica - 1]!.endpoint;
      if (answer.kind === 'reply') {
        const o = answer.outcome;
        views.set(
          replica,
          o.status === 'leases'
            ? { replica, endpoint, state: 'ok', leases: o.leases, more: o.more }
            : {
                replica,
                endpoint,
                state: 'refused',
                message: o.status === 'invalid' ? `invalid: ${o.message}` : 'forbidden',
              },
        );
        continue;
      }
      const failed = failedAnswerView(replica, endpoint, answer, timeoutMs);
      if (failed) views.set(replica, failed);
    }
  } finally {
    round.close();
  }
  return ctx.channels.channels.map((channel) => views.get(channel.index) ?? unansweredView(ctx, channel, timeoutMs));
}
