/**
 * How a client turns untrusted answers into numbers it acts on. Pure.
 *
 * Up to f of the answers may be lies. Ranking the answers and taking the
 * (f+1)-th from the side a liar would push toward means every value we use is
 * bounded by at least one honest answer: f liars can neither push the epoch
 * above every honest one (so no replica is driven to `too_far` forever) nor
 * below every honest one, and cannot make a waiter sleep longer than an
 * honest replica says the lease runs.
 */
import { QuorumFenceError } from '../common/errors.js';
import { MAX_EPOCH } from '../common/limits.js';

/**
 * The (f+1)-th largest of the reported values: at least one honest replica reported this much or more, and at
 * least one reported this much or less once 2f+1 values are in. Undefined with fewer than f+1 values (then no
 * honest replica need be among them). The one place the rule is written; every client decision uses it.
 */
export function fPlusOneLargest(values: readonly bigint[], f: number): bigint | undefined {
  if (values.length < f + 1) return undefined;
  return [...values].sort((a, b) => (a > b ? -1 : a < b ? 1 : 0))[f];
}

/**
 * The epoch to try next: the (f+1)-th largest reported epoch, plus one.
 * @param reported the highest epoch each answering replica has signed (0 = never), one per replica, at least 2f+1 of them.
 * @param floor never return less than this (an epoch the caller already tried).
 * @throws QuorumFenceError INVALID_ARGUMENT with fewer than 2f+1 answers; EPOCH_OUT_OF_RANGE when the epoch space is used up.
 */
export function chooseEpoch(reported: readonly bigint[], f: number, floor = 1n): bigint {
  if (reported.length < 2 * f + 1) {
    throw new QuorumFenceError(
      'INVALID_ARGUMENT',
      `choosing an epoch needs at least ${2 * f + 1} answers, got ${reported.length}`,
    );
  }
  const candidate = fPlusOneLargest(reported, f)! + 1n;
  const epoch = candidate > floor ? candidate : floor;
  if (epoch > MAX_EPOCH) {
    throw new QuorumFenceError(
      'EPOCH_OUT_OF_RANGE',
      `the epoch space of this resource is used up (next would be ${epoch})`,
    );
  }
  return epoch;
}

/**
 * The epoch to propose for a resource the client knows nothing about (docs/protocol.md, "Epoch choice"): one above
 * the highest floor among `signerFloors` (the acquire passes every connected replica's), so each of them grants it
 * at once or joins its lease (a replica with no record of a resource grants any epoch above its floor, up to
 * maxEpochStep above it), also when compaction left their floors apart. A liar's floor cannot push it far: it is at
 * most maxEpochStep above the (f+1)-th largest floor of all the replicas heard from, which is at or below an honest
 * replica's floor. Without f+1 floors known, or with none above 0, it is 1, as on a cluster that never compacted.
 * @param signerFloors the floors of the replicas the epoch must be above.
 * @param knownFloors the floors of every replica connected.
 */
export function firstEpoch(
  signerFloors: readonly bigint[],
  knownFloors: readonly bigint[],
  f: number,
  maxEpochStep: bigint,
): bigint {
  const honestBound = fPlusOneLargest(knownFloors, f);
  if (honestBound === undefined || signerFloors.length === 0) return 1n;
  let highest = 0n;
  for (const floor of signerFloors) if (floor > highest) highest = floor;
  const epoch = highest + 1n;
  const cap = honestBound + maxEpochStep;
  return epoch > cap ? cap : epoch;
}

/**
 * How long to wait for a busy lease to end: the (f+1)-th smallest remaining
 * time among replicas that report the lease running. At least one honest
 * replica says the lease ends by then, and f replicas reporting 0 cannot make
 * the waiter spin. Returns undefined with fewer than f+1 reports (then no
 * honest replica need be among them).
 */
export function quorumRemainingMs(remaining: readonly number[], f: number): number | undefined {
  if (remaining.length < f + 1) return undefined;
  const sorted = [...remaining].sort((a, b) => a - b);
  return sorted[f];
}
