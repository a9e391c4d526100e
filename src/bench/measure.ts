/**
 * Timing helpers for benchmarks (never for tests). Medians and percentiles
 * over repeated runs, bounded by both an iteration count and a time budget so
 * the slow reference backend cannot stretch a run.
 */
import { QuorumFenceError } from '../common/errors.js';

/**
 * How long a bench run takes: `full` (the figures the docs quote), `quick` (about a tenth), `smoke` (the
 * least that still runs every step of a section, for the test suite: it checks a section completes and prints
 * its table; its figures mean nothing).
 */
export type BenchSize = 'full' | 'quick' | 'smoke';

/** A part of the bench that did not run, and why (its server is missing); in the JSON in place of its figures. */
export interface Skipped {
  readonly skipped: string;
}

/** What a part of the bench that threw leaves in the JSON in place of its figures. */
export interface Failed {
  readonly failed: { readonly code: string; readonly message: string };
}

/** `error` as a Failed: the project's error code, INTERNAL for anything else (a bug). */
export function failedOf(error: unknown): Failed {
  return {
    failed: {
      code: error instanceof QuorumFenceError ? error.code : 'INTERNAL',
      message: error instanceof Error ? error.message : String(error),
    },
  };
}

export interface Timing {
  /** Milliseconds. */
  readonly median: number;
  readonly p99: number;
  readonly mean: number;
  readonly samples: number;
  /**
   * `timeSync` only: the process's CPU per call, ms (user + system over the timed calls, every thread: a
   * native library's own threads count, as they do in the CPU the system bench reads from /proc).
   */
  readonly cpuMean?: number;
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
  const cpuBefore = process.cpuUsage();
  const start = performance.now();
  while (samples.length < maxIterations && (samples.length < minIterations || performance.now() - start < budgetMs)) {
    const t0 = performance.now();
    fn();
    samples.push(performance.now() - t0);
  }
  const cpu = process.cpuUsage(cpuBefore);
  return { ...summarise(samples), cpuMean: (cpu.user + cpu.system) / 1000 / samples.length };
}

/** A closed loop's result: cycles per second and the time of each cycle and of its acquire. */
export interface LoopRate {
  readonly clients: number;
  readonly operations: number;
  readonly seconds: number;
  readonly perSecond: number;
  /** One cycle (acquire, including any wait, [+ write] + release), ms. */
  readonly cycleMs: Timing;
  /** The acquire alone, including any wait for the lock (on a hot resource: the wait for a handoff), ms. */
  readonly acquireMs: Timing;
  /** Under a LoopCondition: the cycles done while it settled (not counted in `operations`). */
  readonly settlingOperations?: number;
  /** quorumfence only: partial signatures all replicas made per grant in this loop (warm-up grants included). */
  readonly signaturesPerGrant?: number;
  /** quorumfence only: the clients' token checks per batch of pairing checks (src/crypto/verify-batch.ts). */
  readonly clientChecksPerBatch?: number;
  /** quorumfence fenced loops only: the guard's token checks per batch, from the resource's /metrics. */
  readonly guardChecksPerBatch?: number;
}

/**
 * Told when a loop's cycles begin (its connections are open) and when they
 * end (before they close): a CPU or profile window around the cycles alone,
 * so connection set-up (quorumfence's Ed25519 handshakes, etcd's TCP and
 * HTTP) counts on neither side.
 */
export interface CycleWindow {
  opened(): void;
  done(): void;
}

/**
 * A condition the counted cycles run under (bench --gray's faults, and the healthy runs beside them): begun
 * after the warm-up cycles, then cycles run uncounted for `settleMs` (the clients' time to notice it, under
 * load), then the counted ones; ended once the last cycle is done, before the clients close.
 */
export interface LoopCondition {
  readonly settleMs: number;
  begin(): Promise<void>;
  /** Told when the counted cycles start (the settling time is over): where to read the servers' counters. */
  counting?(): void;
  end(): Promise<void>;
}

/**
 * Runs `clients` closed loops for `seconds` after one warm-up cycle each.
 * `cycle(k, remainingMs)` runs one cycle of client k and returns how long its
 * acquire took, or undefined when it was not granted (a wait that ran out).
 * `window` hears the start of the warm-up cycles and the end of the last one.
 * With a `condition`, the loops run under it (see LoopCondition): a cycle
 * counts when it ends after the settling time and began before the end, so
 * one caught by the condition's start counts with all it waited.
 */
export async function closedLoop(
  clients: number,
  seconds: number,
  cycle: (client: number, remainingMs: number) => Promise<number | undefined>,
  window?: CycleWindow,
  condition?: LoopCondition,
): Promise<LoopRate> {
  window?.opened();
  await Promise.all(Array.from({ length: clients }, (_, k) => cycle(k, 10_000)));
  const cycles: number[] = [];
  const acquires: number[] = [];
  let settling = 0;
  try {
    // Ended even when beginning it failed half-way: ending what was not begun is harmless.
    await condition?.begin();
    const start = performance.now() + (condition?.settleMs ?? 0);
    const end = start + seconds * 1000;
    if (condition?.counting) setTimeout(() => condition.counting!(), condition.settleMs);
    await Promise.all(
      Array.from({ length: clients }, async (_, k) => {
        while (performance.now() < end) {
          const t0 = performance.now();
          const acquireMs = await cycle(k, Math.max(1, Math.ceil(end - performance.now())));
          if (acquireMs === undefined) continue;
          if (performance.now() < start) {
            settling++;
            continue;
          }
          cycles.push(performance.now() - t0);
          acquires.push(acquireMs);
        }
      }),
    );
    const elapsed = (performance.now() - start) / 1000;
    window?.done();
    return {
      clients,
      operations: cycles.length,
      seconds: elapsed,
      perSecond: cycles.length / elapsed,
      cycleMs: summarise(cycles),
      acquireMs: summarise(acquires),
      ...(condition ? { settlingOperations: settling } : {}),
    };
  } finally {
    await condition?.end();
  }
}

/**
 * What quorumfence's and etcd's sides both run, by size: each closed loop's measured seconds, and the
 * uncontended acquires timed one after another, after `warmupAcquires` untimed ones (the first ones warm the
 * JIT and the connections).
 */
export const LOOP_PLAN: Record<BenchSize, { seconds: number; acquires: number; warmupAcquires: number }> = {
  full: { seconds: 6, acquires: 600, warmupAcquires: 30 },
  quick: { seconds: 2, acquires: 150, warmupAcquires: 30 },
  smoke: { seconds: 0.25, acquires: 15, warmupAcquires: 5 },
};

/**
 * Names for the distinct loop, both sides: a fresh one for every cycle (`prefix/<client>/<cycle>`), as
 * per-order locks are the common case, so a cycle never reuses what an earlier one left at the servers.
 */
export function freshNames(prefix: string): (client: number) => string {
  let cycle = 0;
  return (client) => `${prefix}/${client}/${++cycle}`;
}

/** The three loops each side runs, for one kind of cycle. */
export interface LoopSet {
  /** 1 client. */
  readonly one: LoopRate;
  /** 16 clients (by default), each on its own resources, a fresh one every cycle. */
  readonly distinct: LoopRate;
  /** 16 clients on one hot resource: each cycle is one handoff. */
  readonly hot: LoopRate;
}

/** Both kinds of cycle: acquire + release, and acquire + one fenced write + release. */
export interface LoopKinds {
  readonly lockRelease: LoopSet;
  readonly fencedWrite: LoopSet;
}
