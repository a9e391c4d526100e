/** A worker thread's part of a sweep (workers.ts): runs its indices and posts the results back. */
import { parentPort, workerData } from 'node:worker_threads';
import { runIndices } from './run.js';
import type { WorkerTask } from './workers.js';

const task = workerData as WorkerTask;
const results = await runIndices(task.base, task.indices, task.options);
parentPort!.postMessage(results);
