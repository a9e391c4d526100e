/**
 * How the service treats an acquire around the rules' decision (service.ts): whether it waits in its resource's line
 * when busy, the epoch a nextEpoch acquire is decided at, and the epoch floor its answer names. Pure functions of the
 * request and the answer, apart from the service's I/O and critical sections.
 */
import type { AcquireRequest, Outcome, Request } from '../protocol/messages.js';

/** Whether `request` waits in its resource's line when the decision is `busy` (the rule #handle and #handleOnce share). */
export function waitsWhenBusy(request: Request): request is AcquireRequest {
  return request.type === 'acquire' && (request.waitMs ?? 0) > 0;
}

/** A nextEpoch acquire's epoch: the resource's next epoch, or the one it asked for if that is higher. */
export function nextEpochOf(
  request: AcquireRequest,
  current: { readonly epoch: bigint } | undefined,
  floor: bigint,
): AcquireRequest {
  const next = (current?.epoch ?? floor) + 1n;
  return next > request.epoch ? { ...request, epoch: next } : request;
}

/**
 * An acquire's answer names the replica's epoch floor, when above 0 (docs/protocol.md, "Epoch choice"): a client
 * proposes the first acquire of a resource above its first signers' floors, and learns them here as compaction
 * raises them, as well as from the welcome.
 */
export function withFloor(outcome: Outcome, floor: bigint): Outcome {
  if (floor <= 0n) return outcome;
  switch (outcome.status) {
    case 'granted':
    case 'stale':
    case 'busy':
    case 'too_far':
      return { ...outcome, floor };
    default:
      return outcome;
  }
}
