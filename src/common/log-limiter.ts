/**
 * A limit on log lines a peer can cause: per key (a refusal reason, a refused admin request, a refused
 * ceremony frame), at most `burst` lines at once and `perSecond` after that; the lines over the limit are
 * counted, and `drain` hands the counts to a periodic summary line ("N lines like this were suppressed").
 * Pure arithmetic over the times it is given (TokenBucket), so a test drives it with any clock. One
 * implementation for every log line input can provoke (docs/operations.md, "Logs").
 */
import { BoundedMap } from './bounded-map.js';
import { TokenBucket } from './token-bucket.js';

export interface LogLimit {
  /** Lines per second per key once the burst is spent. */
  readonly perSecond: number;
  /** Lines a key may write at once. */
  readonly burst: number;
  /** Keys tracked at once (the oldest is forgotten past it, with its count): keys are a small fixed set. */
  readonly maxKeys?: number;
}

/**
 * One line a second per key names the dominant peer of any spike the RefusalSpike alert sees (more than one
 * refusal a second for five minutes); a burst of 10 shows the first lines of a new problem whole. A flood then
 * costs one line a second per key, plus its summary.
 */
export const DEFAULT_LOG_LIMIT: LogLimit = { perSecond: 1, burst: 10 };

/** How often the processes write the summary of suppressed lines. */
export const SUPPRESSED_SUMMARY_INTERVAL_MS = 10_000;

/** The count of lines `drain` found suppressed for one key since the previous drain. */
export interface Suppressed<K extends string> {
  readonly key: K;
  readonly count: number;
}

interface KeyState {
  readonly bucket: TokenBucket;
  suppressed: number;
}

export class LogLimiter<K extends string = string> {
  readonly #limit: LogLimit;
  readonly #keys: BoundedMap<K, KeyState>;

  constructor(limit: LogLimit = DEFAULT_LOG_LIMIT) {
    if (!(limit.perSecond > 0) || !Number.isSafeInteger(limit.burst) || limit.burst < 1)
      throw new RangeError(`a log limit needs perSecond > 0 and a whole burst >= 1, got ${JSON.stringify(limit)}`);
    this.#limit = limit;
    this.#keys = new BoundedMap(limit.maxKeys ?? 64);
  }

  /** Whether a line of `key` may be written at `now` (ms, monotonic); false counts it as suppressed. */
  admit(key: K, now: number): boolean {
    let state = this.#keys.get(key);
    if (!state) {
      state = { bucket: new TokenBucket(this.#limit.perSecond, this.#limit.burst, now), suppressed: 0 };
      this.#keys.set(key, state);
    }
    if (state.bucket.take(now)) return true;
    state.suppressed++;
    return false;
  }

  /** The keys with lines suppressed since the last call, with their counts (in first-seen order); resets them. */
  drain(): Suppressed<K>[] {
    const out: Suppressed<K>[] = [];
    for (const [key, state] of this.#keys) {
      if (state.suppressed === 0) continue;
      out.push({ key, count: state.suppressed });
      state.suppressed = 0;
    }
    return out;
  }
}
