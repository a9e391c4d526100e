/**
 * The requests the client's cores send, each built in one place: every acquire body comes from `acquireBody`
 * (a flag the protocol adds to acquires is added here once).
 */
import type { GrantEvidence } from '../../protocol/messages.js';
import type { RequestBody } from '../replica-channel.js';

/** What an acquire body is built from (the call's request). */
export interface AcquireFields {
  readonly resource: string;
  readonly ttlMs: number;
  /** Crash recovery: end this identity's lease held under another session (docs/protocol.md, "Sessions"). */
  readonly resume?: boolean | undefined;
}

/**
 * An acquire request; with `waitTurnMs`, one that may wait its turn (and, at the leader, take the next epoch);
 * with `evidence`, a catch-up request (docs/protocol.md, "Epoch steps").
 */
export function acquireBody(
  request: AcquireFields,
  epoch: bigint,
  waitTurnMs: number,
  atLeader: boolean,
  evidence?: readonly GrantEvidence[],
): RequestBody<'acquire'> {
  const body = {
    type: 'acquire',
    resource: request.resource,
    epoch,
    ttlMs: request.ttlMs,
    ...(request.resume ? { resume: true } : {}),
  } as const;
  if (evidence) return { ...body, evidence };
  if (waitTurnMs <= 0) return body;
  return atLeader ? { ...body, waitMs: waitTurnMs, nextEpoch: true } : { ...body, waitMs: waitTurnMs };
}

export function releaseBody(resource: string, epoch: bigint): RequestBody<'release'> {
  return { type: 'release', resource, epoch };
}

/** A renew; with `evidence`, one a replica that does not hold the lease may join it by (docs/protocol.md). */
export function renewBody(
  resource: string,
  epoch: bigint,
  ttlMs: number,
  evidence?: readonly GrantEvidence[],
): RequestBody<'renew'> {
  const body = { type: 'renew', resource, epoch, ttlMs } as const;
  return evidence && evidence.length > 0 ? { ...body, evidence } : body;
}
