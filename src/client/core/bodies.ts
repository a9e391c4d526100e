/**
 * The requests the client's cores send, each built in one place: every acquire body comes from `acquireBody`
 * (a flag the protocol adds to acquires is added here once).
 */
import type { GrantEvidence } from '../../protocol/messages.js';
import type { RequestBody } from '../replica-channel.js';
import type { AnyRequestBody } from './io.js';

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

/**
 * The request a round sends each replica, as plain data: `body`, but `special.body` to the replicas in
 * `special.replicas` (an acquire's leader, a renew's known holders).
 */
export interface RoundBodies {
  readonly body: AnyRequestBody;
  readonly special?: { readonly replicas: ReadonlySet<number>; readonly body: AnyRequestBody } | undefined;
}

export function bodyFor(bodies: RoundBodies, replica: number): AnyRequestBody {
  return bodies.special?.replicas.has(replica) === true ? bodies.special.body : bodies.body;
}

/** An acquire attempt's requests: the leader's may take the next epoch when its turn comes (acquireBody). */
export function acquireBodies(
  request: AcquireFields,
  epoch: bigint,
  waitTurnMs: number,
  leader: number | undefined,
): RoundBodies {
  const body = acquireBody(request, epoch, waitTurnMs, false);
  if (leader === undefined) return { body };
  return { body, special: { replicas: new Set([leader]), body: acquireBody(request, epoch, waitTurnMs, true) } };
}

/**
 * A renewal's requests: with the grant's evidence for the replicas not known to hold the lease (they may join it;
 * every replica when nobody knows who holds it), without it for the holders.
 */
export function renewBodies(
  grant: {
    readonly resource: string;
    readonly epoch: bigint;
    readonly holders?: ReadonlySet<number> | undefined;
    readonly evidence?: readonly GrantEvidence[] | undefined;
  },
  ttlMs: number,
): RoundBodies {
  const plain = renewBody(grant.resource, grant.epoch, ttlMs);
  const { evidence, holders } = grant;
  if (evidence === undefined || evidence.length === 0) return { body: plain };
  const joining = renewBody(grant.resource, grant.epoch, ttlMs, evidence);
  return holders === undefined ? { body: joining } : { body: joining, special: { replicas: holders, body: plain } };
}
