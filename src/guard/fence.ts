/**
 * The fence itself (S4): a pure function from the current barrier and a
 * verified token to a decision. No I/O, no clock (S6): the store adapters call
 * it inside their transaction and persist what it returns.
 *
 *   epoch < barrier                    → stale
 *   epoch = barrier, same token        → accept (the holder writes again)
 *   epoch = barrier, different token   → conflict: by S1 two tokens for one
 *                                         (resource, epoch) need more than f
 *                                         faulty replicas; refuse, keep both
 *   epoch > barrier                    → accept and raise the barrier
 */
import { bytesEqual } from '../common/bytes.js';
import { admitCounter, openReplayWindow, type ReplayWindow } from './proof.js';

/** What a store keeps per resource. */
export interface Barrier {
  readonly epoch: bigint;
  /** SHA-256 of the token that set the barrier. */
  readonly tokenDigest: Uint8Array;
  /** That token's bytes: the evidence to show if a conflicting token ever appears. */
  readonly token: Uint8Array;
  /** Proof-of-possession counters seen for that token; null until a signed request came. */
  readonly replay: ReplayWindow | null;
}

/** The parts of a verified token the fence looks at. */
export interface FencedToken {
  readonly epoch: bigint;
  readonly digest: Uint8Array;
  readonly bytes: Uint8Array;
}

export type FenceDecision =
  | { readonly ok: true; readonly raised: boolean; readonly barrier: Barrier }
  | { readonly ok: false; readonly reason: 'stale'; readonly barrier: bigint }
  | { readonly ok: false; readonly reason: 'conflict'; readonly barrier: bigint; readonly barrierToken: Uint8Array }
  | { readonly ok: false; readonly reason: 'replayed'; readonly barrier: bigint };

/**
 * Decides one attempt against the barrier.
 * @param counter the request's proof-of-possession counter, when it carries a (verified) proof
 * @returns the barrier to store on acceptance (unchanged object when nothing changed)
 */
export function decideFence(current: Barrier | undefined, token: FencedToken, counter?: bigint): FenceDecision {
  if (current === undefined || token.epoch > current.epoch) {
    return {
      ok: true,
      raised: true,
      barrier: {
        epoch: token.epoch,
        tokenDigest: token.digest,
        token: token.bytes,
        replay: counter === undefined ? null : openReplayWindow(counter),
      },
    };
  }
  if (token.epoch < current.epoch) return { ok: false, reason: 'stale', barrier: current.epoch };
  if (!bytesEqual(token.digest, current.tokenDigest)) {
    return { ok: false, reason: 'conflict', barrier: current.epoch, barrierToken: current.token };
  }
  if (counter === undefined) return { ok: true, raised: false, barrier: current };
  if (current.replay === null)
    return { ok: true, raised: false, barrier: { ...current, replay: openReplayWindow(counter) } };
  const admitted = admitCounter(current.replay, counter);
  if (!admitted.ok) return { ok: false, reason: 'replayed', barrier: current.epoch };
  return { ok: true, raised: false, barrier: { ...current, replay: admitted.window } };
}
