/**
 * Each replica's list of running leases (the read-only `leases` request), for the operator console. Nothing
 * here decides anything, and each list is one replica's word: the console believes a lease only when f+1
 * replicas list the same (resource, epoch, holder) (src/console/view.ts).
 */
import { MAX_LEASES_PER_REPLY, type ActiveLease, type LeasesOutcome } from '../protocol/messages.js';
import type { QuorumContext } from './quorum-context.js';
import { askEveryReplica, unansweredView, type UnansweredView } from './status.js';

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
export function replicaLeases(
  ctx: QuorumContext,
  timeoutMs: number,
  limit = MAX_LEASES_PER_REPLY,
  signal?: AbortSignal,
): Promise<ReplicaLeases[]> {
  return askEveryReplica(
    ctx,
    { type: 'leases', limit },
    timeoutMs,
    leasesView,
    (views) =>
      ctx.channels.channels.map((channel) => views.get(channel.index) ?? unansweredView(ctx, channel, timeoutMs)),
    signal,
  );
}

function leasesView(replica: number, endpoint: string, o: LeasesOutcome): ReplicaLeases {
  return o.status === 'leases'
    ? { replica, endpoint, state: 'ok', leases: o.leases, more: o.more }
    : { replica, endpoint, state: 'refused', message: o.status === 'invalid' ? `invalid: ${o.message}` : 'forbidden' };
}
