/**
 * Catching a lagging replica up within one attempt (docs/protocol.md, "Epoch steps"). A replica answers `too_far`
 * when the attempt's epoch is more than its free step above its record; it grants that epoch once the request carries
 * evidence that other replicas granted it already: partials from f+1 of them at any distance, from fewer within
 * maxEpochStep. When even that is too far (fewer than f+1 partials and a lag above maxEpochStep), the replica is
 * brought up in steps of maxEpochStep: each step is a grant to this same holder at an epoch below the attempt's,
 * which the same evidence covers, and which the final grant supersedes. Pure.
 */
import type { GrantEvidence } from '../protocol/messages.js';

/** A partial this attempt received: the replica's grant of the attempt's resource to this holder at `epoch`. */
export type HeldPartial = GrantEvidence;

/** What to ask a lagging replica next: the attempt's epoch (the last step) or a step below it, with evidence. */
export interface CatchUpStep {
  readonly epoch: bigint;
  readonly evidence: readonly GrantEvidence[];
}

/**
 * The next request that can bring `replica` (its record, or floor, at `current`) to grant `epoch`, or undefined when
 * the partials held so far are no evidence for it (none from another replica at `epoch` or above).
 * @param maxEpochStep how far replicas go on evidence from fewer than f+1 others (DEFAULT_MAX_EPOCH_STEP).
 */
export function catchUpStep(
  replica: number,
  current: bigint,
  epoch: bigint,
  held: readonly HeldPartial[],
  f: number,
  maxEpochStep: bigint,
): CatchUpStep | undefined {
  const seen = new Set<number>();
  const evidence: GrantEvidence[] = [];
  for (const partial of held) {
    if (partial.replica === replica || partial.epoch < epoch || seen.has(partial.replica)) continue;
    seen.add(partial.replica);
    evidence.push(partial);
    // f+1 is all any replica needs: sending more only costs it pairings.
    if (evidence.length > f) break;
  }
  if (evidence.length === 0) return undefined;
  if (evidence.length > f || epoch - current <= maxEpochStep) return { epoch, evidence };
  return { epoch: current + maxEpochStep, evidence };
}

/**
 * The epoch to try after an attempt that got grants but fell short because replicas said `stale` at or above its
 * epoch (their records are ahead: a contender got there first, or a client pushed them ahead alone). The (f+1)-th rule
 * ignores a lone replica ahead of the others, which the quorum may need when f replicas are down; so the next attempt
 * goes just above one blocker's claim: the lowest claim of a blocker not tried yet in this call (`tried` is updated),
 * starting over once every blocker was tried. A lying blocker can cost one attempt this way before an honest one's
 * claim is tried, and an honest blocker's claim comes round again until the catch-up steps have reached it.
 */
export function escalationEpoch(
  blockers: readonly { readonly replica: number; readonly epoch: bigint }[],
  tried: Set<number>,
): bigint | undefined {
  const lowest = (skipTried: boolean) => {
    let pick: { readonly replica: number; readonly epoch: bigint } | undefined;
    for (const blocker of blockers)
      if (!(skipTried && tried.has(blocker.replica)) && (!pick || blocker.epoch < pick.epoch)) pick = blocker;
    return pick;
  };
  let pick = lowest(true);
  if (!pick) {
    tried.clear();
    pick = lowest(false);
  }
  if (!pick) return undefined;
  tried.add(pick.replica);
  return pick.epoch + 1n;
}
