/**
 * Twins (Bano et al., "Twins: BFT Systems Made Robust"): a Byzantine
 * replica made of two copies of the *unmodified* replica, with the same key
 * share and separate signing records, each seen by a different set of
 * clients. Each copy is honest on its own; together they sign two holders for
 * one (resource, epoch), so equivocation arises from honest code, and the
 * scenarios explore which clients see which copy and when that changes.
 *
 * Cost model: processes are started once (`TwinsCluster`: copy A of every
 * replica, copy B of every replica that may be twinned, each with its own data
 * directory), and every scenario gets fresh resource names and its own
 * routing: a client is a real `QuorumFenceClient` whose cluster description
 * points each replica index at copy A, copy B, or nowhere (a partition), via
 * `withEndpoints`. Scenarios are therefore independent yet run on real
 * processes and sockets, and a thousand of them take seconds.
 *
 * A scenario with at most f twinned replicas must never yield two tokens for
 * one (resource, epoch); with f+1 it can, and the history checker must say so.
 */
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { withEndpoints, type Cluster } from '../cluster/description.js';
import { startLocalCluster, type LocalCluster, type StartLocalClusterOptions } from '../cluster/launcher.js';
import { QuorumFenceClient, generateIdentity, type ClientConstructionOptions, type Identity } from '../client/index.js';
import { QuorumFenceError } from '../common/errors.js';
import { seededRandom, type SeededRandom } from './seeded-random.js';

/** Which process a client reaches for one replica index. */
export type TwinCopy = 'A' | 'B' | 'cut';

export interface TwinsOp {
  readonly client: number;
  /** Index into the scenario's resources. */
  readonly resource: number;
  /** Delay from the start of the phase. */
  readonly startMs: number;
  readonly ttlMs: number;
  readonly waitMs: number;
  /** Release after holdMs, or let the lease run out (no renewal either way). */
  readonly release: boolean;
  readonly holdMs: number;
}

export interface TwinsPhase {
  /** routes[client][index - 1]: the copy that client reaches for that replica in this phase. */
  readonly routes: readonly (readonly TwinCopy[])[];
  readonly ops: readonly TwinsOp[];
  /** Quiet time after the phase's operations, before the next phase's routing applies. */
  readonly pauseAfterMs: number;
}

export interface TwinsScenario {
  readonly id: number;
  readonly n: number;
  readonly f: number;
  /** Replica indices run as two copies in this scenario. */
  readonly twinned: readonly number[];
  readonly clients: number;
  readonly resources: number;
  readonly phases: readonly TwinsPhase[];
}

export interface TwinsGeneratorOptions {
  readonly n: number;
  /** How many replicas are twinned in each scenario (f keeps S1; f+1 breaks it). */
  readonly twins: number;
  /** Only these indices may be twinned (default all): they need a copy B process. */
  readonly twinnable?: readonly number[];
  readonly maxClients?: number;
  readonly maxResources?: number;
  readonly maxPhases?: number;
  /** Chance that a client is partitioned from a given replica in a phase. */
  readonly cutRate?: number;
  /** Lease lengths drawn from this range (ms); the replicas' min ttl must allow its low end. */
  readonly ttlMs?: readonly [number, number];
}

/** Defaults sized so a scenario lasts well under a second on loopback. */
export const DEFAULT_TWINS_GENERATOR = {
  maxClients: 3,
  maxResources: 2,
  maxPhases: 3,
  cutRate: 0.15,
  ttlMs: [100, 300] as const,
};

/** One scenario, drawn from `random`. Pure. */
export function generateTwinsScenario(random: SeededRandom, id: number, options: TwinsGeneratorOptions): TwinsScenario {
  const { n } = options;
  const f = (n - 1) / 3;
  const maxClients = options.maxClients ?? DEFAULT_TWINS_GENERATOR.maxClients;
  const maxResources = options.maxResources ?? DEFAULT_TWINS_GENERATOR.maxResources;
  const maxPhases = options.maxPhases ?? DEFAULT_TWINS_GENERATOR.maxPhases;
  const cutRate = options.cutRate ?? DEFAULT_TWINS_GENERATOR.cutRate;
  const [ttlLow, ttlHigh] = options.ttlMs ?? DEFAULT_TWINS_GENERATOR.ttlMs;
  const twinnable = options.twinnable ?? Array.from({ length: n }, (_, k) => k + 1);
  if (!Number.isInteger(f) || f < 1)
    throw new QuorumFenceError('INVALID_ARGUMENT', `"n" expected 3f+1 with f >= 1, got ${n}`, { field: 'n' });
  if (options.twins < 0 || options.twins > twinnable.length) {
    throw new QuorumFenceError('INVALID_ARGUMENT', `"twins" expected 0..${twinnable.length}, got ${options.twins}`, {
      field: 'twins',
    });
  }
  const twinned = random
    .shuffle(twinnable)
    .slice(0, options.twins)
    .sort((a, b) => a - b);
  const clients = random.int(2, Math.max(2, maxClients));
  const resources = random.int(1, maxResources);
  const phases: TwinsPhase[] = [];
  for (let p = random.int(1, maxPhases); p > 0; p--) {
    const routes = Array.from({ length: clients }, () =>
      Array.from({ length: n }, (_, k): TwinCopy => {
        if (random.chance(cutRate)) return 'cut';
        return twinned.includes(k + 1) && random.chance(0.5) ? 'B' : 'A';
      }),
    );
    // Most clients act in most phases, mostly on the first resource: contention is where equivocation pays.
    const ops: TwinsOp[] = [];
    for (let c = 0; c < clients; c++) {
      if (!random.chance(0.7)) continue;
      const release = random.chance(0.5);
      ops.push({
        client: c,
        resource: random.chance(0.75) ? 0 : random.int(0, resources - 1),
        startMs: random.int(0, 20),
        ttlMs: random.int(ttlLow, ttlHigh),
        waitMs: random.chance(0.5) ? 0 : random.int(20, 150),
        release,
        holdMs: release ? random.int(0, 30) : 0,
      });
    }
    phases.push({ routes, ops, pauseAfterMs: random.chance(0.5) ? 0 : random.int(20, ttlHigh) });
  }
  return { id, n, f, twinned, clients, resources, phases };
}

/** `count` scenarios from one seed: the same seed gives the same sweep. */
export function generateTwinsScenarios(seed: number, count: number, options: TwinsGeneratorOptions): TwinsScenario[] {
  const random = seededRandom(seed);
  return Array.from({ length: count }, (_, id) => generateTwinsScenario(random, id, options));
}

export interface TwinsClusterOptions {
  /** Folder with cluster.json and replica-<i>.key. */
  readonly dir: string;
  /** Copy A of replica i keeps its record in dataRoot/A/replica-<i>, copy B in dataRoot/B/replica-<i>. */
  readonly dataRoot: string;
  /** Indices that get a copy B (default all). */
  readonly twinnable?: readonly number[];
  /** Passed to every replica process. */
  readonly extraArgs?: StartLocalClusterOptions['extraArgs'];
  readonly entry?: string;
}

/** Long-lived replica processes for many Twins scenarios: copy A of each replica, copy B of each twinnable one. */
export class TwinsCluster {
  readonly cluster: Cluster;
  readonly a: LocalCluster;
  readonly b: LocalCluster;
  readonly #cut: Server;
  readonly #cutEndpoint: string;

  private constructor(a: LocalCluster, b: LocalCluster, cut: Server, cutEndpoint: string) {
    this.a = a;
    this.b = b;
    this.cluster = a.cluster;
    this.#cut = cut;
    this.#cutEndpoint = cutEndpoint;
  }

  /** @throws whatever startLocalCluster throws (both copies are stopped first) */
  static async start(options: TwinsClusterOptions): Promise<TwinsCluster> {
    const common = { dir: options.dir, extraArgs: options.extraArgs, entry: options.entry };
    // A partition, as a client sees it: the connection is accepted and dies at once.
    const cut = createServer((socket) => socket.destroy());
    await new Promise<void>((resolve) => cut.listen(0, '127.0.0.1', resolve));
    const address = cut.address();
    const cutEndpoint = `ws://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
    const [a, b] = await Promise.allSettled([
      startLocalCluster({ newStores: true, ...common, dataRoot: join(options.dataRoot, 'A') }),
      startLocalCluster({
        newStores: true,
        ...common,
        dataRoot: join(options.dataRoot, 'B'),
        ...(options.twinnable ? { indices: options.twinnable } : {}),
      }),
    ]);
    if (a.status === 'rejected' || b.status === 'rejected') {
      if (a.status === 'fulfilled') await a.value.close();
      if (b.status === 'fulfilled') await b.value.close();
      cut.close();
      throw a.status === 'rejected' ? a.reason : (b as PromiseRejectedResult).reason;
    }
    return new TwinsCluster(a.value, b.value, cut, cutEndpoint);
  }

  /** The cluster description a client with this routing uses. */
  clusterFor(routes: readonly TwinCopy[]): Cluster {
    return withEndpoints(
      this.cluster,
      routes.map((copy, k) => {
        if (copy === 'cut') return this.#cutEndpoint;
        if (copy === 'B') return this.b.replica(k + 1).url;
        return this.a.replica(k + 1).url;
      }),
    );
  }

  async close(): Promise<void> {
    await Promise.all([this.a.close(), this.b.close()]);
    await new Promise<void>((resolve) => this.#cut.close(() => resolve()));
  }
}

/** A token a scenario's client obtained. */
export interface CapturedGrant {
  readonly scenario: number;
  readonly resource: string;
  readonly epoch: bigint;
  readonly holderHex: string;
  readonly token: string;
}

export interface TwinsScenarioResult {
  readonly scenario: number;
  readonly grants: readonly CapturedGrant[];
  readonly attempts: number;
  /** Acquire refusals by reason (busy, timeout, unavailable, ...). */
  readonly refused: Readonly<Record<string, number>>;
}

export interface TwinsRunnerOptions {
  /** Prefix of every resource name, so runs against long-lived replicas never share a resource. */
  readonly runTag: string;
  /** Client options for every pooled client (short timeouts keep scenarios short). */
  readonly clientOptions?: ClientConstructionOptions;
  /** Called with every token as it is obtained (e.g. to write through a guard). */
  readonly onGrant?: (grant: CapturedGrant) => Promise<void> | void;
}

/**
 * Client timings for scenarios: a partitioned replica or a busy resource
 * should cost a scenario a few hundred milliseconds, not the SDK's defaults.
 */
export const TWINS_CLIENT_OPTIONS: ClientConstructionOptions = {
  handshakeTimeoutMs: 1000,
  acquireTimeoutMs: 1000,
  requestTimeoutMs: 500,
  reconnectBaseMs: 50,
  reconnectMaxMs: 1000,
};

/**
 * Runs scenarios against a TwinsCluster with a pool of real clients, one per
 * (identity, routing), created on first use and kept for later scenarios.
 */
export class TwinsRunner {
  readonly #twins: TwinsCluster;
  readonly #options: TwinsRunnerOptions;
  readonly #identities: Identity[] = [];
  readonly #clients = new Map<string, Promise<QuorumFenceClient>>();

  constructor(twins: TwinsCluster, options: TwinsRunnerOptions) {
    this.#twins = twins;
    this.#options = options;
  }

  /** Distinct clients created so far. */
  get pooledClients(): number {
    return this.#clients.size;
  }

  #client(identityIndex: number, routes: readonly TwinCopy[]): Promise<QuorumFenceClient> {
    while (this.#identities.length <= identityIndex) this.#identities.push(generateIdentity());
    const key = `${identityIndex}|${routes.join(',')}`;
    let client = this.#clients.get(key);
    if (!client) {
      client = QuorumFenceClient.connect(this.#twins.clusterFor(routes), this.#identities[identityIndex]!, {
        ...TWINS_CLIENT_OPTIONS,
        ...this.#options.clientOptions,
      });
      this.#clients.set(key, client);
    }
    return client;
  }

  /**
   * Connects every client the scenarios will use, `concurrency` at a time, and
   * waits (up to `timeoutMs`) until each has every replica it can reach ready.
   * Creating hundreds of clients at once on a small machine makes handshakes
   * miss their deadline and back off, and scenarios would then measure that.
   */
  async prepare(scenarios: readonly TwinsScenario[], concurrency = 8, timeoutMs = 30_000): Promise<void> {
    const wanted = new Map<string, { identity: number; routes: readonly TwinCopy[] }>();
    for (const scenario of scenarios) {
      for (const phase of scenario.phases) {
        for (const op of phase.ops)
          wanted.set(`${op.client}|${phase.routes[op.client]!.join(',')}`, {
            identity: op.client,
            routes: phase.routes[op.client]!,
          });
      }
    }
    const queue = [...wanted.values()];
    const deadline = performance.now() + timeoutMs;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        for (let item = queue.shift(); item; item = queue.shift()) {
          const client = await this.#client(item.identity, item.routes);
          const reachable = item.routes.filter((copy) => copy !== 'cut').length;
          while (
            client.replicas().filter((r) => r.state.phase === 'ready').length < reachable &&
            performance.now() < deadline
          )
            await sleep(10);
        }
      }),
    );
  }

  resourceName(scenario: TwinsScenario, resource: number): string {
    return `${this.#options.runTag}/${scenario.id}/${resource}`;
  }

  async run(scenario: TwinsScenario): Promise<TwinsScenarioResult> {
    const grants: CapturedGrant[] = [];
    const refused: Record<string, number> = {};
    let attempts = 0;
    for (const phase of scenario.phases) {
      await Promise.all(
        phase.ops.map(async (op) => {
          const client = await this.#client(op.client, phase.routes[op.client]!);
          await sleep(op.startMs);
          attempts++;
          const resource = this.resourceName(scenario, op.resource);
          const result = await client.acquire(resource, { ttlMs: op.ttlMs, waitMs: op.waitMs, autoRenew: false });
          if (!result.ok) {
            refused[result.reason] = (refused[result.reason] ?? 0) + 1;
            return;
          }
          const grant = {
            scenario: scenario.id,
            resource,
            epoch: result.lease.epoch,
            holderHex: result.lease.holderHex,
            token: result.lease.tokenText,
          };
          grants.push(grant);
          await this.#options.onGrant?.(grant);
          if (op.release) {
            await sleep(op.holdMs);
            await result.lease.release();
          }
        }),
      );
      await sleep(phase.pauseAfterMs);
    }
    return { scenario: scenario.id, grants, attempts, refused };
  }

  /** Runs every scenario, `concurrency` at a time (they share no resource, so they are independent). */
  async sweep(
    scenarios: readonly TwinsScenario[],
    concurrency = 16,
    onResult?: (result: TwinsScenarioResult) => void,
  ): Promise<TwinsScenarioResult[]> {
    const results: TwinsScenarioResult[] = new Array(scenarios.length);
    let next = 0;
    await Promise.all(
      Array.from({ length: Math.max(1, concurrency) }, async () => {
        while (next < scenarios.length) {
          const k = next++;
          results[k] = await this.run(scenarios[k]!);
          onResult?.(results[k]!);
        }
      }),
    );
    return results;
  }

  /** Closes every pooled client. */
  async close(): Promise<void> {
    const clients = await Promise.allSettled([...this.#clients.values()]);
    await Promise.all(clients.map(async (c) => (c.status === 'fulfilled' ? c.value.close() : undefined)));
    this.#clients.clear();
  }
}

function sleep(ms: number): Promise<void> {
  return ms > 0 ? new Promise((resolve) => setTimeout(resolve, ms)) : Promise.resolve();
}
