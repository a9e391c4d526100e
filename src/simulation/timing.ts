/**
 * Timing scenarios (docs/testing.md, "Timing"): how many round trips the protocol's fast paths cost, measured
 * exactly on virtual time and checked against the bound the protocol promises (docs/protocol.md). Each is one
 * fixed plan: no fault, no Byzantine replica, every link the same fixed one-way delay plus a small jitter, each
 * link keeping its order as TCP does; disks flush in 0.3 to 3 ms as in every run. A handoff or an acquire that
 * should cost one round trip may take at most two one-way trips at their longest plus one flush at its longest.
 *
 * - hot line: clients that acquire one resource and release it at once, again and again, in the leader's line;
 *   once the line has formed, each handoff (the holder's release sent, to the next holder's token) costs the
 *   release's one-way trip plus the partials' one-way trip: the next holder's requests already wait at every one
 *   of its signers (docs/protocol.md, "Lines (hot handoffs)").
 * - one client: an acquire + release cycle costs one round trip (the release does not wait for its answers).
 * - first acquire: a client acquires resources nobody has used while the replicas' floors differ; each acquire
 *   costs one round trip and the t requests of the first signers (docs/protocol.md, "Epoch choice").
 * - gray faults: the hot line and the one client again with the resource's hash leader far slower than the rest
 *   (50 ms more each way), or hung (its connections open, nothing answered) from a moment on: once the clients have
 *   seen it (measured from 1 s into the run, or 1 s after the hang), each fast path still costs one round trip,
 *   since any t replicas suffice (docs/protocol.md, "Slow replicas"); and the hot line with the leader's every
 *   flush 50 ms slower (its pongs and pushes on time).
 */
import { RUN_LIMITS, type Plan } from './scenario.js';
import type { ClientOp } from './client-node.js';
import type { MutationEffects } from './mutations.js';
import type { NetworkConditions } from './network.js';
import { leaderOf } from '../client/signer-choice.js';
import { World } from './world.js';

/** One way, ms: a link across zones. */
const ONE_WAY_MS = 10;
/** Plus up to this much per message (order kept per link). */
const JITTER_MS = 1;
/** The longest disk flush of a run (world.ts, DISK_TIMING). */
const FLUSH_MAX_MS = 3;
/** Rounding of the nodes' drifting clocks (±0.2 %) over a handoff. */
const SLACK_MS = 1;
/** The bound of one round trip: two one-way trips at their longest, a flush at its longest. */
export const ONE_ROUND_TRIP_BOUND_MS = 2 * (ONE_WAY_MS + JITTER_MS) + FLUSH_MAX_MS + SLACK_MS;
/** What the figures are reported in: one round trip without jitter. */
const ROUND_TRIP_MS = 2 * ONE_WAY_MS;
/** Clients start once their connections' handshakes (one round trip) are done. */
const START_MS = 100;
const NETWORK: NetworkConditions = { baseDelayMs: ONE_WAY_MS, jitterMs: JITTER_MS, loss: 0 };
/** Far beyond the end of any timing run: no heal (which would calm the network). */
const NO_HEAL_MS = 50_000;

export interface TimingResult {
  readonly name: string;
  readonly n: number;
  readonly clients: number;
  /** What each sample is. */
  readonly measures: string;
  readonly samples: number;
  /** In round trips of ROUND_TRIP_MS (two one-way trips without jitter). */
  readonly medianRoundTrips: number;
  readonly maxRoundTrips: number;
  readonly boundRoundTrips: number;
  readonly failures: readonly string[];
}

interface Scenario {
  readonly name: string;
  readonly measures: string;
  readonly plan: Plan;
  /** The samples (ms) and anything that went wrong besides a sample over the bound. */
  readonly measure: (world: World) => { samples: number[]; failures: string[] };
}

function op(resource: string, first: boolean, holdMs = 0): ClientOp {
  return {
    resource,
    ttlMs: 1_500,
    waitMs: 10_000,
    holdMs,
    writes: 0,
    delayMs: first ? START_MS : 0,
    judged: false,
    startAt: 0,
  };
}

/** A gray fault on the resource's hash leader (docs/protocol.md, "Slow replicas"). */
interface Gray {
  /** Extra one-way ms on each of its links. */
  readonly slowMs?: number;
  /** It hangs from then on (virtual ms). */
  readonly hangAt?: number;
  /**
   * It is Byzantine and answers late from then on (virtual ms): every reply leaves LIE_PARAMS' slowMs after the
   * real replica's (world.ts), while its pushes (`turn`, `released`) and pongs leave at once, so nothing but its
   * answers' time shows it. Honest before, so the clients first measured it fast (the gray bench's order).
   */
  readonly lateFrom?: number;
  /** Extra ms on every flush of its disk, from the start: its pongs and pushes on time, its grants late. */
  readonly slowDiskMs?: number;
}

/** Far slower than the rest: five times a one-way trip more, each way (the issue's 50 ms on a network of 2 ms). */
const SLOW_MS = 5 * ONE_WAY_MS;
/** The hang starts once every client has held the resource a few times. */
const HANG_AT_MS = 600;
/** Gray samples count from here: the clients have seen the slow or hung replica by then (a ping or two). */
const SEEN_AFTER_MS = 1_000;

function plan(seed: number, n: number, ops: ClientOp[][], floors?: bigint[], gray: Gray = {}): Plan {
  const resources = [...new Set(ops.flat().map((o) => o.resource))];
  const leader = `r${leaderOf(resources[0]!, n)}`;
  return {
    seed,
    n,
    clients: ops.length,
    resources,
    byzantine:
      gray.lateFrom === undefined
        ? []
        : [{ replica: leaderOf(resources[0]!, n), behaviours: ['slow'], from: gray.lateFrom }],
    faults: gray.hangAt === undefined ? [] : [{ at: gray.hangAt, kind: 'hang', replica: leaderOf(resources[0]!, n) }],
    ops,
    healAt: NO_HEAL_MS,
    network: gray.slowMs === undefined ? NETWORK : { ...NETWORK, slowNodes: { [leader]: gray.slowMs } },
    ...(floors ? { floors } : {}),
    ...(gray.slowDiskMs === undefined ? {} : { slowDisks: { [leaderOf(resources[0]!, n)]: gray.slowDiskMs } }),
  };
}

/** When a gray scenario's samples start to count: a second after its fault is in place (0: no fault). */
function seenFrom(gray: Gray): number {
  if (Object.values(gray).every((value) => value === undefined)) return 0;
  return (gray.hangAt ?? gray.lateFrom ?? 0) + SEEN_AFTER_MS;
}

function grayName(gray: Gray): string {
  if (gray.slowMs !== undefined) return `, leader ${gray.slowMs} ms slower each way`;
  if (gray.hangAt !== undefined) return ', leader hung';
  if (gray.lateFrom !== undefined) return ', leader Byzantine, answering late';
  if (gray.slowDiskMs !== undefined) return `, leader's flushes ${gray.slowDiskMs} ms slower`;
  return '';
}

/** Every operation ended with its lease (a timing run has no fault to excuse a refusal). */
function refusals(world: World): string[] {
  return world.clients.flatMap((client) =>
    client.outcomes.filter((o) => !o.ok).map((o) => `${client.address}: ${o.op.resource} ${o.reason}`),
  );
}

/**
 * Clients on one hot resource, each releasing the moment it holds it and asking again at once; handoffs from the
 * time every client could have held it twice (the line has formed: each has found it busy and gone to the line).
 */
function hotLine(seed: number, n: number, clients: number, cycles: number, holdMs: number, gray: Gray = {}): Scenario {
  const ops = Array.from({ length: clients }, () =>
    Array.from({ length: cycles }, (_, k) => op('hot', k === 0, holdMs)),
  );
  const from = seenFrom(gray);
  return {
    name: `hot line, N = ${n}, ${clients} clients${holdMs ? `, holding ${holdMs} ms` : ''}${grayName(gray)}`,
    measures: "handoff: the holder's release sent, to the next holder's token",
    plan: plan(seed, n, ops, undefined, gray),
    measure: (world) => {
      const grants = world.clients
        .flatMap((client) => client.outcomes.filter((o) => o.ok).map((o) => ({ client, ...o })))
        .sort((a, b) => a.acquiredAt - b.acquiredAt);
      const samples: number[] = [];
      // A grant to the holder again is no handoff: nobody else waited (the others had finished).
      for (let k = 2 * clients + 1; k < grants.length; k++)
        if (grants[k]!.client !== grants[k - 1]!.client && grants[k - 1]!.endedAt >= from)
          samples.push(grants[k]!.acquiredAt - grants[k - 1]!.endedAt);
      return { samples, failures: refusals(world) };
    },
  };
}

/** One client: acquire + release cycles on one resource, each from its start to the next one's. */
function oneClient(seed: number, cycles: number, gray: Gray = {}): Scenario {
  const from = seenFrom(gray);
  return {
    name: `one client, N = 4${grayName(gray)}`,
    measures: 'acquire + release cycle',
    plan: plan(seed, 4, [Array.from({ length: cycles }, (_, k) => op('solo', k === 0))], undefined, gray),
    measure: (world) => {
      const outcomes = world.clients[0]!.outcomes;
      const samples = outcomes
        .slice(1)
        .flatMap((o, k) => (outcomes[k]!.startedAt >= from ? [o.startedAt - outcomes[k]!.startedAt] : []));
      return { samples, failures: refusals(world) };
    },
  };
}

/** One client acquires resources nobody used, while the replicas' floors differ. */
function firstAcquire(seed: number, n: number, floors: bigint[], resources: number): Scenario {
  const ops = [Array.from({ length: resources }, (_, k) => op(`new/${k}`, k === 0))];
  return {
    name: `first acquire, N = ${n}, floors ${floors.join(', ')}`,
    measures: 'acquire of a resource nobody used',
    plan: plan(seed, n, ops, floors),
    measure: (world) => {
      const outcomes = world.clients[0]!.outcomes;
      const failures = refusals(world);
      const t = (2 * (n - 1)) / 3 + 1;
      // The client's first acquire of all is not counted: with no grant latency measured yet, its wait for the
      // first signers is stragglerMinMs, shorter than a round trip here, so it asks the others too (signer-choice.ts).
      for (const o of outcomes.slice(1)) {
        const asked = world.acquiresAnswered.get(o.op.resource) ?? 0;
        if (asked !== t)
          failures.push(`${o.op.resource}: ${asked} acquire requests answered, expected the t = ${t} first signers`);
      }
      return { samples: outcomes.map((o) => o.acquiredAt - o.startedAt), failures };
    },
  };
}

/** The scenarios, in the order they are run and printed. */
export function timingScenarios(): Scenario[] {
  return [
    hotLine(31_001, 4, 2, 10, 0),
    hotLine(31_002, 4, 3, 8, 0),
    hotLine(31_003, 4, 6, 6, 0),
    hotLine(31_004, 7, 4, 6, 0),
    hotLine(31_005, 4, 3, 6, ROUND_TRIP_MS),
    oneClient(31_006, 10),
    firstAcquire(31_007, 4, [3n * RUN_LIMITS.freeEpochStep, 5n, 0n, 2n * RUN_LIMITS.freeEpochStep], 6),
    firstAcquire(31_008, 7, [40n, 0n, 90n, 12n, 12n, 0n, 64n], 6),
    hotLine(31_009, 4, 3, 40, 0, { slowMs: SLOW_MS }),
    oneClient(31_010, 60, { slowMs: SLOW_MS }),
    hotLine(31_011, 4, 3, 50, 0, { hangAt: HANG_AT_MS }),
    oneClient(31_012, 80, { hangAt: HANG_AT_MS }),
    hotLine(31_013, 4, 3, 200, 0, { lateFrom: HANG_AT_MS }),
    oneClient(31_014, 300, { lateFrom: HANG_AT_MS }),
    hotLine(31_015, 4, 3, 60, 0, { slowDiskMs: SLOW_MS }),
  ];
}

/** Runs every timing scenario (with a planted bug, if any) and checks each sample against the bound. */
export async function runTiming(mutation: MutationEffects = {}): Promise<TimingResult[]> {
  const results: TimingResult[] = [];
  for (const scenario of timingScenarios()) {
    const world = new World(scenario.plan, { crypto: 'sim', mutation, traceLength: 0 });
    await world.run(NO_HEAL_MS, 2_000_000);
    for (const client of world.clients) client.close();
    const { samples, failures } = scenario.measure(world);
    if (!world.finished) failures.push('the run did not finish within its limits');
    for (const client of world.clients)
      for (const error of client.errors) failures.push(`${client.address} threw: ${error}`);
    const sorted = [...samples].sort((a, b) => a - b);
    const over = samples.filter((ms) => ms > ONE_ROUND_TRIP_BOUND_MS);
    if (over.length > 0)
      failures.push(
        `${over.length} of ${samples.length} over ${ONE_ROUND_TRIP_BOUND_MS} ms: ${over.map((ms) => ms.toFixed(1)).join(', ')} ms`,
      );
    if (samples.length === 0) failures.push('nothing to measure');
    results.push({
      name: scenario.name,
      n: scenario.plan.n,
      clients: scenario.plan.clients,
      measures: scenario.measures,
      samples: samples.length,
      medianRoundTrips: (sorted[Math.floor(sorted.length / 2)] ?? NaN) / ROUND_TRIP_MS,
      maxRoundTrips: (sorted.at(-1) ?? NaN) / ROUND_TRIP_MS,
      boundRoundTrips: ONE_ROUND_TRIP_BOUND_MS / ROUND_TRIP_MS,
      failures,
    });
  }
  return results;
}
