/**
 * Running simulated scenarios: one plan (`runPlan`), one seed (`runSeed`), or a sweep of seeds from a base seed
 * (`sweep`), each the same every time (docs/testing.md). A sweep's digest covers every event of every run in
 * order, so two sweeps of the same seeds agree on it exactly when they did the same things.
 */
import { createHash } from 'node:crypto';
import { judge } from './checks.js';
import type { CryptoMode } from './crypto.js';
import { mutationNamed, type MutationEffects } from './mutations.js';
import type { LinkOrder } from './network.js';
import { planRun, type Plan } from './scenario.js';
import { World } from './world.js';

export interface RunOptions {
  readonly crypto: CryptoMode;
  /** A planted bug by name (mutations.ts). */
  readonly mutation?: string | undefined;
  /** Events kept for the trace of a failing run (0: none). */
  readonly traceLength?: number;
  /** Each run's link order (network.ts; default fifo), written into its plan. */
  readonly linkOrder?: LinkOrder;
}

export interface RunResult {
  readonly seed: number;
  readonly n: number;
  readonly events: number;
  /** Virtual ms the run lasted. */
  readonly virtualMs: number;
  readonly digest: string;
  readonly violations: readonly string[];
  readonly livenessFailures: readonly string[];
  /** Messages delivered after one sent later on the same link (0 unless the plan's link order is `any`). */
  readonly overtaken: number;
  /**
   * The last `traceLength` events before the verdict, messages, faults and notes (bare timer firings, which the
   * digest covers, are left out: a person reads the messages).
   */
  readonly trace: readonly string[];
}

/** Raw events kept per event of the printed trace. */
const RAW_TRACE_FACTOR = 10;

/** No run may go on longer than this in virtual time, or process more events: a run that does never finished. */
const RUN_LIMIT_MS = 60_000;
const RUN_MAX_EVENTS = 400_000;

/** @throws QuorumFenceError-free: an unknown mutation name is the caller's to refuse (see mutationNamed). */
export async function runPlan(plan: Plan, options: RunOptions): Promise<RunResult> {
  const mutation: MutationEffects = options.mutation ? (mutationNamed(options.mutation)?.effects ?? {}) : {};
  const traceLength = options.traceLength ?? 0;
  // Kept raw: most events of a quiet stretch are timers, which the printed trace leaves out.
  const world = new World(plan, { crypto: options.crypto, mutation, traceLength: traceLength * RAW_TRACE_FACTOR });
  await world.run(RUN_LIMIT_MS, RUN_MAX_EVENTS);
  const verdict = judge(world, world.finished);
  for (const client of world.clients) client.close();
  const { scheduler } = world;
  for (const line of [...verdict.violations, ...verdict.livenessFailures]) scheduler.note(`verdict ${line}`);
  return {
    seed: plan.seed,
    n: plan.n,
    events: scheduler.events,
    virtualMs: scheduler.now,
    digest: scheduler.digest(),
    violations: verdict.violations,
    livenessFailures: verdict.livenessFailures,
    overtaken: world.network.overtaken,
    trace: scheduler
      .trace()
      .filter((line) => !line.endsWith(':timer'))
      .slice(traceLength > 0 ? -traceLength : Infinity),
  };
}

export function runSeed(seed: number, options: RunOptions): Promise<RunResult> {
  return runPlan(planRun(seed, options), options);
}

/** The seed of run `index` of a sweep from `base`: spread, so neighbouring sweeps share no runs. */
export function runSeedOf(base: number, index: number): number {
  let x = (base ^ Math.imul(index + 1, 0x9e3779b1)) >>> 0;
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b) >>> 0;
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35) >>> 0;
  return (x ^ (x >>> 16)) >>> 0;
}

export interface SweepSummary {
  readonly runs: number;
  readonly violations: number;
  readonly livenessFailures: number;
  /** Hex SHA-256 over the runs' digests, in run order. */
  readonly digest: string;
  /** The runs that failed a check, in run order, with their index in the sweep. */
  readonly failed: readonly (RunResult & { readonly index: number })[];
  readonly events: number;
  /** Messages that overtook one sent earlier on their link, over every run (0 unless the link order is `any`). */
  readonly overtaken: number;
}

export interface SweepOptions extends RunOptions {
  /** Runs interleaved in one process (each run's events are its own, so interleaving changes no run). */
  readonly concurrency?: number;
  /** Stop starting runs after this many failed (a mutation is caught by the first). */
  readonly stopAfterFailures?: number;
  /** Worker threads sharing the runs (each with its own concurrency); 1 runs them in this thread. */
  readonly workers?: number;
}

/** The runs of a sweep with the given indices, `concurrency` at a time, in index order. */
export async function runIndices(
  base: number,
  indices: readonly number[],
  options: SweepOptions,
): Promise<RunResult[]> {
  const results: RunResult[] = [];
  let next = 0;
  let failures = 0;
  const worker = async () => {
    while (next < indices.length && (options.stopAfterFailures === undefined || failures < options.stopAfterFailures)) {
      const at = next++;
      const result = await runSeed(runSeedOf(base, indices[at]!), options);
      results[at] = result;
      if (result.violations.length + result.livenessFailures.length > 0) failures++;
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, options.concurrency ?? 4) }, worker));
  return results.filter((result): result is RunResult => result !== undefined);
}

/** Runs `runs` seeds from `base` and sums them up (see SweepOptions). */
export async function sweep(base: number, runs: number, options: SweepOptions): Promise<SweepSummary> {
  const indices = Array.from({ length: runs }, (_, k) => k);
  const workers = Math.max(1, Math.min(options.workers ?? 1, runs));
  let results: { index: number; result: RunResult }[];
  if (workers === 1) {
    results = (await runIndices(base, indices, options)).map((result, index) => ({ index, result }));
  } else {
    const { runInWorkers } = await import('./workers.js');
    results = await runInWorkers(base, indices, options, workers);
  }
  results.sort((a, b) => a.index - b.index);
  if (options.stopAfterFailures !== undefined) {
    // In order: the sweep is the runs up to the failure that stopped it (workers may have run further).
    const stop = results.filter(({ result }) => failedRun(result))[options.stopAfterFailures - 1];
    if (stop) results = results.filter(({ index }) => index <= stop.index);
  }
  const digest = createHash('sha256');
  for (const { result } of results) digest.update(result.digest);
  return {
    runs: results.length,
    violations: results.reduce((sum, { result }) => sum + result.violations.length, 0),
    livenessFailures: results.reduce((sum, { result }) => sum + result.livenessFailures.length, 0),
    digest: digest.digest('hex'),
    failed: results.filter(({ result }) => failedRun(result)).map(({ index, result }) => ({ ...result, index })),
    events: results.reduce((sum, { result }) => sum + result.events, 0),
    overtaken: results.reduce((sum, { result }) => sum + result.overtaken, 0),
  };
}

export function failedRun(result: RunResult): boolean {
  return result.violations.length + result.livenessFailures.length > 0;
}
