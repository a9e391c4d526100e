/**
 * Carrying the signing record across a reshare (docs/resharing.md, "The inherit rule"). Before a member
 * of the new set signs anything, it takes the frozen records of r >= 2f_old+1 distinct old members and
 * keeps, per resource, the (r - 2f_old)-th largest epoch reported; the floor likewise.
 *
 * Why that is enough: a token (R, e) was signed by 2f_old+1 old members, at least f_old+1 of them honest.
 * At most N - r members are missing from the reports, so at least r - 2f_old honest signers report, and
 * each reports R at e or above (its record for R, or its floor once compaction folded R into it; frozen
 * before export, so final). r - 2f_old reports at e or above make the (r - 2f_old)-th largest at least e,
 * whatever the other reports say. With every member reporting (r = N) that is the (f_old+1)-th largest,
 * which f_old liars cannot raise above the honest reports. With fewer they can: one liar among 2f_old+1
 * reporters sets the largest. So a claim at or above HONEST_EPOCH_CEILING (2^62), which no honest replica
 * reaches, is refused outright, and a lie below it leaves at least 2^62 epochs of the resource.
 * Taking only claims that 2f_old+1 reporters back would be unsafe: with r = 2f_old+1 a token may have a
 * single honest signer among the reporters.
 *
 * The holder at the inherited epoch E: a token at (R, E) has an honest signer whose report is exactly E
 * (its report is at least E, and fewer than r - 2f_old reports lie above E), so E is kept for a holder only
 * when every report of exactly E is a record naming that one holder; otherwise (two holders, or E reached
 * through a floor, which names none) the epoch is blocked: recorded for CONTESTED_HOLDER, which no client
 * has, so the new set must go above it.
 */
import { QuorumFenceError } from '../common/errors.js';
import { bytesEqual } from '../common/bytes.js';
import { HONEST_EPOCH_CEILING } from '../common/limits.js';
import { grantDigest } from '../token/grant.js';
import type { RecordEntry } from './signing-record.js';

/** The holder recorded when old members disagree on who holds the inherited epoch: no client has it. */
export const CONTESTED_HOLDER = new Uint8Array(32);

export interface OldRecordReport {
  /** The old replica index the report comes from. */
  readonly replica: number;
  /** Its epoch floor (0 for a store that never compacted, or a v1 export). */
  readonly floor: bigint;
  readonly entries: readonly RecordEntry[];
  /** Where the report came from (a file), for messages; "old replica i" when absent. */
  readonly source?: string;
}

export interface InheritedRecord {
  readonly entries: RecordEntry[];
  /** The new member's floor: the (r - 2f_old)-th largest reported floor. */
  readonly floor: bigint;
  /** Old replicas whose reports were used. */
  readonly from: number[];
  /** Resources whose inherited epoch is blocked (holders disagreed, or it came from a floor). */
  readonly contested: string[];
  /** Which largest report was kept (1 = the largest): r - 2f_old. */
  readonly rank: number;
}

const nameOf = (report: OldRecordReport) => report.source ?? `old replica ${report.replica}`;

/**
 * The inherit rule: checks the reporters (distinct, at least 2f_old+1, no claim at or above the ceiling),
 * then merges their reports at rank r - 2f_old; digests are recomputed for the new cluster id.
 * @throws QuorumFenceError RESHARE_REFUSED (fewer than 2f_old+1 distinct old replicas, or one reported twice),
 *   EXPORT_IMPOSSIBLE_EPOCH (a report claims an epoch or floor no honest replica reaches, naming it)
 */
export function inheritRecords(
  reports: readonly OldRecordReport[],
  oldF: number,
  newClusterId: Uint8Array,
): InheritedRecord {
  const needed = 2 * oldF + 1;
  const from = reports.map((r) => r.replica);
  const twice = reports.find((r, k) => from.indexOf(r.replica) !== k);
  if (twice) {
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      `two signing records of old replica ${twice.replica} (${reports
        .filter((r) => r.replica === twice.replica)
        .map(nameOf)
        .join(', ')}); each old replica counts once`,
    );
  }
  if (from.length < needed) {
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      `the signing records of at least 2f_old+1 = ${needed} old replicas are needed, got ${from.length} (${from.join(', ') || 'none'})`,
    );
  }
  for (const report of reports) refuseImpossibleClaims(report);
  return mergeReports(reports, reports.length - 2 * oldF, newClusterId);
}

/** A report claiming what no honest replica reaches is a lie: refused, naming its source. */
function refuseImpossibleClaims(report: OldRecordReport): void {
  const lie =
    report.floor >= HONEST_EPOCH_CEILING
      ? `floor ${report.floor}`
      : report.entries
          .filter((e) => e.record.epoch >= HONEST_EPOCH_CEILING)
          .map((e) => `epoch ${e.record.epoch} for "${e.resource.slice(0, 64)}"`)[0];
  if (lie === undefined) return;
  throw new QuorumFenceError(
    'EXPORT_IMPOSSIBLE_EPOCH',
    `${nameOf(report)} reports ${lie}, at or above 2^62, which no honest replica reaches (an epoch rises by at ` +
      `most 10^6 per grant): old replica ${report.replica} lies; inherit from the other old replicas' exports`,
    { replica: report.replica },
  );
}

/** The k-th largest of `values` (k from 1). */
function kthLargest(values: readonly bigint[], k: number): bigint {
  return [...values].sort((a, b) => (a > b ? -1 : a < b ? 1 : 0))[k - 1]!;
}

/**
 * Merges reports at `rank` (1 = the largest). The rule itself; inheritRecords checks the reporters and
 * chooses the rank. Exported so tests can plant other ranks and watch the safety property fail.
 */
export function mergeReports(
  reports: readonly OldRecordReport[],
  rank: number,
  newClusterId: Uint8Array,
): InheritedRecord {
  if (!Number.isInteger(rank) || rank < 1 || rank > reports.length)
    throw new QuorumFenceError('INVALID_ARGUMENT', `rank ${rank} among ${reports.length} reports`);
  const floor = kthLargest(
    reports.map((r) => r.floor),
    rank,
  );
  const byReporter = reports.map((r) => new Map(r.entries.map((e) => [e.resource, e.record])));
  const resources = [...new Set(reports.flatMap((r) => r.entries.map((e) => e.resource)))].sort((a, b) =>
    Buffer.compare(Buffer.from(a), Buffer.from(b)),
  );
  const entries: RecordEntry[] = [];
  const contested: string[] = [];
  for (const resource of resources) {
    // A reporter without a record for the resource signed it at most up to its floor.
    const reported = reports.map((r, k) => {
      const record = byReporter[k]!.get(resource);
      return record ? { epoch: record.epoch, holder: record.holder as Uint8Array | undefined } : { epoch: r.floor };
    });
    const epoch = kthLargest(
      reported.map((r) => r.epoch),
      rank,
    );
    if (epoch <= floor) continue; // the floor stands for it
    const atEpoch = reported.filter((r) => r.epoch === epoch);
    const holder = atEpoch[0]!.holder;
    const agreed = holder !== undefined && atEpoch.every((r) => r.holder !== undefined && bytesEqual(r.holder, holder));
    if (!agreed) contested.push(resource);
    const kept = agreed ? holder : CONTESTED_HOLDER;
    entries.push({
      resource,
      record: {
        epoch,
        holder: kept,
        grantDigest: grantDigest({ clusterId: newClusterId, resource, epoch, holder: kept }),
      },
    });
  }
  return { entries, floor, from: reports.map((r) => r.replica).sort((a, b) => a - b), contested, rank };
}
