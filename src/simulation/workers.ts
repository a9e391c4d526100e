/**
 * A sweep's runs shared among worker threads (`quorumfence-dev simulate --workers N`): worker k runs the indices
 * k, k+N, k+2N, ...; each run is the same in any thread, so the sweep's digest and verdict do not depend on N.
 */
import { Worker } from 'node:worker_threads';
import type { RunResult, SweepOptions } from './run.js';

export interface WorkerTask {
  readonly base: number;
  readonly indices: readonly number[];
  readonly options: SweepOptions;
}

export async function runInWorkers(
  base: number,
  indices: readonly number[],
  options: SweepOptions,
  workers: number,
): Promise<{ index: number; result: RunResult }[]> {
  const shares = Array.from({ length: workers }, (_, k) => indices.filter((_, at) => at % workers === k));
  const done = await Promise.all(
    shares.map(
      (share) =>
        new Promise<RunResult[]>((resolve, reject) => {
          const task: WorkerTask = { base, indices: share, options: { ...options, workers: 1 } };
          const worker = new Worker(new URL('./sweep-worker.js', import.meta.url), { workerData: task });
          worker.once('message', (results: RunResult[]) => resolve(results));
          worker.once('error', reject);
          worker.once('exit', (code) => {
            if (code !== 0) reject(new Error(`a simulation worker exited with code ${code}`));
          });
        }),
    ),
  );
  return done.flatMap((results, k) => results.map((result, at) => ({ index: shares[k]![at]!, result })));
}
