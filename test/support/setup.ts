/**
 * Shared test set-up: the fast-check run count is set once here (override with
 * FC_NUM_RUNS), and every property test prints its seed on failure so it can be replayed.
 */
import fc from 'fast-check';

fc.configureGlobal({
  numRuns: Number(process.env.FC_NUM_RUNS ?? 100),
  interruptAfterTimeLimit: 120_000,
});
