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
 * reporters sets the largest. So two claims are refused rather than inherited:
 *
 * - a claim at or above HONEST_EPOCH_CEILING (2^62), which no honest replica reaches, unless f_old+1 reports
 *   reach it (then an honest one is there: a cluster whose epochs crossed the ceiling before this rule);
 * - an inherited value that lies further above the backed value (the (f_old+1)-th largest report, which no
 *   f_old liars can raise above an honest report) than 1/1024 of the epochs left below 2^62
 *   (unbackedLeadAllowed). Honest replicas drift apart by free steps, a million epochs per grant at most, so
 *   an honest lead that large takes billions of grants; and a liar, who can still push by that much per
 *   reshare, takes 1/1024 of what is left each time, so no number of reshares brings an honest replica to 2^62.
 *
 * Both refusals name the reporters; the remedy is more exports (all N: then nothing is refused this way).
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
import { DEFAULT_MAX_EPOCH_STEP, HONEST_EPOCH_CEILING } from '../common/limits.js';
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
 * The inherit rule: checks the reporters (distinct, at least 2f_old+1, no lone claim at or above the ceiling, no
 * inherited value far above what f_old+1 reports back), then merges their reports at rank r - 2f_old; digests are
 * recomputed for the new cluster id.
 * @throws QuorumFenceError RESHARE_REFUSED (fewer than 2f_old+1 distinct old replicas, or one reported twice),
 *   EXPORT_IMPOSSIBLE_EPOCH (a report claims an epoch or floor no honest replica reaches, naming it),
 *   EXPORT_UNBACKED_EPOCH (an inherited value f_old liars could have set far ahead, naming the reporters)
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
  const rank = reports.length - 2 * oldF;
  for (const quantity of reportedQuantities(reports)) {
    refuseImpossibleClaim(quantity, oldF);
    refuseUnbackedLead(quantity, oldF, rank, reports.length);
  }
  return mergeReports(reports, rank, newClusterId);
}

/**
 * How far above the backed value (the (f_old+1)-th largest report) an inherited value may lie: 1/1024 of the epochs
 * left below 2^62. Beyond 2^62 (a cluster whose epochs crossed it before this rule, where it proves nothing), one
 * maximum epoch step: what honest replicas drift apart by in one grant.
 */
export function unbackedLeadAllowed(backed: bigint): bigint {
  return backed >= HONEST_EPOCH_CEILING ? DEFAULT_MAX_EPOCH_STEP : (HONEST_EPOCH_CEILING - backed) >> 10n;
}

/** One reporter's word on one quantity (the floor, or a resource's epoch). */
interface Reported {
  readonly report: OldRecordReport;
  readonly epoch: bigint;
  /** The holder its record names; undefined when the epoch is its floor's. */
  readonly holder: Uint8Array | undefined;
}

/** What the reporters say about the floor, or about one resource. */
interface Quantity {
  /** The resource it is the epoch of; undefined for the floor. */
  readonly resource: string | undefined;
  /** For messages: `floor` or `epoch … for "resource"`. */
  readonly what: (epoch: bigint) => string;
  readonly reported: readonly Reported[];
}

/**
 * Every quantity the reports speak of: the floor, and each resource any of them has a record for (a reporter
 * without a record for it reports its floor: it signed the resource at most up to there), resources in byte order.
 */
function reportedQuantities(reports: readonly OldRecordReport[]): Quantity[] {
  const byReporter = reports.map((r) => new Map(r.entries.map((e) => [e.resource, e.record])));
  const resources = [...new Set(reports.flatMap((r) => r.entries.map((e) => e.resource)))].sort((a, b) =>
    Buffer.compare(Buffer.from(a), Buffer.from(b)),
  );
  const floor: Quantity = {
    resource: undefined,
    what: (epoch) => `floor ${epoch}`,
    reported: reports.map((report) => ({ report, epoch: report.floor, holder: undefined })),
  };
  return [
    floor,
    ...resources.map((resource): Quantity => ({
      resource,
      what: (epoch) => `epoch ${epoch} for "${resource.slice(0, 64)}"`,
      reported: reports.map((report, k) => {
        const record = byReporter[k]!.get(resource);
        return { report, epoch: record?.epoch ?? report.floor, holder: record?.holder };
      }),
    })),
  ];
}

/** Names reporters for a message: `old replica 1 (frozen-1.json)`. */
function named(reported: readonly Reported[]): string {
  return reported
    .map(({ report }) => (report.source ? `old replica ${report.replica} (${report.source})` : nameOf(report)))
    .join(', ');
}

/**
 * A claim at or above 2^62 that fewer than f_old+1 reports reach is a lie: refused, naming its source. (When f_old+1
 * reach it, one of them is honest: the cluster's epochs crossed the ceiling before inherit refused such lies, and
 * the ceiling proves nothing there.)
 */
function refuseImpossibleClaim(quantity: Quantity, oldF: number): void {
  const beyond = quantity.reported.filter((r) => r.epoch >= HONEST_EPOCH_CEILING);
  if (beyond.length === 0 || beyond.length > oldF) return;
  const first = beyond[0]!;
  throw new QuorumFenceError(
    'EXPORT_IMPOSSIBLE_EPOCH',
    `${nameOf(first.report)} reports ${quantity.what(first.epoch)}, at or above 2^62, which no honest replica reaches ` +
      `(an epoch rises by at most 10^6 per grant): old replica ${first.report.replica} lies; inherit from the other ` +
      `old replicas' exports`,
    { replica: first.report.replica, replicas: beyond.map((r) => r.report.replica) },
  );
}

/**
 * An inherited value (the report at `rank`) further above the backed one (the (f_old+1)-th largest) than
 * unbackedLeadAllowed: with fewer than all N exports, f_old liars may have set it. Refused, naming the reporters
 * above the allowance, and asking for more exports. Never with all N (the rank is then f_old+1 itself).
 */
function refuseUnbackedLead(quantity: Quantity, oldF: number, rank: number, reporters: number): void {
  const epochs = quantity.reported.map((r) => r.epoch);
  const inherited = kthLargest(epochs, rank);
  const backed = kthLargest(epochs, oldF + 1);
  const allowed = unbackedLeadAllowed(backed);
  if (inherited - backed <= allowed) return;
  const ahead = quantity.reported.filter((r) => r.epoch - backed > allowed);
  const all = 3 * oldF + 1;
  throw new QuorumFenceError(
    'EXPORT_UNBACKED_EPOCH',
    `${named(ahead)} report${ahead.length > 1 ? '' : 's'} ${quantity.what(inherited)}, more than ${allowed} ` +
      `(${backed >= HONEST_EPOCH_CEILING ? 'one maximum epoch step, past 2^62' : '1/1024 of the epochs left below 2^62'}) ` +
      `above the ${backed} that f_old+1 = ${oldF + 1} of the ${reporters} ` +
      `reports reach. With ${reporters} of the ${all} old replicas' exports, ${oldF === 1 ? 'one liar' : `${oldF} liars`} ` +
      `among them could have set it, so it is not inherited: give the frozen exports of more old replicas (with ` +
      `all ${all}, no liar can raise anything), or leave out the export of a replica that lies`,
    { replicas: ahead.map((r) => r.report.replica), inherited: String(inherited), backed: String(backed) },
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
  const [floorQuantity, ...resourceQuantities] = reportedQuantities(reports);
  const floor = kthLargest(
    floorQuantity!.reported.map((r) => r.epoch),
    rank,
  );
  const entries: RecordEntry[] = [];
  const contested: string[] = [];
  for (const { resource, reported } of resourceQuantities) {
    if (resource === undefined) continue; // only the first quantity is the floor
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
