/**
 * Timing helpers for benchmarks (never for tests). Medians and percentiles
 * over repeated runs, bounded by both an iteration count and a time budget so
 * the slow reference backend cannot stretch a run.
 */
export interface Timing {
  /** Milliseconds. */
  readonly median: number;
  readonly p99: number;
  readonly mean: number;
  readonly samples: number;
}

export function percentile(sortedMs: readonly number[], fraction: number): number {
  if (sortedMs.length === 0) return NaN;
  const rank = Math.min(sortedMs.length - 1, Math.max(0, Math.ceil(fraction * sortedMs.length) - 1));
  return sortedMs[rank]!;
}

export function summarise(samplesMs: number[]): Timing {
  const sorted = [...samplesMs].sort((a, b) => a - b);
  return {
    median: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
    mean: sorted.reduce((a, b) => a + b, 0) / Math.max(1, sorted.length),
    samples: sorted.length,
  };
}

/** Times `fn` after `warmup` calls, until `maxIterations` or `budgetMs` is reached (at least `minIterations`). */
export function timeSync(
  fn: () => unknown,
  options: { warmup?: number; minIterations?: number; maxIterations?: number; budgetMs?: number } = {},
): Timing {
  const { warmup = 3, minIterations = 5, maxIterations = 2000, budgetMs = 1000 } = options;
  for (let i = 0; i < warmup; i++) fn();
  const samples: number[] = [];
  const start = performance.now();
  while (samples.length < maxIterations && (samples.length < minIterations || performance.now() - start < budgetMs)) {
    const t0 = performance.now();
    fn();
    samples.push(performance.now() - t0);
  }
  return summarise(samples);
}
