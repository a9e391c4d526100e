/**
 * `quorumfence-dev simulate`: the deterministic cluster simulator (src/simulation, docs/testing.md). Runs seeded
 * scenarios of a whole cluster in one process on virtual time, checks each, and prints a digest over every event
 * of every run; a failing run is shrunk and replayable from its seed.
 */
import { randomInt } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { QuorumFenceError } from '../common/errors.js';
import { integerFlag, parseFlags, type Command } from '../command/args.js';

const usage = `usage: quorumfence-dev simulate [--seed S] [--runs N] [--json] [--crypto sim|real] [--mutate NAME]
                               [--workers N] [--trace N] [--no-shrink] [--link-order fifo|any]
       quorumfence-dev simulate --replay SEED [--crypto sim|real] [--mutate NAME] [--trace N] [--json]
                               [--link-order fifo|any]
       quorumfence-dev simulate --timing [--mutate NAME] [--json]
       quorumfence-dev simulate --list-mutations

Runs N seeded scenarios (run i's seed is derived from S and i), each a whole
cluster in this process on virtual time: N = 4, 7 or 10 replicas (up to f of
them Byzantine, running the project's lying behaviours) on simulated disks
that lose unflushed writes and tear the last one when power is lost, clients
running the SDK's own acquire, renew and release code, a guard, a malicious
client pushing replicas apart and forging hellos, a simulated network (delay,
loss, partitions; each link in order, as TCP, unless --link-order any) and a
drifting clock per node; crashes, power losses (also at the moment disks
flush), clock jumps and a reshare come and go until the run heals. Each run
is checked: safety (the history checker: one token per resource and epoch,
accepted epochs never go down, no acknowledged write lost, nothing granted
again across a reshare; no stale refusal at the barrier; the lease ledger;
nothing answered on a connection whose hello did not verify; no exception), liveness (after the heal every acquire completes
within a bound; each replica's line grants in its order) and bounded
state. The same seed gives the same runs and the same digest.

A failing run prints its seed (replay it alone with --replay SEED) and a
shrunk plan with the trace of its last events. --mutate NAME plants one of
the bugs --list-mutations names and stops at the first run that catches it.

--timing runs the timing scenarios instead (docs/testing.md, "Timing"): no
fault, every link 10 ms one way, and each fast path measured in round trips
on virtual time against the bound docs/protocol.md promises: a hot handoff,
one client's acquire + release cycle, and the first acquire of a resource
while the replicas' floors differ each cost one round trip. The mutations
marked (timing) are caught there, not by the seeded runs.

Exit codes: 0 no run failed a check (with --mutate: the mutation was caught);
1 a run failed a check (with --mutate: not caught within --runs); 2 bad flags.

options:
  --seed S            base seed                                 (default random; printed)
  --runs N            scenarios to run                          (default 200)
  --crypto sim|real   simulated threshold BLS (fast) or the native BLS12-381  (default sim)
  --mutate NAME       plant a bug (see --list-mutations)
  --replay SEED       run the scenario of one run seed and print its verdict and trace
  --timing            run the timing scenarios (round trips of the fast paths)
  --list-mutations    the bugs --mutate can plant
  --workers N         worker threads                            (default: the machine's cores, at most 4)
  --trace N           events of a failing run's trace to print  (default 200)
  --no-shrink         report the first failing run as it ran, not shrunk (faster, when only the
                      catching run matters: the test suite's planted-bug checks)
  --link-order O      fifo: each link keeps its order, as TCP; any: messages on one link may
                      overtake each other (still at most once). Part of each run's plan: replay
                      a run with the same order                 (default fifo)
  --json              print the summary as one JSON object
`;

/** JSON with bigints as strings (plans hold epochs). */
function json(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
}

export const command: Command = {
  summary: 'run seeded scenarios of a whole simulated cluster on virtual time, check and replay them',
  usage,
  async run(argv) {
    const { values } = parseFlags(argv, {
      seed: { type: 'string' },
      runs: { type: 'string' },
      json: { type: 'boolean' },
      crypto: { type: 'string' },
      mutate: { type: 'string' },
      replay: { type: 'string' },
      'list-mutations': { type: 'boolean' },
      timing: { type: 'boolean' },
      workers: { type: 'string' },
      trace: { type: 'string' },
      'no-shrink': { type: 'boolean' },
      'link-order': { type: 'string' },
    });
    const { MUTATIONS, mutationNamed } = await import('../simulation/mutations.js');
    if (values['list-mutations']) {
      if (values.json)
        process.stdout.write(
          json(
            MUTATIONS.map(({ name, description, breaks, caughtBy }) => ({
              name,
              description,
              breaks,
              caughtBy: caughtBy ?? 'runs',
            })),
          ) + '\n',
        );
      else
        for (const m of MUTATIONS)
          process.stdout.write(
            `${m.name.padEnd(28)} ${m.description} (breaks ${m.breaks})${m.caughtBy ? ` (${m.caughtBy})` : ''}\n`,
          );
      return 0;
    }
    const crypto = values.crypto ?? 'sim';
    if (crypto !== 'sim' && crypto !== 'real')
      throw new QuorumFenceError('INVALID_OPTION', `--crypto expects sim or real, got "${crypto}"`);
    if (values.mutate !== undefined && !mutationNamed(values.mutate))
      throw new QuorumFenceError(
        'INVALID_OPTION',
        `--mutate: unknown mutation "${values.mutate}" (known: ${MUTATIONS.map((m) => m.name).join(', ')})`,
      );
    const timingMutation = values.mutate !== undefined && mutationNamed(values.mutate)?.caughtBy === 'timing';
    if (values.timing) return timingCommand(values.mutate, values.json === true);
    if (timingMutation)
      throw new QuorumFenceError(
        'INVALID_OPTION',
        `--mutate ${values.mutate} costs time, not safety: the timing scenarios catch it (add --timing)`,
      );
    const linkOrder = values['link-order'] ?? 'fifo';
    if (linkOrder !== 'fifo' && linkOrder !== 'any')
      throw new QuorumFenceError('INVALID_OPTION', `--link-order expects fifo or any, got "${linkOrder}"`);
    const traceLength = integerFlag(values.trace, 'trace', 200, 0, 100_000);
    const options = {
      crypto,
      mutation: values.mutate,
      traceLength,
      shrink: values['no-shrink'] !== true,
      linkOrder,
    } as const;
    if (values.replay !== undefined)
      return replay(integerFlag(values.replay, 'replay', 0, 0, 2 ** 32 - 1), options, values.json === true);
    const seed =
      values.seed === undefined ? randomInt(1, 2 ** 31) : integerFlag(values.seed, 'seed', 0, 0, 2 ** 32 - 1);
    const runs = integerFlag(values.runs, 'runs', 200, 1, 10_000_000);
    const workers = integerFlag(values.workers, 'workers', Math.min(4, availableParallelism()), 1, 64);
    return sweepCommand(seed, runs, workers, options, values.json === true);
  },
};

interface Options {
  readonly crypto: 'sim' | 'real';
  readonly mutation: string | undefined;
  readonly traceLength: number;
  /** Shrink the first failing run of a sweep (false: --no-shrink). */
  readonly shrink: boolean;
  readonly linkOrder: 'fifo' | 'any';
}

/** `--timing`: every timing scenario against its bound; with a mutation, exit 0 only when some scenario failed. */
async function timingCommand(mutationName: string | undefined, asJson: boolean): Promise<number> {
  const { runTiming } = await import('../simulation/timing.js');
  const { mutationNamed } = await import('../simulation/mutations.js');
  const results = await runTiming(mutationName === undefined ? {} : mutationNamed(mutationName)!.effects);
  const failed = results.filter((result) => result.failures.length > 0);
  if (asJson) process.stdout.write(json({ mutation: mutationName ?? null, results }) + '\n');
  else {
    process.stdout.write(
      `${'scenario'.padEnd(48)} ${'measures'.padEnd(60)} samples  median    max  bound (round trips of 20 ms)\n`,
    );
    for (const r of results)
      process.stdout.write(
        `${r.name.padEnd(48)} ${r.measures.padEnd(60)} ${String(r.samples).padStart(7)} ${r.medianRoundTrips.toFixed(2).padStart(7)} ` +
          `${r.maxRoundTrips.toFixed(2).padStart(6)} ${r.boundRoundTrips.toFixed(2).padStart(6)}\n`,
      );
    for (const r of failed) for (const line of r.failures) process.stdout.write(`failed: ${r.name}: ${line}\n`);
    process.stdout.write(`${results.length - failed.length} of ${results.length} scenarios within their bound\n`);
  }
  return (failed.length === 0) === (mutationName === undefined) ? 0 : 1;
}

async function replay(seed: number, options: Options, asJson: boolean): Promise<number> {
  const { runSeed, failedRun } = await import('../simulation/run.js');
  const { planRun } = await import('../simulation/scenario.js');
  const result = await runSeed(seed, options);
  const failed = failedRun(result);
  if (asJson) process.stdout.write(json({ plan: planRun(seed, options), ...result }) + '\n');
  else {
    process.stdout.write(
      `run seed ${seed}: ${result.events} events, ${Math.round(result.virtualMs)} virtual ms, digest ${result.digest}\n`,
    );
    for (const line of result.violations) process.stdout.write(`violation: ${line}\n`);
    for (const line of result.livenessFailures) process.stdout.write(`liveness: ${line}\n`);
    if (failed || options.traceLength > 0)
      process.stdout.write(`trace (last ${result.trace.length} events):\n${result.trace.join('\n')}\n`);
  }
  return failed === (options.mutation !== undefined) ? 0 : 1;
}

async function sweepCommand(
  seed: number,
  runs: number,
  workers: number,
  options: Options,
  asJson: boolean,
): Promise<number> {
  const { sweep } = await import('../simulation/run.js');
  const { shrink } = await import('../simulation/shrink.js');
  const { planRun } = await import('../simulation/scenario.js');
  const mutating = options.mutation !== undefined;
  if (!asJson)
    process.stderr.write(
      `quorumfence-dev simulate: seed ${seed}, ${runs} runs, crypto ${options.crypto}, ${workers} worker(s)` +
        `${mutating ? `, mutation ${options.mutation}` : ''}, link order ${options.linkOrder}\n`,
    );
  const started = performance.now();
  const summary = await sweep(seed, runs, {
    ...options,
    traceLength: 0,
    workers,
    ...(mutating ? { stopAfterFailures: 1 } : {}),
  });
  const elapsedMs = performance.now() - started;
  // The first failing run is shrunk and shown with its trace (the others are listed by seed).
  const first = summary.failed[0];
  const shrunk = first && options.shrink ? await shrink(planRun(first.seed, options), first, options) : undefined;
  const report = {
    seed,
    runs: summary.runs,
    violations: summary.violations,
    livenessFailures: summary.livenessFailures,
    digest: summary.digest,
    crypto: options.crypto,
    linkOrder: options.linkOrder,
    overtaken: summary.overtaken,
    ...(mutating ? { mutation: options.mutation, caught: first !== undefined, caughtAtRun: first?.index ?? null } : {}),
    failedRuns: summary.failed.map((run) => ({
      index: run.index,
      seed: run.seed,
      violations: run.violations,
      livenessFailures: run.livenessFailures,
    })),
    ...(shrunk
      ? { shrunk: { seed: shrunk.plan.seed, reruns: shrunk.reruns, plan: shrunk.plan, trace: shrunk.result.trace } }
      : {}),
    events: summary.events,
    elapsedMs: Math.round(elapsedMs),
    scenariosPerMinute: Math.round((summary.runs / elapsedMs) * 60_000),
  };
  if (asJson) process.stdout.write(json(report) + '\n');
  else printReport(report, shrunk);
  return mutating ? (first ? 0 : 1) : summary.failed.length === 0 ? 0 : 1;
}

function printReport(
  report: {
    runs: number;
    violations: number;
    livenessFailures: number;
    linkOrder: 'fifo' | 'any';
    overtaken: number;
    digest: string;
    elapsedMs: number;
    scenariosPerMinute: number;
    failedRuns: { index: number; seed: number; violations: readonly string[]; livenessFailures: readonly string[] }[];
  },
  shrunk: { plan: unknown; result: { trace: readonly string[] } } | undefined,
): void {
  process.stdout.write(
    `${report.runs} runs, ${report.violations} violations, ${report.livenessFailures} liveness failures, ` +
      (report.linkOrder === 'any' ? `${report.overtaken} messages overtook another on their link, ` : '') +
      `${report.elapsedMs} ms (${report.scenariosPerMinute} scenarios a minute)\ndigest ${report.digest}\n`,
  );
  for (const run of report.failedRuns) {
    process.stdout.write(`run ${run.index} failed (replay: quorumfence-dev simulate --replay ${run.seed}):\n`);
    for (const line of [...run.violations, ...run.livenessFailures]) process.stdout.write(`  ${line}\n`);
  }
  if (shrunk)
    process.stdout.write(
      `shrunk plan:\n${json(shrunk.plan)}\ntrace of the shrunk run:\n${shrunk.result.trace.join('\n')}\n`,
    );
}
