/**
 * The guard's Prometheus metrics, in a registry of its own (so a guard beside
 * a replica in one process, or two guards in one test, never clash). It
 * implements GuardObserver. Timing the verification reads a clock, for the
 * histogram only: no decision ever depends on it (S6).
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { GuardObserver } from './core.js';
import type { GuardOutcomeLabel } from './log.js';

/** A cached check is microseconds, a pairing about a millisecond natively, tens with the reference backend. */
const VERIFY_BUCKETS = [0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1];

export class GuardMetrics implements GuardObserver {
  readonly registry = new Registry();
  readonly attempts: Counter<'op' | 'outcome'>;
  readonly conflicts: Counter<'resource'>;
  readonly verifySeconds: Histogram;
  readonly cacheLookups: Counter<'result'>;

  constructor(
    labels: { cluster: string },
    options: {
      tokenCacheEntries?: () => number;
      /** The process's batcher of pairing checks (src/crypto/verify-batch.ts), read at each scrape. */
      verifyBatches?: { readonly batches: number; readonly checks: number };
      processMetrics?: boolean;
    } = {},
  ) {
    this.registry.setDefaultLabels({ cluster: labels.cluster.slice(0, 16) });
    const registers = [this.registry];
    this.attempts = new Counter({
      name: 'quorumfence_guard_attempts_total',
      help: 'Guarded attempts, by operation and outcome ("accepted" or the refusal reason)',
      labelNames: ['op', 'outcome'],
      registers,
    });
    this.conflicts = new Counter({
      name: 'quorumfence_guard_conflicts_total',
      help: 'ALARM: two different valid tokens for one (resource, epoch), proof of more than f faulty replicas',
      labelNames: ['resource'],
      registers,
    });
    this.verifySeconds = new Histogram({
      name: 'quorumfence_guard_verify_seconds',
      help: 'Token decoding and pairing check on a cache miss (its wait for a batch of checks included)',
      buckets: VERIFY_BUCKETS,
      registers,
    });
    this.cacheLookups = new Counter({
      name: 'quorumfence_guard_token_cache_lookups_total',
      help: 'Token cache lookups by result (hit rate = hit / (hit + miss))',
      labelNames: ['result'],
      registers,
    });
    const cacheEntries = options.tokenCacheEntries;
    if (cacheEntries) {
      new Gauge({
        name: 'quorumfence_guard_token_cache_entries',
        help: 'Verified tokens held in the cache',
        registers,
        collect() {
          this.set(cacheEntries());
        },
      });
    }
    const batcher = options.verifyBatches;
    if (batcher) {
      // Counters that follow the batcher's own: checks / batches is the mean batch size.
      const following = (name: string, help: string, read: () => number) => {
        let seen = read();
        new Counter({
          name,
          help,
          registers,
          collect() {
            const now = read();
            if (now > seen) this.inc(now - seen);
            seen = now;
          },
        });
      };
      following(
        'quorumfence_guard_verify_batches_total',
        'Batches of pairing checks this process ran (tokens not in the cache; a lone check is a batch of one)',
        () => batcher.batches,
      );
      following(
        'quorumfence_guard_verify_batched_checks_total',
        'Pairing checks those batches answered (checks / batches = mean batch size)',
        () => batcher.checks,
      );
    }
    // The standard process_* and nodejs_* names, as the replica exports them (replica/metrics.ts).
    if (options.processMetrics) collectDefaultMetrics({ register: this.registry });
  }

  attempt(op: string, outcome: GuardOutcomeLabel): void {
    this.attempts.inc({ op, outcome });
  }

  conflict(resource: string): void {
    // Conflicts need > f faulty replicas: rare enough that a label per resource cannot grow without bound in practice.
    this.conflicts.inc({ resource });
  }

  cacheLookup(hit: boolean): void {
    this.cacheLookups.inc({ result: hit ? 'hit' : 'miss' });
  }

  timeVerify<T>(verify: () => T): T {
    const start = performance.now();
    const observe = () => this.verifySeconds.observe((performance.now() - start) / 1000);
    let result: T;
    try {
      result = verify();
    } catch (error) {
      observe();
      throw error;
    }
    // A batched check is timed to its answer, the wait for its batch included.
    if (result instanceof Promise) return result.finally(observe) as T;
    observe();
    return result;
  }
}
