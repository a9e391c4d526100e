/**
 * Shared test set-up: the fast-check run count is set once here (override
 * with FC_NUM_RUNS); a failing property prints its seed and path to replay it.
 */
import fc from 'fast-check';

fc.configureGlobal({ numRuns: Number(process.env.FC_NUM_RUNS ?? 100) });
