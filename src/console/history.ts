/**
 * The last minutes of the cluster for the page's charts: the margin, new grants per second and refusals per
 * second by reason, in fixed buckets (the worst margin of a bucket, the mean of its rates). Bounded by the
 * window whatever the poll interval; pure apart from the clock values it is given.
 */

/** 15 minutes: what an operator paged at night needs to see of what led up to it. */
export const HISTORY_WINDOW_MS = 15 * 60_000;
/** 5 s buckets: 180 points, a few KB of JSON per poll of the page, and a kill shows within one. */
export const HISTORY_BUCKET_MS = 5_000;
/** Refusal reasons charted; more are summed into "other" (reasons are label values replicas choose). */
const MAX_CHARTED_REASONS = 8;

export interface HistoryPoint {
  /** The bucket's start (ISO 8601, UTC). */
  readonly at: string;
  /** The lowest margin of its polls. */
  readonly margin: number;
  /** New grants per second, summed over the replicas' own figures (each grant is signed by t or more). */
  readonly grantsPerSecond: number | null;
  /** Refusals per second by reason, summed over the replicas' own figures. */
  readonly refusalsPerSecond: Readonly<Record<string, number>>;
}

/** What one poll adds. */
export interface HistorySample {
  readonly at: number;
  readonly margin: number;
  readonly grantsPerSecond: number | null;
  readonly refusalsPerSecond: Readonly<Record<string, number>>;
}

interface Bucket {
  start: number;
  margin: number;
  polls: number;
  grantsSum: number;
  grantsPolls: number;
  refusalsSum: Map<string, number>;
}

/** A bucket as the console's store keeps it (console-store.ts). */
export interface StoredBucket {
  readonly start: number;
  readonly margin: number;
  readonly polls: number;
  readonly grantsSum: number;
  readonly grantsPolls: number;
  readonly refusalsSum: readonly (readonly [string, number])[];
}

const finiteNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

export class RollingHistory {
  readonly #buckets: Bucket[] = [];

  /** The buckets, for the console's store. */
  stored(): StoredBucket[] {
    return this.#buckets.map((b) => ({ ...b, refusalsSum: [...b.refusalsSum] }));
  }

  /**
   * Takes back the buckets an earlier run kept that are still inside the window at `now`, in order; a bucket that does
   * not read is skipped. Polls while the console was down are simply missing: the charts show the gap.
   */
  restore(buckets: readonly StoredBucket[], now: number): void {
    for (const b of buckets) {
      const fields = [b.start, b.margin, b.polls, b.grantsSum, b.grantsPolls];
      if (!fields.every(finiteNumber) || b.polls < 1 || !Array.isArray(b.refusalsSum)) continue;
      if (b.start <= now - HISTORY_WINDOW_MS || b.start > now) continue;
      if (this.#buckets.length > 0 && this.#buckets.at(-1)!.start >= b.start) continue;
      const refusals = b.refusalsSum
        .filter(([reason, sum]) => typeof reason === 'string' && finiteNumber(sum))
        .slice(0, MAX_CHARTED_REASONS + 1);
      this.#buckets.push({ ...b, refusalsSum: new Map(refusals) });
    }
  }

  add(sample: HistorySample): void {
    const start = sample.at - (sample.at % HISTORY_BUCKET_MS);
    let bucket = this.#buckets.at(-1);
    if (!bucket || bucket.start !== start) {
      bucket = { start, margin: sample.margin, polls: 0, grantsSum: 0, grantsPolls: 0, refusalsSum: new Map() };
      this.#buckets.push(bucket);
    }
    bucket.margin = Math.min(bucket.margin, sample.margin);
    bucket.polls++;
    if (sample.grantsPerSecond !== null) {
      bucket.grantsSum += sample.grantsPerSecond;
      bucket.grantsPolls++;
    }
    for (const [reason, rate] of Object.entries(sample.refusalsPerSecond)) {
      const charted = bucket.refusalsSum.has(reason) || bucket.refusalsSum.size < MAX_CHARTED_REASONS;
      const key = charted ? reason : 'other';
      bucket.refusalsSum.set(key, (bucket.refusalsSum.get(key) ?? 0) + rate);
    }
    while (this.#buckets.length > 0 && this.#buckets[0]!.start <= sample.at - HISTORY_WINDOW_MS) this.#buckets.shift();
  }

  points(): HistoryPoint[] {
    return this.#buckets.map((b) => ({
      at: new Date(b.start).toISOString(),
      margin: b.margin,
      grantsPerSecond: b.grantsPolls > 0 ? b.grantsSum / b.grantsPolls : null,
      refusalsPerSecond: Object.fromEntries([...b.refusalsSum].map(([reason, sum]) => [reason, sum / b.polls])),
    }));
  }
}
