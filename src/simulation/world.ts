/**
 * One simulated run's world, built from its plan (scenario.ts): N replicas on their disks, the clients, the guard,
 * the malicious client, the network, and the plan's faults as events; one seeded stream per purpose, so that a
 * run is the same every time its seed is run. `run` drives it to the end: the clients' operations done and a
 * quiet period after them (for the bounded-state check), or the run's limit.
 */
import { toHex } from '../common/bytes.js';
import { mayAccess, type AccessRules } from '../replica/access.js';
import { replicaLimits } from '../replica/options.js';
import { byzantineParams } from '../testing/byzantine/behaviours.js';
import { seededRandom } from '../testing/seeded-random.js';
import { SimClient } from './client-node.js';
import { dealRunKeys, type CryptoMode, type SimKeys } from './crypto.js';
import { SimDisk } from './disk.js';
import { SimGuard } from './guard-node.js';
import { MaliciousClient, victimOf } from './malicious.js';
import type { MutationEffects } from './mutations.js';
import { CALM, SimNetwork } from './network.js';
import { SimReplica } from './replica-node.js';
import { reshare, type Reshare } from './reshare.js';
import { RUN_CLIENT_OPTIONS, RUN_LIMITS, type Fault, type Plan } from './scenario.js';
import { Scheduler } from './scheduler.js';
import { LineLog } from './line-log.js';
import { LeaseLedger } from './lease-ledger.js';

export interface WorldOptions {
  readonly crypto: CryptoMode;
  readonly mutation: MutationEffects;
  /** Events kept for the trace (0: none). */
  readonly traceLength: number;
}

/** The virtual wall clock's origin (records are stamped with it; only differences matter). */
const WALL_ORIGIN = 1_800_000_000_000;
/** After the last operation, this long passes before the bounded-state check: every lease has ended by then. */
const QUIET_MS = RUN_LIMITS.maxTtlMs + 500;
/** Disk flushes take 0.3 to 3 ms: an fsync on a busy SSD. */
const DISK_TIMING = { flushMinMs: 0.3, flushMaxMs: 3 };

/** Replica `index`'s disk: DISK_TIMING, its flushes slower by what the plan says (slowDisks). */
function diskTiming(plan: Plan, index: number): typeof DISK_TIMING {
  const slower = plan.slowDisks?.[index] ?? 0;
  return { flushMinMs: DISK_TIMING.flushMinMs + slower, flushMaxMs: DISK_TIMING.flushMaxMs + slower };
}
/** Lies that are slow but not dead, floods that are a flood for a client yet cheap to simulate. */
const LIE_PARAMS = byzantineParams({ slowMs: 120, floodCount: 6 });

/** A stream of its own for each purpose, from the run's seed. */
export function subSeed(seed: number, purpose: number): number {
  return (Math.imul(seed ^ 0x5bd1e995, 0x9e3779b1) + Math.imul(purpose + 1, 0x85ebca6b)) >>> 0;
}

export class World {
  readonly plan: Plan;
  readonly scheduler: Scheduler;
  readonly network: SimNetwork;
  readonly guard: SimGuard;
  readonly clients: SimClient[];
  readonly lines = new LineLog();
  readonly leases: LeaseLedger;
  /** Acquire requests the replicas answered, per resource (the timing scenarios count a first acquire's). */
  readonly acquiresAnswered = new Map<string, number>();
  readonly failures: string[] = [];
  readonly reshares: Reshare[] = [];
  readonly limits = replicaLimits(RUN_LIMITS);
  readonly options: WorldOptions;
  keys: SimKeys;
  replicas: SimReplica[];
  /** Every replica of the run, of every share generation (a reshare retires the old ones). */
  readonly allReplicas: SimReplica[] = [];
  generation = 0;
  healed = false;
  /** What replicas answered on the malicious client's connections whose hello did not verify (malicious.ts). */
  get forgedHellos(): MaliciousClient['forgedAnswers'] {
    return this.#malicious.forgedAnswers;
  }

  /** What the malicious client's probes expected of each replica, and what it answered (malicious.ts). */
  get probes(): MaliciousClient['expectations'] {
    return this.#malicious.expectations;
  }
  /** Set once every client finished and the quiet period passed. */
  finished = false;
  readonly #malicious: MaliciousClient;
  /** The replicas' access rules (docs/protocol.md, step 2). */
  readonly access: AccessRules;
  #resharing = false;
  /** A power loss armed to strike at the next flush. */
  #flushTrap:
    { readonly after: number; flushes: number; readonly afterMs: number; readonly downMs: number } | undefined;

  constructor(plan: Plan, options: WorldOptions) {
    this.plan = plan;
    this.options = options;
    this.scheduler = new Scheduler(options.traceLength);
    const f = (plan.n - 1) / 3;
    this.leases = new LeaseLedger({
      f,
      t: 2 * f + 1,
      byzantine: plan.byzantine.length,
      maxTtlMs: RUN_LIMITS.maxTtlMs,
      freeEpochStep: RUN_LIMITS.freeEpochStep,
      maxEpochStep: RUN_LIMITS.maxEpochStep,
      mayAccess: (holder, resource) => mayAccess(this.access, holder, resource),
    });
    this.network = new SimNetwork(
      this.scheduler,
      seededRandom(subSeed(plan.seed, 1)),
      plan.network ?? CALM,
      plan.linkOrder ?? 'fifo',
    );
    this.keys = dealRunKeys(options.crypto, plan.n, subSeed(plan.seed, 2), (run) => this.#soon('verify', run));
    this.guard = new SimGuard(this.network, this.keys.cluster, options.mutation.fence);
    this.#malicious = new MaliciousClient(this.scheduler, this.network, seededRandom(subSeed(plan.seed, 5)));
    // Every holder may use every resource, but the malicious client not FORBIDDEN_RESOURCE (its probes ask for it).
    this.access = {
      defaultPrefixes: [''],
      holders: new Map([[toHex(this.#malicious.holder), plan.resources]]),
    };
    this.replicas = this.#replicas(this.keys, 0);
    this.allReplicas.push(...this.replicas);
    const threshold = options.mutation.clientThreshold?.(this.keys.cluster.t);
    this.clients = plan.ops.map(
      (_, k) =>
        new SimClient({
          index: k + 1,
          scheduler: this.scheduler,
          network: this.network,
          random: seededRandom(subSeed(plan.seed, 300 + k)),
          cluster: this.keys.cluster,
          rate: driftOf(subSeed(plan.seed, 400 + k)),
          options: RUN_CLIENT_OPTIONS,
          ...(threshold === undefined ? {} : { believedThreshold: threshold }),
          ...(options.mutation.client ? { mutation: options.mutation.client } : {}),
          views: this.leases,
        }),
    );
  }

  /** Runs to the end or to `limitMs` of virtual time / `maxEvents` events. */
  async run(limitMs: number, maxEvents: number): Promise<void> {
    for (const [k, floor] of (this.plan.floors ?? []).entries()) this.replicas[k]?.inherit([], floor);
    for (const replica of this.replicas) replica.start();
    for (const client of this.clients) client.connect(this.keys.cluster, (index) => `r${index}`);
    this.#malicious.connect(
      this.keys.cluster.id,
      this.replicas.map((replica) => ({ index: replica.index, address: replica.address })),
    );
    for (const fault of this.plan.faults)
      this.scheduler.schedule(fault.at, `fault ${fault.kind}`, () => this.#apply(fault));
    this.scheduler.schedule(this.plan.healAt, 'heal', () => this.#heal());
    void Promise.all(this.clients.map((client, k) => client.run(this.plan.ops[k]!))).then(() =>
      this.scheduler.schedule(QUIET_MS, 'quiet', () => (this.finished = true)),
    );
    await this.scheduler.run(limitMs, maxEvents, () => this.finished);
  }

  #replicas(keys: SimKeys, generation: number): SimReplica[] {
    const { plan } = this;
    const byzantine = new Map(plan.byzantine.map((b) => [b.replica, b]));
    const byzantineKeys = plan.byzantine.map((b) => keys.secretKeys[b.replica - 1]!);
    return keys.cluster.replicas.map(({ index }) => {
      const lies = byzantine.get(index);
      const behaviours = lies?.behaviours;
      const otherKey = byzantineKeys.find((key) => key !== keys.secretKeys[index - 1]);
      const address = generation === 0 ? `r${index}` : `r${index}.g${generation}`;
      const ledger = (toVirtual: (local: number) => number) => ({
        address,
        generation,
        honest: !behaviours,
        toVirtual,
      });
      return new SimReplica({
        index,
        address,
        scheduler: this.scheduler,
        network: this.network,
        random: seededRandom(subSeed(plan.seed, 1_000 * generation + 200 + index)),
        cluster: keys.cluster,
        secretKey: keys.secretKeys[index - 1]!,
        limits: this.limits,
        access: this.access,
        disk: new SimDisk(seededRandom(subSeed(plan.seed, 1_000 * generation + 100 + index)), diskTiming(plan, index)),
        rate: driftOf(subSeed(plan.seed, 1_000 * generation + 500 + index)),
        wallClock: () => WALL_ORIGIN + this.scheduler.now,
        ...(behaviours
          ? {
              byzantine: {
                behaviours,
                params: LIE_PARAMS,
                ...(otherKey ? { otherKey } : {}),
                ...(lies.from !== undefined ? { from: lies.from } : {}),
              },
            }
          : {}),
        mutation: this.options.mutation.replica ?? {},
        observer: {
          waiting: (_replica, resource, key, fixedEpoch) => {
            this.scheduler.note(`r${index} may wait ${resource} ${key}`);
            this.lines.waiting(`r${index}.g${generation}`, resource, key, fixedEpoch, this.scheduler.now);
          },
          answered: (_replica, resource, key, outcome, grant) => {
            this.acquiresAnswered.set(resource, (this.acquiresAnswered.get(resource) ?? 0) + 1);
            if (key !== undefined) this.scheduler.note(`r${index} answered ${resource} ${key} ${outcome.status}`);
            this.lines.answered(`r${index}.g${generation}`, resource, key, outcome, grant, this.scheduler.now);
          },
          failed: (replica, message) => this.failures.push(`replica ${replica}: ${message}`),
          started: (at, records, toVirtual) =>
            this.leases.replicaStarted(
              ledger(toVirtual),
              at,
              records.map(({ resource, record }) => ({ resource, epoch: record.epoch, holder: record.holder })),
            ),
          decided: (note, toVirtual) => this.leases.decided(ledger(toVirtual), note),
        },
        onFlushStart: () => this.#flushStarted(),
      });
    });
  }

  #apply(fault: Fault): void {
    switch (fault.kind) {
      case 'partition': {
        const [left, right] = fault.groups;
        this.network.partition(left, right);
        this.scheduler.schedule(fault.forMs, 'partition healed', () => this.network.restore(left, right));
        return;
      }
      case 'crash':
        return this.#crash([this.replicas[fault.replica - 1]!], fault.downMs);
      case 'power-loss':
        return this.#crash(this.replicas, fault.downMs);
      case 'power-loss-on-flush':
        this.#flushTrap = { after: fault.at, flushes: fault.flushes, afterMs: fault.afterMs, downMs: fault.downMs };
        return;
      case 'clock-jump': {
        const replica = this.replicas.find((candidate) => candidate.address === fault.node);
        replica?.clock?.jump(fault.ms);
        if (replica?.up) this.leases.clockJumped(replica.address);
        return;
      }
      case 'conditions':
        this.network.setConditions(fault.conditions);
        this.scheduler.schedule(fault.forMs, 'conditions calm', () => {
          if (!this.healed) this.network.setConditions(CALM);
        });
        return;
      case 'push-ahead':
        if (!this.healed) void this.#malicious.pushAhead(fault.resource, fault.replicas, fault.grants);
        return;
      case 'probe':
        if (!this.healed) void this.#malicious.probe(fault);
        return;
      case 'forge-hello': {
        const victim = this.clients[fault.victim];
        if (!this.healed && victim)
          void this.#malicious.forgeHello(fault.forgery, fault.replica, fault.resource, victimOf(victim));
        return;
      }
      case 'reshare':
        return this.#reshare(fault.records);
      case 'hang':
        return this.network.hang(`r${fault.replica}`);
    }
  }

  #crash(replicas: readonly SimReplica[], downMs: number): void {
    // No crash while a reshare freezes and exports the old set (as the chaos soak does): it would never finish.
    if (this.#resharing) return;
    for (const replica of replicas) replica.crash();
    this.scheduler.schedule(downMs, 'restart', () => {
      for (const replica of replicas) if (!replica.up && this.replicas.includes(replica)) replica.start();
    });
  }

  #flushStarted(): void {
    const trap = this.#flushTrap;
    if (!trap || this.scheduler.now < trap.after || --trap.flushes > 0) return;
    this.#flushTrap = undefined;
    this.scheduler.schedule(trap.afterMs, 'power loss at a flush', () => this.#crash(this.replicas, trap.downMs));
  }

  #heal(): void {
    this.healed = true;
    this.#flushTrap = undefined;
    this.network.heal();
    this.#malicious.stop();
    for (const replica of this.replicas) if (!replica.up) replica.start();
  }

  #reshare(records: number): void {
    if (this.options.crypto !== 'sim' || this.#resharing || this.replicas.some((replica) => !replica.up)) return;
    this.#resharing = true;
    this.generation++;
    const generation = this.generation;
    void reshare(this, generation, records).then((next) => {
      this.#resharing = false;
      if (!next) return;
      for (const replica of this.replicas) replica.crash();
      this.reshares.push(next.reshare);
      this.keys = next.keys;
      this.replicas = this.#replicas(next.keys, generation);
      this.allReplicas.push(...this.replicas);
      next.seed(this.replicas);
      for (const replica of this.replicas) replica.start();
      for (const client of this.clients) client.connect(next.keys.cluster, (index) => `r${index}.g${generation}`);
      this.#malicious.stop(); // its targets are retired
    });
  }

  #soon(label: string, run: () => void): void {
    this.scheduler.schedule(0, label, run);
  }
}

/** A node's clock rate: within ±0.2 % of real time, far inside the 1 % lease margin the protocol relies on. */
function driftOf(seed: number): number {
  return 1 + (seededRandom(seed).next() - 0.5) * 0.004;
}
