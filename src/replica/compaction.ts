/**
 * Compaction of the signing record: which records are folded into the floor (a lease not running, the restart rule
 * included, and a grant older than the retention window), one batch per transaction with requests running between
 * batches, forgetting their lease state. Apart from service.ts because it runs beside the requests, not as one
 * (ReplicaService.compact starts it; the server and the simulator call that periodically); the store's side of each
 * step is `compactStep` (signing-record.ts, docs/storage.md).
 */
import type { LeaseTable } from './leases.js';
import type { RecordStore } from './record-store.js';

export interface CompactionSummary {
  readonly compacted: number;
  readonly scanned: number;
  readonly floor: bigint;
  readonly records: number;
}

/** Records per compaction transaction: requests wait for at most one batch (they run between batches). */
export const DEFAULT_COMPACTION_BATCH = 1_000;

/** What a compaction run folds (the service's store and lease table) and its settings (ReplicaServiceOptions). */
export interface CompactionRun {
  readonly store: RecordStore;
  readonly leases: LeaseTable;
  /** How long a record is kept after its grant once its lease has ended (wall-clock ms). */
  readonly retentionMs: number;
  /** Records looked at per compaction transaction. */
  readonly batch: number;
  readonly wallClock: () => number;
  /** Runs `run` after the I/O already waiting: requests run between batches. */
  readonly defer: (run: () => void) => void;
}

/** One whole compaction, batch by batch (ReplicaService.compact: a call while one runs joins it). */
export async function compactAll(run: CompactionRun): Promise<CompactionSummary> {
  const { store, leases, retentionMs, batch, wallClock, defer } = run;
  let compacted = 0;
  let scanned = 0;
  let from: Buffer | undefined;
  const cutoff = wallClock() - retentionMs;
  do {
    const step = store.compactStep(from, batch, (resource, record, grantedAtMs) => {
      if (grantedAtMs > cutoff || leases.isRunning(resource, record)) return false;
      leases.forget(resource);
      return true;
    });
    compacted += step.compacted;
    scanned += step.scanned;
    from = step.next;
    // Let requests run between batches: each batch is one synchronous transaction.
    if (from) await new Promise<void>((resolve) => defer(resolve));
  } while (from);
  leases.sweep();
  return { compacted, scanned, floor: store.floor, records: store.size };
}
