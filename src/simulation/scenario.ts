/**
 * A run's plan, drawn from its seed (docs/testing.md): the cluster's size, which replicas are Byzantine and how
 * they lie, the clients and what each does, the network's conditions, the faults and when (partitions, crashes,
 * power losses, a crash at the moment disks flush, clock jumps, a malicious client pushing replicas apart, a
 * reshare), and when everything heals. A plan is plain data: shrinking (shrink.ts) removes parts of it and runs
 * the rest with the same seed.
 *
 * Two phases. Until `healAt` faults come and go and the clients' operations are judged for safety only; from then
 * on the network is calm, every crashed replica has restarted, at most f replicas (the Byzantine ones) are faulty,
 * and each client's last operations must complete within the liveness bound (checks.ts). In most runs one client
 * also holds a lease across the rest of f failing after the heal (drawHeldLease): it must not lose it.
 */
import { BYZANTINE_BEHAVIOURS, type ByzantineBehaviour } from '../testing/byzantine/behaviours.js';
import { seededRandom, type SeededRandom } from '../testing/seeded-random.js';
import type { ClientOp } from './client-node.js';
import type { LinkOrder, NetworkConditions } from './network.js';

export type Fault =
  /** Cuts every link between the two groups of nodes for `forMs`. */
  | {
      readonly at: number;
      readonly kind: 'partition';
      readonly groups: readonly [string[], string[]];
      readonly forMs: number;
    }
  /** Replica `replica` crashes and restarts `downMs` later. */
  | { readonly at: number; readonly kind: 'crash'; readonly replica: number; readonly downMs: number }
  /** Every replica loses power at once and restarts `downMs` later. */
  | { readonly at: number; readonly kind: 'power-loss'; readonly downMs: number }
  /**
   * Every replica loses power `afterMs` after the `flushes`-th disk flush that begins after `at` (a grant round's
   * flushes begin together: its writes are then in flight, some flushed, some not).
   */
  | {
      readonly at: number;
      readonly kind: 'power-loss-on-flush';
      readonly flushes: number;
      readonly afterMs: number;
      readonly downMs: number;
    }
  /** A node's monotonic clock jumps forward. */
  | { readonly at: number; readonly kind: 'clock-jump'; readonly node: string; readonly ms: number }
  /** Worse network conditions for `forMs`. */
  | { readonly at: number; readonly kind: 'conditions'; readonly conditions: NetworkConditions; readonly forMs: number }
  /** The malicious client grants itself epochs ahead at a few replicas alone (docs/protocol.md, "Epoch steps"). */
  | {
      readonly at: number;
      readonly kind: 'push-ahead';
      readonly resource: string;
      readonly replicas: number[];
      readonly grants: number;
    }
  /** The malicious client probes the replica rules (malicious.ts). */
  | Probe
  /**
   * The malicious client opens a connection to replica `replica` with a hello that must not verify (`forgery`,
   * naming client `victim`'s holder key, or replaying a hello of the victim's), and asks it for `resource` there.
   */
  | {
      readonly at: number;
      readonly kind: 'forge-hello';
      readonly forgery: HelloForgery;
      readonly replica: number;
      readonly resource: string;
      readonly victim: number;
    }
  /**
   * A reshare: every old replica frozen, the records of `records` of them inherited (any r from 2f+1 to N: the
   * inherit rule keeps the (r-2f)-th largest report), new shares of the same key.
   */
  | { readonly at: number; readonly kind: 'reshare'; readonly records: number }
  /** Replica `replica` hangs (SIGSTOP: connections open, nothing answered) until the heal. Timing scenarios only. */
  | { readonly at: number; readonly kind: 'hang'; readonly replica: number };

/**
 * A probe of the replica rules by the malicious client (malicious.ts), at `replicas` (the first is asked; a jump
 * uses f climbers, one more, and two laggards).
 */
export interface Probe {
  readonly at: number;
  readonly kind: 'probe';
  readonly probe: 'long-ttl' | 'forbidden' | 'resend-released' | 'beyond-free-step' | 'jump';
  readonly resource: string;
  readonly replicas: readonly number[];
}

/**
 * A hello that must not verify (malicious.ts): signed by the malicious client's own key but naming another client's
 * holder key; another client's hello for another connection's challenge, replayed; a hello with a tampered signature.
 */
export type HelloForgery = 'other-holder' | 'replayed' | 'tampered';

const HELLO_FORGERIES: readonly HelloForgery[] = ['other-holder', 'replayed', 'tampered'];

const PROBES: readonly Probe['probe'][] = ['long-ttl', 'forbidden', 'resend-released', 'beyond-free-step', 'jump'];

export interface Plan {
  readonly seed: number;
  readonly n: number;
  readonly clients: number;
  readonly resources: readonly string[];
  /** The Byzantine replicas: each lies by `behaviours` from virtual ms `from` (default 0: the start), honest before. */
  readonly byzantine: readonly {
    readonly replica: number;
    readonly behaviours: readonly ByzantineBehaviour[];
    readonly from?: number;
  }[];
  readonly faults: readonly Fault[];
  /** Per client, its operations in order. */
  readonly ops: readonly (readonly ClientOp[])[];
  /** Virtual ms: every fault is over, the network calm, crashed replicas restarted. */
  readonly healAt: number;
  /** The network's conditions from the start (default calm); the timing scenarios (timing.ts) set their own. */
  readonly network?: NetworkConditions;
  /** Each replica's epoch floor when it first starts (replica k+1's at k; default 0): floors that differ. */
  readonly floors?: readonly bigint[];
  /** Replica index → ms more on every flush of its disk (a slow disk; the timing scenarios' slow-flush leader). */
  readonly slowDisks?: Readonly<Record<number, number>>;
  /** Whether each link keeps its order (default `fifo`, as TCP) or its messages may overtake each other (network.ts). */
  readonly linkOrder?: LinkOrder;
}

/** What a sweep chooses for all its runs, beside the seed: part of each plan, so a replay by seed reproduces it. */
export interface PlanOptions {
  readonly linkOrder?: LinkOrder;
}

/** The replicas' limits in a run: short leases and small epoch steps, so a run of seconds exercises them. */
export const RUN_LIMITS = {
  minTtlMs: 100,
  maxTtlMs: 2_000,
  retentionMs: 1_000,
  compactionIntervalMs: 400,
  freeEpochStep: 8n,
  maxEpochStep: 128n,
  maxWaitersPerResource: 256,
} as const;

/** The clients' options in a run, matched to RUN_LIMITS (maxEpochStep) and short enough for seconds of virtual time. */
export const RUN_CLIENT_OPTIONS = {
  handshakeTimeoutMs: 300,
  reconnectBaseMs: 20,
  reconnectMaxMs: 300,
  requestTimeoutMs: 600,
  acquireTimeoutMs: 2_000,
  maxEpochStep: RUN_LIMITS.maxEpochStep,
} as const;

/** Behaviours a Byzantine replica of a run may draw (every one of the project's, `flood` kept small). */
const LIES: readonly ByzantineBehaviour[] = BYZANTINE_BEHAVIOURS;

/** The chaos phase's length and how far into it faults may start (virtual ms). */
const CHAOS_MS = 2_500;

export function planRun(seed: number, options: PlanOptions = {}): Plan {
  const drawn = drawPlan(seed);
  const plan = { ...drawn, faults: [...drawn.faults, ...drawForgedHellos(seed, drawn)] };
  // Only a non-default order is written into the plan: a plan of the default stays what it was.
  return options.linkOrder === 'any' ? { ...plan, linkOrder: 'any' } : plan;
}

/**
 * Half the runs: one connection with a forged hello (malicious.ts), drawn from a stream of its own so that the
 * rest of the plan is what the seed drew before forgeries existed.
 */
function drawForgedHellos(seed: number, plan: Plan): Fault[] {
  const random = seededRandom((seed ^ FORGERY_STREAM) >>> 0);
  if (!random.chance(0.5)) return [];
  const resources = plan.resources.filter((resource) => resource !== HELD_RESOURCE);
  return [
    {
      at: random.int(50, plan.healAt - 400),
      kind: 'forge-hello',
      forgery: random.pick(HELLO_FORGERIES),
      replica: random.int(1, plan.n),
      resource: random.pick(resources),
      victim: random.int(0, plan.clients - 1),
    },
  ];
}

/** Mixed into a run's seed for the forged hellos' own stream. */
const FORGERY_STREAM = 0x6f72_6765;

function drawPlan(seed: number): Plan {
  const random = seededRandom(seed);
  const n = random.pick([4, 4, 4, 4, 7, 7, 10]);
  const f = (n - 1) / 3;
  const clients = random.int(2, n === 10 ? 3 : 4);
  const resources = random.chance(0.6) ? ['hot'] : ['hot', 'cold'];
  const byzantine = random
    .shuffle(Array.from({ length: n }, (_, k) => k + 1))
    .slice(0, random.int(0, f))
    .map((replica) => ({ replica, behaviours: random.shuffle(LIES).slice(0, random.int(1, 3)) }));
  const healAt = CHAOS_MS + random.int(0, 500);
  const faults = drawFaults(random, n, resources, healAt);
  const ops = Array.from({ length: clients }, () => drawOps(random, resources, healAt, clients));
  if (!random.chance(0.6)) return { seed, n, clients, resources, byzantine, faults, ops, healAt };
  const held = drawHeldLease(
    random,
    n,
    byzantine.map((b) => b.replica),
    healAt,
    clients,
  );
  return {
    seed,
    n,
    clients,
    resources: [...resources, HELD_RESOURCE],
    byzantine,
    faults: [...faults, ...held.crashes],
    ops: ops.map((list, k) => (k === held.client ? [...list, held.op] : list)),
    healAt,
  };
}

function drawFaults(random: SeededRandom, n: number, resources: readonly string[], healAt: number): Fault[] {
  const faults: Fault[] = [];
  const replicas = Array.from({ length: n }, (_, k) => `r${k + 1}`);
  const count = random.int(0, 5);
  for (let k = 0; k < count; k++) {
    const at = random.int(50, healAt - 400);
    const room = healAt - at - 50;
    switch (random.int(0, 8)) {
      case 0: {
        const split = random.shuffle([...replicas, ...Array.from({ length: 4 }, (_, c) => `c${c + 1}`)]);
        const cut = random.int(1, split.length - 1);
        faults.push({
          at,
          kind: 'partition',
          groups: [split.slice(0, cut), split.slice(cut)],
          forMs: random.int(50, room),
        });
        break;
      }
      case 1:
      case 2:
        faults.push({ at, kind: 'crash', replica: random.int(1, n), downMs: random.int(20, room) });
        break;
      case 3:
        faults.push({ at, kind: 'power-loss', downMs: random.int(20, Math.min(room, 300)) });
        break;
      case 4:
      case 5:
        faults.push({
          at,
          kind: 'power-loss-on-flush',
          // A grant round's t flushes begin together: strike at the end of one, or soon after.
          flushes: random.int(1, 3) + (2 * (n - 1)) / 3,
          afterMs: random.next(),
          downMs: random.int(20, Math.min(room, 300)),
        });
        break;
      case 6:
        faults.push({ at, kind: 'clock-jump', node: random.pick(replicas), ms: random.int(100, 3_000) });
        break;
      case 7: {
        const conditions = {
          baseDelayMs: random.next() * 3,
          jitterMs: random.next() * 20,
          loss: random.next() * 0.2,
        };
        faults.push({ at, kind: 'conditions', conditions, forMs: random.int(50, room) });
        break;
      }
      default: {
        const pushed = random.shuffle(Array.from({ length: n }, (_, r) => r + 1)).slice(0, random.int(1, 2));
        faults.push({
          at,
          kind: 'push-ahead',
          resource: random.pick(resources),
          replicas: pushed,
          grants: random.int(1, 6),
        });
      }
    }
  }
  if (random.chance(0.15)) {
    const f = (n - 1) / 3;
    faults.push({ at: random.int(300, healAt - 600), kind: 'reshare', records: random.int(2 * f + 1, n) });
  }
  for (let k = random.int(0, 2); k > 0; k--)
    faults.push({
      at: random.int(50, healAt - 400),
      kind: 'probe',
      probe: random.pick(PROBES),
      resource: random.pick(resources),
      replicas: random.shuffle(Array.from({ length: n }, (_, r) => r + 1)),
    });
  return faults.sort((a, b) => a.at - b.at);
}

/**
 * The liveness bound of a judged operation (virtual ms; docs/testing.md): a lease kept by a restarted replica's
 * rule (maxTtl), two turn waits a lying leader can cost (2 × 5 s, docs/protocol.md), and each other client's
 * hold and handoff ahead of it.
 */
export function livenessBoundMs(clients: number): number {
  return RUN_LIMITS.maxTtlMs + 2 * 5_000 + clients * (MAX_HOLD_MS + 500);
}

const MAX_HOLD_MS = 300;

/**
 * Judged operations begin this long after the heal: a client whose handshake went to a replica that was down
 * finds out after handshakeTimeoutMs and tries again within reconnectMaxMs (RUN_CLIENT_OPTIONS), and an acquire
 * with fewer than t replicas connected answers `unavailable` at once, by design.
 */
const RECONNECT_MS = RUN_CLIENT_OPTIONS.handshakeTimeoutMs + RUN_CLIENT_OPTIONS.reconnectMaxMs + 400;

function drawOps(random: SeededRandom, resources: readonly string[], healAt: number, clients: number): ClientOp[] {
  const ops: ClientOp[] = [];
  const chaos = random.int(1, 5);
  for (let k = 0; k < chaos; k++)
    ops.push({
      resource: random.pick(resources),
      ttlMs: random.int(300, 1_500),
      waitMs: random.pick([0, random.int(50, 1_500)]),
      holdMs: random.int(0, MAX_HOLD_MS),
      writes: random.int(0, 3),
      delayMs: random.int(0, 300),
      judged: false,
      startAt: 0,
    });
  const judged = random.int(1, 2);
  for (let k = 0; k < judged; k++)
    ops.push({
      resource: random.pick(resources),
      ttlMs: random.int(300, 1_500),
      waitMs: livenessBoundMs(clients),
      holdMs: random.int(0, MAX_HOLD_MS),
      writes: random.int(0, 2),
      delayMs: random.int(0, 50),
      judged: true,
      startAt: healAt + RECONNECT_MS,
    });
  return ops;
}

/** The resource a run's held lease (`keepsLease`) is on: nobody else asks for it. */
export const HELD_RESOURCE = 'held';

/**
 * A lease one client holds for three ttls (two renewals at least) once the restart rule's leases are over, on a
 * resource nobody contends for, while the honest replicas that may still fail besides the Byzantine ones (f of them
 * in all) crash during its hold and come back during it: it must outlive whichever of its signers they are
 * (docs/protocol.md, "Leases that outlive f signers").
 */
function drawHeldLease(
  random: SeededRandom,
  n: number,
  byzantine: readonly number[],
  healAt: number,
  clients: number,
): { readonly client: number; readonly op: ClientOp; readonly crashes: Fault[] } {
  const ttlMs = random.int(300, 600);
  const startAt = healAt + RUN_LIMITS.maxTtlMs + RECONNECT_MS;
  const op: ClientOp = {
    resource: HELD_RESOURCE,
    ttlMs,
    waitMs: livenessBoundMs(clients),
    holdMs: 3 * ttlMs,
    writes: 1,
    delayMs: 0,
    judged: true,
    keepsLease: true,
    startAt,
  };
  const honest = Array.from({ length: n }, (_, k) => k + 1).filter((replica) => !byzantine.includes(replica));
  const down = random.shuffle(honest).slice(0, (n - 1) / 3 - byzantine.length);
  // Down during the hold and back before it ends (the hold lasts at least 3 ttls from startAt), so the restart rule's
  // leases end within the run's quiet period.
  const at = startAt + random.int(Math.ceil(ttlMs / 2), ttlMs);
  const crashes = down.map((replica): Fault => ({
    at,
    kind: 'crash',
    replica,
    downMs: random.int(Math.ceil(ttlMs / 2), ttlMs),
  }));
  return { client: random.int(0, clients - 1), op, crashes };
}
