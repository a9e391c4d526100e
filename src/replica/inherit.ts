/**
 * Carrying the signing record across a reshare. Before a member of the new
 * set signs anything, it takes the frozen records of at least 2f_old+1 old
 * members and keeps, per resource, the largest epoch any of them reports.
 *
 * Why that is enough: a grant the old set issued was signed by t_old = 2f_old+1
 * old members; any 2f_old+1 reports overlap those signers in at least
 * f_old+1 members, so at least one honest member that signed it reports it
 * (its record was frozen before export, so it cannot sign later grants
 * either). The maximum over the reports is therefore at least every epoch the
 * old set granted. Byzantine reports can only raise a watermark (costing that
 * resource's next epochs, never safety). At the largest epoch, reports that
 * name different holders (one of them a lie) block that epoch for everyone:
 * the new set must not re-sign it for a holder it was not granted to.
 *
 * Compaction (docs/storage.md): an old member may have folded a resource's
 * record into its floor, so "no entry" in its report means "signed at most
 * up to its floor". The inherited floor is therefore the largest reported
 * floor, and an entry at or below it is dropped (the floor covers it): the
 * resource then counts as signed up to that floor, which is at least what
 * the member that compacted it signed.
 */
import { QuorumFenceError } from '../common/errors.js';
import { bytesEqual } from '../common/bytes.js';
import { grantDigest } from '../token/grant.js';
import type { RecordEntry } from './signing-record.js';

/** The holder recorded when old members disagree on who holds the largest epoch: no client has it. */
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
  /** The largest floor reported: the new member's floor. */
  readonly floor: bigint;
  /** Old replicas whose reports were used. */
  readonly from: number[];
  /** Resources whose largest epoch was reported with two holders (now blocked at that epoch). */
  readonly contested: string[];
}

/**
 * Merges old members' records: per resource the largest epoch, its holder
 * when every report of that epoch agrees, else CONTESTED_HOLDER; digests are
 * recomputed for the new cluster id.
 * @throws QuorumFenceError RESHARE_REFUSED with fewer than 2f_old+1 distinct old replicas, or one reported twice
 */
export function inheritRecords(
  reports: readonly OldRecordReport[],
  oldF: number,
  newClusterId: Uint8Array,
): InheritedRecord {
  const needed = 2 * oldF + 1;
  const from = reports.map((r) => r.replica);
  if (new Set(from).size !== from.length) {
    throw new QuorumFenceError('RESHARE_REFUSED', `two signing records from one old replica (${from.join(', ')})`);
  }
  if (from.length < needed) {
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      `the signing records of at least 2f_old+1 = ${needed} old replicas are needed, got ${from.length} (${from.join(', ') || 'none'})`,
    );
  }
  const floor = reports.reduce((max, r) => (r.floor > max ? r.floor : max), 0n);
  const best = new Map<string, { epoch: bigint; holder: Uint8Array; contested: boolean }>();
  for (const report of reports) {
    for (const { resource, record } of report.entries) {
      const current = best.get(resource);
      if (!current || record.epoch > current.epoch) {
        best.set(resource, { epoch: record.epoch, holder: record.holder, contested: false });
      } else if (record.epoch === current.epoch && !bytesEqual(record.holder, current.holder)) {
        current.contested = true;
      }
    }
  }
  const entries: RecordEntry[] = [];
  const contested: string[] = [];
  for (const resource of [...best.keys()].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)))) {
    const { epoch, holder: reported, contested: isContested } = best.get(resource)!;
    if (epoch <= floor) continue;
    if (isContested) contested.push(resource);
    const holder = isContested ? CONTESTED_HOLDER : reported;
    entries.push({
      resource,
      record: {
        epoch,
        holder,
        grantDigest: grantDigest({ clusterId: newClusterId, resource, epoch, holder }),
      },
    });
  }
  return { entries, floor, from: [...from].sort((a, b) => a - b), contested };
}
