/**
 * What `onLeaseDecision` (ReplicaServiceOptions) hears of every decision that starts, extends or ends a lease, and how
 * a decision becomes that note. Apart from service.ts because only the simulator listens (src/simulation checks from
 * these notes, independently of the rules, that leases exclude each other); production passes no listener.
 */
import type { Request } from '../protocol/messages.js';
import type { Caller, Decision, SignedRecord } from './policy.js';

/** A decision that changed a lease, as `onLeaseDecision` hears it. */
export interface LeaseDecisionNote {
  readonly resource: string;
  readonly action: 'grant' | 'resend' | 'join' | 'renew' | 'release';
  /** The grant the request names (a nextEpoch acquire's at the epoch it was decided at). */
  readonly epoch: bigint;
  readonly holder: Uint8Array;
  readonly session: string;
  /** The request asked to end the same holder's lease under another session (`resume`). */
  readonly resume: boolean;
  /** When it was decided, and when the lease now ends (0: released), on the replica's monotonic clock. */
  readonly at: number;
  readonly leaseEndsAt: number;
  /** The record's epoch before the decision (the floor without a record), and whether there was a record. */
  readonly recordEpoch: bigint;
  readonly hadRecord: boolean;
  /**
   * Where it stood with the resource's line: `fromLine`, the line's own try of a waiter; `lineWaits`, the line had
   * waiters (or one on its way in) when it was decided. Nobody overtakes a line, so a grant or join decided while
   * the line waits is always the line's own (docs/protocol.md, lines).
   */
  readonly fromLine: boolean;
  readonly lineWaits: boolean;
}

/** What `onLeaseDecision` hears of a decision that changed a lease. */
export function leaseNote(
  d: Exclude<Decision, { action: 'reply' }>,
  request: Request,
  caller: Caller,
  at: number,
  current: SignedRecord | undefined,
  floor: bigint,
  line: { readonly fromLine: boolean; readonly lineWaits: boolean },
): LeaseDecisionNote {
  return {
    resource: request.resource,
    action: d.action,
    epoch: request.type === 'status' ? 0n : request.epoch,
    holder: caller.holder,
    session: caller.session,
    resume: request.type === 'acquire' && request.resume === true,
    at,
    leaseEndsAt: d.action === 'release' ? 0 : d.leaseEndsAt,
    recordEpoch: current?.epoch ?? floor,
    hadRecord: current !== undefined,
    ...line,
  };
}
