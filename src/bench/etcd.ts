/**
 * The lock a user would pick instead: a 3-member etcd cluster (on loopback, or with every link, the members'
 * own too, through the bench's network),
 * driven exactly as a fencing user would (lock, the lock key's create revision
 * as the fencing token, a write conditional on that revision, unlock), by two
 * clients: etcd's lock API through its HTTP/JSON gateway over an undici
 * keep-alive pool (one connection per client; the main column), and the etcd3
 * npm client over gRPC (the lease + txn recipe; etcd3 has no lock API client).
 * Before timing, each proves the fencing: a write with a released holder's
 * revision is refused. etcd keeps its default durability (fsync on every
 * commit), as quorumfence does.
 */
import { QuorumFenceError } from '../common/errors.js';
// Type-only: etcd3 and undici are dev dependencies, loaded when the etcd section runs, so the
// other sections run where only the package's own dependencies are installed.
import type { Etcd3, Lease } from 'etcd3';
import type { Dispatcher } from 'undici';
import { processCpuMs } from './counters.js';
import { base64, post, startEtcdCluster } from './etcd-cluster.js';
import type { Links } from './network.js';
import {
  closedLoop,
  freshNames,
  LOOP_PLAN,
  summarise,
  type BenchSize,
  type CycleWindow,
  type LoopCondition,
  type LoopKinds,
  type LoopRate,
  type LoopSet,
  type Timing,
} from './measure.js';

/**
 * One etcd lock user as a fencing user drives it: its own session lease (like
 * etcd's concurrency.Session), lock, the lock key's create revision as the
 * fencing token, a write conditional on that revision, unlock.
 */
export interface EtcdLocker {
  open(): Promise<void>;
  /** Locks `name` (waiting while another holds it); returns the lock key and its create revision. */
  acquire(name: string): Promise<{ key: string; fence: bigint }>;
  /**
   * Writes `value` at `dataKey` only if `lockKey` still has create revision `fence`; false when refused.
   * `dataKey` must lie outside the lock's name/ prefix: a lock waits for every older key under it.
   */
  fencedWrite(lockKey: string, fence: bigint, dataKey: string, value: string): Promise<boolean>;
  release(key: string): Promise<void>;
  close(): Promise<void>;
}

/**
 * etcd's lock API (v3lock, which waits in line for the lock on the server)
 * through its HTTP/JSON gateway, over an undici keep-alive pool shared by the
 * lockers on one member; the lock key's revision is one range read.
 */
export class GatewayLocker implements EtcdLocker {
  readonly #pool: Dispatcher;
  #lease = '';
  #keepAlive: NodeJS.Timeout | undefined;

  constructor(pool: Dispatcher) {
    this.#pool = pool;
  }

  async open(ttlSeconds = 60): Promise<void> {
    this.#lease = (await post(this.#pool, '/v3/lease/grant', { TTL: ttlSeconds })).ID as string;
    // Kept alive a third of the TTL apart, as etcd's concurrency.Session does: a locker open longer than the
    // TTL (600 timed acquires at a long round trip) must not lose its lock keys.
    this.#keepAlive = setInterval(
      () => void post(this.#pool, '/v3/lease/keepalive', { ID: this.#lease }).catch(() => undefined),
      (ttlSeconds * 1000) / 3,
    );
    this.#keepAlive.unref();
  }

  async acquire(name: string): Promise<{ key: string; fence: bigint }> {
    const locked = await post(this.#pool, '/v3/lock/lock', { name: base64(name), lease: this.#lease });
    const key = locked.key as string;
    const range = await post(this.#pool, '/v3/kv/range', { key });
    const created = range.kvs?.[0]?.create_revision;
    if (created === undefined) throw new QuorumFenceError('INTERNAL', `etcd lock key ${key} has no revision`);
    return { key, fence: BigInt(created) };
  }

  async fencedWrite(lockKey: string, fence: bigint, dataKey: string, value: string): Promise<boolean> {
    const answer = await post(this.#pool, '/v3/kv/txn', {
      compare: [{ key: lockKey, target: 'CREATE', result: 'EQUAL', create_revision: fence.toString() }],
      success: [{ request_put: { key: base64(dataKey), value: base64(value) } }],
    });
    return answer.succeeded === true;
  }

  async release(key: string): Promise<void> {
    await post(this.#pool, '/v3/lock/unlock', { key });
  }

  async close(): Promise<void> {
    clearInterval(this.#keepAlive);
    if (this.#lease) await post(this.#pool, '/v3/lease/revoke', { ID: this.#lease }).catch(() => undefined);
  }
}

/** The key just after every key starting with `prefix` (etcd's range end for a prefix). */
function prefixEnd(prefix: Buffer): Buffer {
  const end = Buffer.from(prefix);
  end[end.length - 1] = end[end.length - 1]! + 1;
  return end;
}

/**
 * The etcd3 npm client over gRPC. etcd3 has no client for etcd's lock API
 * (its own Lock is a try-lock that fails when held), so this is the lease +
 * txn recipe of etcd's concurrency.Mutex: put name/<lease> if absent, hold the
 * lock once no key under name/ has a lower create revision, else watch the
 * one just before it until it is deleted. The put's revision is the token: no
 * extra read.
 */
export class GrpcLocker implements EtcdLocker {
  readonly #client: Etcd3;
  #lease: Lease | undefined;
  #leaseHex = '';

  constructor(client: Etcd3) {
    this.#client = client;
  }

  async open(ttlSeconds = 60): Promise<void> {
    // etcd3 keeps the lease alive itself (a third of the TTL apart), as a user's session would.
    this.#lease = this.#client.lease(ttlSeconds, { autoKeepAlive: true });
    const id = await this.#lease.grant();
    this.#leaseHex = BigInt(id).toString(16);
  }

  async acquire(name: string): Promise<{ key: string; fence: bigint }> {
    const kv = this.#client.kv;
    const key = `${name}/${this.#leaseHex}`;
    const keyBytes = Buffer.from(key);
    const put = await kv.txn({
      compare: [{ key: keyBytes, target: 'Create', result: 'Equal', create_revision: 0 }],
      success: [{ request_put: { key: keyBytes, value: Buffer.alloc(0), lease: await this.#lease!.grant() } }],
      failure: [{ request_range: { key: keyBytes } }],
    });
    const fence = BigInt(
      put.succeeded ? put.header.revision : put.responses[0]!.response_range.kvs[0]!.create_revision,
    );
    const prefix = Buffer.from(`${name}/`);
    for (;;) {
      const ahead = await kv.range({
        key: prefix,
        range_end: prefixEnd(prefix),
        max_create_revision: (fence - 1n).toString(),
        sort_target: 'Create',
        sort_order: 'Descend',
        limit: 1,
      });
      const previous = ahead.kvs[0];
      if (!previous) return { key, fence };
      await this.#waitDeleted(previous.key, BigInt(ahead.header.revision) + 1n);
    }
  }

  async #waitDeleted(key: Buffer, fromRevision: bigint): Promise<void> {
    const watcher = await this.#client.watch().key(key).startRevision(fromRevision.toString()).create();
    try {
      await new Promise<void>((resolve, reject) => {
        watcher.on('delete', () => resolve());
        watcher.on('error', reject);
      });
    } finally {
      await watcher.cancel();
    }
  }

  async fencedWrite(lockKey: string, fence: bigint, dataKey: string, value: string): Promise<boolean> {
    const answer = await this.#client.kv.txn({
      compare: [{ key: Buffer.from(lockKey), target: 'Create', result: 'Equal', create_revision: fence.toString() }],
      success: [{ request_put: { key: Buffer.from(dataKey), value: Buffer.from(value) } }],
    });
    return answer.succeeded;
  }

  async release(key: string): Promise<void> {
    await this.#client.kv.deleteRange({ key: Buffer.from(key) });
  }

  async close(): Promise<void> {
    await this.#lease?.revoke().catch(() => undefined);
    this.#client.close();
  }
}

export type EtcdDriver = 'gateway' | 'grpc';

export const ETCD_DRIVERS: Record<EtcdDriver, string> = {
  gateway: "etcd's lock API via its HTTP/JSON gateway, undici keep-alive pool, + 1 range read",
  grpc: 'etcd3 npm client (gRPC), lease + txn recipe (concurrency.Mutex), no extra read',
};

/** Lockers for `clients` users spread over the members, as a client library does, and how to free them. */
async function lockers(
  driver: EtcdDriver,
  urls: readonly string[],
  clients: number,
): Promise<{ lockers: EtcdLocker[]; close: () => Promise<void> }> {
  if (driver === 'grpc') {
    const { Etcd3 } = await import('etcd3');
    // One client (one gRPC channel) per user.
    const made = Array.from(
      { length: clients },
      (_, k) => new GrpcLocker(new Etcd3({ hosts: urls[k % urls.length]! })),
    );
    return { lockers: made, close: async () => void (await Promise.all(made.map((l) => l.close()))) };
  }
  // One keep-alive connection per client: a pool per member sized to the clients it serves.
  const { Pool } = await import('undici');
  const pools = urls.map(
    (url, m) =>
      new Pool(url, {
        connections: Math.max(1, Math.ceil((clients - m) / urls.length)),
        pipelining: 1,
        keepAliveTimeout: 60_000,
      }),
  );
  const made = Array.from({ length: clients }, (_, k) => new GatewayLocker(pools[k % urls.length]!));
  return {
    lockers: made,
    close: async () => {
      await Promise.all(made.map((l) => l.close()));
      await Promise.all(pools.map((p) => p.close()));
    },
  };
}

export interface FencingCheck {
  /** A write carrying the current holder's revision went through. */
  readonly currentAccepted: boolean;
  /** A write carrying the previous holder's revision (its lock since released) was refused. */
  readonly staleRefused: boolean;
  readonly staleFence: string;
  readonly currentFence: string;
}

/** Proves the etcd write is fenced before timing it: a stale revision's write must be refused. */
async function checkFencing(locker: EtcdLocker, name: string): Promise<FencingCheck> {
  const first = await locker.acquire(name);
  await locker.release(first.key);
  const second = await locker.acquire(name);
  try {
    const staleRefused = !(await locker.fencedWrite(first.key, first.fence, `data/${name}`, 'stale'));
    const currentAccepted = await locker.fencedWrite(second.key, second.fence, `data/${name}`, 'current');
    if (!staleRefused || !currentAccepted)
      throw new QuorumFenceError(
        'INTERNAL',
        `etcd fencing check failed: stale write ${staleRefused ? 'refused' : 'ACCEPTED'}, current write ${currentAccepted ? 'accepted' : 'REFUSED'}`,
      );
    return { currentAccepted, staleRefused, staleFence: first.fence.toString(), currentFence: second.fence.toString() };
  } finally {
    await locker.release(second.key);
  }
}

/** CPU ms per cycle in the 16-client fenced-write loop: the etcd members, and this (client) process. */
export interface EtcdCpuPerCycle {
  readonly etcd: number;
  readonly client: number;
}

export interface EtcdDriverFigures {
  readonly driver: EtcdDriver;
  readonly description: string;
  readonly fencing: FencingCheck;
  /** lock + the lock key's create revision, uncontended. */
  readonly acquireMs: Timing;
  readonly loops: LoopKinds;
  readonly cpuPerCycleMs: EtcdCpuPerCycle;
}

export interface EtcdFigures {
  readonly members: number;
  readonly drivers: Partial<Record<EtcdDriver, EtcdDriverFigures>>;
}

/** A loop's cycles that failed and were run again (bench --gray: etcd answering errors while it elects a leader). */
export interface Retried {
  count: number;
  /** The first failure's message. */
  first?: string;
}

/** Pause before running a failed cycle again: doubling from the first, up to the last (a user's backoff). */
const RETRY_PAUSE_MS = { first: 20, most: 500 } as const;

/**
 * `clients` etcd lockers in closed loops of lock [+ fenced write] + unlock for `seconds` on `nameOf(their
 * index)`, spread over `urls`. With `under` (bench --gray), the loops run under its condition, and a cycle
 * that fails is run again from its lock (as a user retries; the lock key is the session's own, so a lock
 * that went through is taken again at once), after a backoff, until the loop's time is up; without it, a
 * failure ends the loop.
 */
export async function etcdLoop(
  driver: EtcdDriver,
  urls: readonly string[],
  clients: number,
  seconds: number,
  nameOf: (k: number) => string,
  write: boolean,
  window?: CycleWindow,
  under?: { readonly condition: LoopCondition; readonly retried: Retried },
): Promise<LoopRate> {
  const made = await lockers(driver, urls, clients);
  /** One cycle; resolves to when its lock was taken (performance.now()). */
  const once = async (k: number, name: string): Promise<number> => {
    const locker = made.lockers[k]!;
    const { key, fence } = await locker.acquire(name);
    const acquiredAt = performance.now();
    if (write && !(await locker.fencedWrite(key, fence, `data/${name}`, 'x')))
      throw new QuorumFenceError('INTERNAL', `etcd refused the holder's fenced write on ${name}`);
    await locker.release(key);
    return acquiredAt;
  };
  try {
    await Promise.all(made.lockers.map((l) => l.open()));
    return await closedLoop(
      clients,
      seconds,
      async (k, remainingMs) => {
        const name = nameOf(k);
        const t0 = performance.now();
        if (!under) return (await once(k, name)) - t0;
        const deadline = t0 + remainingMs;
        for (let pause: number = RETRY_PAUSE_MS.first; ; pause = Math.min(2 * pause, RETRY_PAUSE_MS.most)) {
          try {
            // The acquire as the user saw it: from the first attempt.
            return (await once(k, name)) - t0;
          } catch (error) {
            under.retried.count++;
            under.retried.first ??= (error as Error).message;
            if (performance.now() + pause >= deadline) return undefined;
            await new Promise((resolve) => setTimeout(resolve, pause));
          }
        }
      },
      window,
      under?.condition,
    );
  } finally {
    await made.close();
  }
}

async function benchDriver(
  driver: EtcdDriver,
  urls: readonly string[],
  options: {
    plan: (typeof LOOP_PLAN)[BenchSize];
    clients: number;
    pids: readonly number[];
    progress: (line: string) => void;
  },
): Promise<EtcdDriverFigures> {
  const { plan, clients, pids, progress } = options;
  const seconds = plan.seconds;
  const tag = `etcd (${driver})`;
  const single = await lockers(driver, urls, 1);
  const locker = single.lockers[0]!;
  let fencing: FencingCheck;
  const samples: number[] = [];
  try {
    await locker.open();
    progress(`${tag}: fencing check (a stale revision's write is refused) ...`);
    fencing = await checkFencing(locker, `bench/${driver}/fencing`);
    progress(`${tag}: uncontended lock + revision latency ...`);
    for (let i = 0; i < plan.acquires; i++) {
      const t0 = performance.now();
      const { key } = await locker.acquire(`bench/${driver}/latency`);
      if (i >= plan.warmupAcquires) samples.push(performance.now() - t0);
      await locker.release(key);
    }
  } finally {
    await single.close();
  }
  const cpuNow = () => ({
    etcd: pids.reduce((sum, pid) => sum + processCpuMs(pid), 0),
    client: (process.cpuUsage().user + process.cpuUsage().system) / 1000,
  });
  const set = async (write: boolean): Promise<{ loops: LoopSet; cpu: EtcdCpuPerCycle }> => {
    const kind = write ? 'write' : 'plain';
    progress(`${tag}: 1 client, ${write ? 'lock + fenced write + unlock' : 'lock + unlock'} ...`);
    const one = await etcdLoop(driver, urls, 1, seconds, () => `bench/${driver}/${kind}/one`, write);
    progress(`${tag}: ${clients} clients on distinct locks ...`);
    let before = cpuNow();
    let after = before;
    const distinct = await etcdLoop(driver, urls, clients, seconds, freshNames(`bench/${driver}/${kind}/d`), write, {
      opened: () => (before = cpuNow()),
      done: () => (after = cpuNow()),
    });
    // The warm-up cycles (one per client) count too, as on quorumfence's side.
    const cycles = distinct.operations + clients;
    progress(`${tag}: ${clients} clients on one hot lock ...`);
    const hot = await etcdLoop(driver, urls, clients, seconds, () => `bench/${driver}/${kind}/hot`, write);
    return {
      loops: { one, distinct, hot },
      cpu: { etcd: (after.etcd - before.etcd) / cycles, client: (after.client - before.client) / cycles },
    };
  };
  const lockRelease = await set(false);
  const fencedWrite = await set(true);
  return {
    driver,
    description: ETCD_DRIVERS[driver],
    fencing,
    acquireMs: summarise(samples),
    loops: { lockRelease: lockRelease.loops, fencedWrite: fencedWrite.loops },
    cpuPerCycleMs: fencedWrite.cpu,
  };
}

/** The same workloads as benchSystem, against a 3-member etcd cluster, with each driver. */
export async function benchEtcd(
  options: {
    /** How long to run (default full; see LOOP_PLAN). */
    size?: BenchSize;
    clients?: number;
    drivers?: readonly EtcdDriver[];
    progress?: (line: string) => void;
    /** Every link, the members' peer links too (default: loopback). */
    links?: Links;
  } = {},
): Promise<EtcdFigures> {
  const plan = LOOP_PLAN[options.size ?? 'full'];
  const clients = options.clients ?? 16;
  const progress = options.progress ?? (() => undefined);
  progress('etcd: starting a 3-member cluster ...');
  const cluster = await startEtcdCluster(options.links ? { links: options.links } : {});
  try {
    const drivers: Partial<Record<EtcdDriver, EtcdDriverFigures>> = {};
    for (const driver of options.drivers ?? (['gateway', 'grpc'] as const))
      drivers[driver] = await benchDriver(driver, cluster.clientUrls, {
        plan,
        clients,
        pids: cluster.pids,
        progress,
      });
    return { members: cluster.clientUrls.length, drivers };
  } finally {
    await cluster.close();
  }
}
