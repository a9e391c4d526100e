/**
 * Shrinking a failing run (docs/testing.md): the run's plan is cut down, one part at a time (a fault, a client's
 * operation, a Byzantine behaviour, a whole client), keeping each cut after which the run, with the same seed,
 * still fails the same check; until no cut helps or the budget of reruns is spent. What is left is the smallest
 * schedule this search found that still shows the failure, and its trace is what a person reads.
 */
import type { RunOptions, RunResult } from './run.js';
import { runPlan } from './run.js';
import type { Plan } from './scenario.js';

export interface Shrunk {
  readonly plan: Plan;
  readonly result: RunResult;
  /** Reruns the search made. */
  readonly reruns: number;
}

/** Reruns a shrink may make: about a second or two of CPU with simulated crypto. */
const DEFAULT_BUDGET = 60;

/** Which check a result failed first: the shrunk run must fail the same one. */
function failureKind(result: RunResult): string | undefined {
  const first = result.violations[0] ?? result.livenessFailures[0];
  if (first === undefined) return undefined;
  return `${result.violations.length > 0 ? 'safety' : 'liveness'}:${first.split(/[:(]/)[0]}`;
}

/** The plans one cut away from `plan`, biggest cuts first. */
function cuts(plan: Plan): Plan[] {
  const candidates: Plan[] = [];
  for (let c = plan.ops.length - 1; c >= 1; c--)
    candidates.push({ ...plan, clients: plan.clients - 1, ops: plan.ops.filter((_, k) => k !== c) });
  for (let k = 0; k < plan.faults.length; k++)
    candidates.push({ ...plan, faults: plan.faults.filter((_, j) => j !== k) });
  for (let k = 0; k < plan.byzantine.length; k++)
    candidates.push({ ...plan, byzantine: plan.byzantine.filter((_, j) => j !== k) });
  plan.ops.forEach((ops, c) => {
    for (let k = 0; k < ops.length && ops.length > 1; k++)
      candidates.push({ ...plan, ops: plan.ops.map((list, d) => (d === c ? list.filter((_, j) => j !== k) : list)) });
  });
  return candidates;
}

/** Shrinks a failing plan; `failing` is its run's result. */
export async function shrink(
  plan: Plan,
  failing: RunResult,
  options: RunOptions,
  budget = DEFAULT_BUDGET,
): Promise<Shrunk> {
  const kind = failureKind(failing);
  let best = plan;
  let bestResult = failing;
  let reruns = 0;
  for (let improved = true; improved && reruns < budget;) {
    improved = false;
    for (const candidate of cuts(best)) {
      if (reruns >= budget) break;
      reruns++;
      const result = await runPlan(candidate, { ...options, traceLength: 0 });
      if (failureKind(result) !== kind) continue;
      best = candidate;
      bestResult = result;
      improved = true;
      break;
    }
  }
  // Once more with the trace kept.
  const result = await runPlan(best, options);
  return { plan: best, result: failureKind(result) === kind ? result : bestResult, reruns };
}
