/**
 * A simulated client: the SDK's own acquire, lease (renewal, release) and driver code (src/client: the cores and
 * drive.ts) and its own connections (replica-connection.ts: handshake, session, pings, reconnects) over the
 * simulated transport (channel.ts), on the client's own drifting clock, running a workload: per
 * operation, acquire a resource (with a wait), write through the guard with the token while holding it, release.
 * What it saw (tokens, acknowledged writes, each operation's outcome and duration, any exception) is what the
 * run's checks read.
 */
import { BoundedMap } from '../common/bounded-map.js';
import { toHex } from '../common/bytes.js';
import { acquireGrant, type AcquireGrantResult } from '../client/acquire.js';
import { EvidenceLog } from '../client/evidence.js';
import { identityFromSecretKey, type Identity } from '../client/identity.js';
import { Lease } from '../client/lease.js';
import { resolveClientOptions, type ClientOptions } from '../client/options.js';
import type { QuorumContext } from '../client/quorum-context.js';
import { ResourceListeners } from '../client/resource-listeners.js';
import { GrantLatency } from '../client/signer-choice.js';
import type { Cluster } from '../cluster/description.js';
import { CLIENT_RULES, type CoreRules } from '../client/core/env.js';
import type { BlsBackend } from '../crypto/backend.js';
import { installVerifyBatcher, VerifyBatcher } from '../crypto/verify-batch.js';
import type { AcknowledgedWrite } from '../testing/history-checker.js';
import type { SeededRandom } from '../testing/seeded-random.js';
import { tokenDigest } from '../token/admission-token.js';
import { TurnTiming } from '../client/turn-timing.js';
import { ReplicaConnection } from '../client/replica-connection.js';
import type { ReplicaChannel } from '../client/replica-channel.js';
import { mutatedChannel, SimTransport } from './channel.js';
import { NodeClock } from './clock.js';
import { GUARD_ADDRESS, type WriteAnswer, type WriteRequest } from './guard-node.js';
import type { SimNetwork } from './network.js';
import type { Scheduler } from './scheduler.js';
import type { ToClient } from './wire.js';
import type { LeaseLedger } from './lease-ledger.js';

export interface ClientOp {
  readonly resource: string;
  readonly ttlMs: number;
  readonly waitMs: number;
  readonly holdMs: number;
  /** Guarded writes made while holding the lease. */
  readonly writes: number;
  /** Pause before the acquire (client ms). */
  readonly delayMs: number;
  /** Issued after the run healed: the liveness check judges it. */
  readonly judged: boolean;
  /** Not before this virtual time (the heal, for judged operations). */
  readonly startAt: number;
  /**
   * Judged for keeping its lease too: it holds for several ttls, after the heal and the restart rule's maxTtl, so
   * (at most f replicas faulty) no renewal may fail it (docs/protocol.md, "Leases that outlive f signers").
   */
  readonly keepsLease?: boolean;
}

export interface OpOutcome {
  readonly op: ClientOp;
  /** Virtual ms: the acquire began, returned, and the operation ended (after the release). */
  readonly startedAt: number;
  readonly acquiredAt: number;
  readonly endedAt: number;
  readonly ok: boolean;
  readonly reason: string;
}

export interface ClientSetup {
  readonly index: number;
  readonly scheduler: Scheduler;
  readonly network: SimNetwork;
  readonly random: SeededRandom;
  readonly cluster: Cluster;
  readonly rate: number;
  readonly options: Partial<ClientOptions>;
  /** A mutation: the threshold this client's cores and collectors believe in (default the cluster's t). */
  readonly believedThreshold?: number;
  readonly mutation?: ClientMutation;
  /** Hears the client's views of its leases (the lease ledger: lease-ledger.ts). */
  readonly views?: Pick<LeaseLedger, 'viewStarted' | 'viewExtended' | 'viewEnded'>;
}

/** The planted bugs a client can run with (mutations.ts); none in an honest run. */
export interface ClientMutation {
  /** Each release waits for the replicas' answers before the next operation (issue 31 made it resolve once sent). */
  readonly releaseWaits?: boolean;
  /** Its connections keep no replica's floor, so a first acquire proposes epoch 1 (as before issue 31). */
  readonly forgetsFloors?: boolean;
  /** Its connections report no latency, so acquires ask and queue at slow replicas as at fast ones (issue 42). */
  readonly blindToLatency?: boolean;
  /** Its lease view ends a margin after the ttl instead of before it (lease-timing.ts's margin, negated). */
  readonly viewOutlastsLeases?: boolean;
  /** Its backend says every signature verifies: partials and the combined token are trusted unchecked. */
  readonly trustsAnySignature?: boolean;
  /** The f its cores believe in, from the cluster's (the (f+1)-th rules then count fewer answers). */
  readonly believedF?: (f: number) => number;
  /** Its acquires ask every replica at once (no straggler wait: a wait of 0, and no grant latency learnt). */
  readonly asksEveryoneAtOnce?: boolean;
  /** It hears no `turn` push: a waiter in a line asks the other signers only once the leader granted it. */
  readonly ignoresTurns?: boolean;
  /** Client rules its cores apply instead of the SDK's (core/env.ts, CoreRules). */
  readonly rules?: Partial<CoreRules>;
}

/** A judged acquire answered `unavailable` asks again this much later (client ms): a reconnect takes about that. */
const UNAVAILABLE_RETRY_MS = 100;

/** How long a client waits for the guard's answer to a write (client ms). */
const WRITE_TIMEOUT_MS = 1_000;

export class SimClient {
  readonly address: string;
  readonly identity: Identity;
  /** The session its connections name in their hello, as hex (what a replica keeps beside a lease). */
  readonly session: string;
  readonly #sessionBytes: Uint8Array;
  readonly clock: NodeClock;
  readonly tokens: string[] = [];
  readonly acknowledged: AcknowledgedWrite[] = [];
  readonly outcomes: OpOutcome[] = [];
  readonly errors: string[] = [];
  /** Leases of operations judged for keeping them (`keepsLease`) that ended before their release, and why. */
  readonly leaseLosses: string[] = [];
  /** Tokens by the share generation of the description they were granted under (the reshare check). */
  readonly generations = new Map<string, number>();
  readonly #setup: ClientSetup;
  readonly #options: ClientOptions;
  /** A mutation's backend (trustsAnySignature); the cluster's otherwise. */
  readonly #backend: BlsBackend | undefined;
  readonly #releaseListeners = new ResourceListeners<[]>();
  readonly #turnListeners = new ResourceListeners<[replica: number, epoch: bigint]>();
  readonly #changeListeners = new Set<() => void>();
  readonly #writes = new Map<number, (answer: WriteAnswer | undefined) => void>();
  readonly #leases = new Set<Lease>();
  /** The SDK's connections, and the channels the cores use (the same, or wrapped by a mutation). */
  #connections: ReplicaConnection[] = [];
  #channels: ReplicaChannel[] = [];
  readonly #transport: SimTransport;
  /**
   * The options the connections read: the client's, but that pinging stops once the client is done (`run`), so a
   * run's quiet period ends with nothing in flight (a real client pings until it closes).
   */
  readonly #connectionOptions: { -readonly [K in keyof ClientOptions]: ClientOptions[K] };
  #ctx: QuorumContext;
  #nextWrite = 1;
  #done = false;

  constructor(setup: ClientSetup) {
    this.#setup = setup;
    this.address = `c${setup.index}`;
    this.clock = new NodeClock(setup.scheduler, this.address, 1_000 * setup.index, setup.rate);
    const seed = Uint8Array.from({ length: 32 }, () => setup.random.int(0, 255));
    this.identity = identityFromSecretKey(seed);
    // A client session as the SDK makes one per client (docs/protocol.md, "Sessions"), from the client's stream.
    this.#sessionBytes = Uint8Array.from({ length: 16 }, () => setup.random.int(0, 255));
    this.session = toHex(this.#sessionBytes);
    this.#options = mutatedOptions(
      resolveClientOptions({ ...setup.options, clock: this.clock, random: () => setup.random.next() }),
      setup.mutation,
    );
    this.#backend = setup.mutation?.trustsAnySignature
      ? trustingBackend(setup.cluster.backend, (run) => setup.scheduler.schedule(0, `${this.address}:verify`, run))
      : undefined;
    this.#connectionOptions = { ...this.#options };
    this.#transport = new SimTransport(this.address, setup.network);
    this.#ctx = this.#context(setup.cluster);
    setup.network.attach(this.address, (from, message) => this.#receive(from, message));
  }

  get done(): boolean {
    return this.#done;
  }

  get context(): QuorumContext {
    return this.#ctx;
  }

  /** Requests open on its connections, listeners and leases held (bounded-state check). */
  get openState(): { requests: number; listeners: number; leases: number; writes: number } {
    return {
      requests: this.#connections.reduce((sum, connection) => sum + connection.openRequests, 0),
      listeners: this.#changeListeners.size,
      leases: this.#leases.size,
      writes: this.#writes.size,
    };
  }

  /** Connects to the replicas of `cluster` (at the start, and after a reshare to the new members). */
  connect(cluster: Cluster, replicaAddress: (index: number) => string): void {
    for (const connection of this.#connections) connection.close();
    const turnTiming = new TurnTiming(cluster.f);
    const mutation = this.#setup.mutation ?? {};
    this.#connections = cluster.replicas.map(
      (replica) =>
        new ReplicaConnection(
          { ...replica, endpoint: replicaAddress(replica.index) },
          {
            clusterId: cluster.id,
            identity: this.identity,
            session: this.#sessionBytes,
            options: this.#connectionOptions,
            transport: this.#transport,
            turnTiming,
            onChange: () => {
              for (const listener of [...this.#changeListeners]) listener();
            },
            onReleased: (_replica, resource) => this.#releaseListeners.notify(resource),
            onTurn: (replica, resource, epoch) => this.#turnListeners.notify(resource, replica, epoch),
            onFault: () => undefined,
          },
        ),
    );
    this.#channels = this.#connections.map((connection) => mutatedChannel(connection, mutation));
    this.#ctx = this.#context(cluster);
    for (const connection of this.#connections) connection.start();
  }

  /** Runs the operations one after another; resolves when all are done. Never rejects. */
  async run(ops: readonly ClientOp[]): Promise<void> {
    for (const op of ops) {
      const { scheduler } = this.#setup;
      if (scheduler.now < op.startAt)
        await new Promise<void>((resolve) =>
          scheduler.schedule(op.startAt - scheduler.now, `${this.address}:start`, resolve),
        );
      await this.#sleep(op.delayMs);
      const startedAt = this.#setup.scheduler.now;
      let acquiredAt = startedAt;
      try {
        const reason = await this.#operate(op, () => (acquiredAt = this.#setup.scheduler.now));
        const endedAt = this.#setup.scheduler.now;
        this.outcomes.push({ op, startedAt, acquiredAt, endedAt, ok: reason === 'ok', reason });
      } catch (error) {
        this.errors.push(`${op.resource}: ${error instanceof Error ? error.message : String(error)}`);
      }
    }
    this.#done = true;
    this.#connectionOptions.pingIntervalMs = 0;
  }

  /** The run is over: every connection closes. */
  close(): void {
    for (const connection of this.#connections) connection.close();
  }

  /**
   * One acquire; a judged one that finds too few replicas connected (`unavailable`, answered at once by design:
   * a connection the client has not yet seen reset, a replica reconnecting) asks again after a pause, as an
   * application would, within its wait.
   */
  async #acquire(op: ClientOp): Promise<{ readonly result: AcquireGrantResult; readonly ctx: QuorumContext }> {
    const { scheduler } = this.#setup;
    const until = scheduler.now + op.waitMs;
    for (;;) {
      const waitMs = Math.max(0, Math.floor(until - scheduler.now));
      // The context of this try: a reshare may have moved the client to the new set since the last one.
      const ctx = this.#ctx;
      const result = await acquireGrant(ctx, {
        resource: op.resource,
        ttlMs: op.ttlMs,
        waitMs,
        timeoutMs: waitMs + this.#options.acquireTimeoutMs,
      });
      if (result.ok || !op.judged || result.reason !== 'unavailable' || scheduler.now >= until) return { result, ctx };
      await this.#sleep(UNAVAILABLE_RETRY_MS);
    }
  }

  async #operate(op: ClientOp, acquired: () => void): Promise<string> {
    // The lease and the token's generation are those of the context the grant came from, not the one the
    // operation started with (it retried across a reshare).
    const { result, ctx } = await this.#acquire(op);
    acquired();
    if (!result.ok) return `${result.reason}: ${result.message}`;
    const lease = new Lease(ctx, result.grant, result.faults, { autoRenew: true }, (held) => {
      this.#leases.add(held);
      return () => this.#leases.delete(held);
    });
    this.#watchView(lease);
    if (op.keepsLease)
      lease.once('lost', (end) =>
        this.leaseLosses.push(`${op.resource} at epoch ${lease.epoch}: ${end.reason} (${end.message})`),
      );
    this.tokens.push(lease.tokenText);
    this.generations.set(lease.tokenText, ctx.cluster.membershipVersion);
    const digest = toHex(tokenDigest(lease.token));
    const between = op.holdMs / (op.writes + 1);
    for (let k = 0; k < op.writes; k++) {
      await this.#sleep(between);
      if (!lease.active) break;
      const key = `k${this.#setup.random.int(0, 2)}`;
      const answer = await this.#write(lease.tokenText, op.resource, key);
      if (answer?.accepted && answer.version !== null)
        this.acknowledged.push({ guard: 0, resource: op.resource, key, tokenDigest: digest, version: answer.version });
    }
    await this.#sleep(between);
    await lease.release({ wait: this.#setup.mutation?.releaseWaits === true });
    return 'ok';
  }

  /** Tells the lease ledger how long this client relies on its lease, in virtual time. */
  #watchView(lease: Lease): void {
    const views = this.#setup.views;
    if (!views) return;
    const virtual = (local: number) => this.clock.virtualAt(local);
    const now = () => this.#setup.scheduler.now;
    const view = { client: this.address, resource: lease.resource, epoch: lease.epoch, holder: lease.holder };
    views.viewStarted({ ...view, session: this.session }, now(), virtual(lease.expiresAt));
    lease.on('renewed', ({ expiresAt }) => views.viewExtended(this.address, lease.resource, now(), virtual(expiresAt)));
    lease.once('ended', () => views.viewEnded(this.address, lease.resource, now()));
  }

  #write(token: string, resource: string, key: string): Promise<WriteAnswer | undefined> {
    const id = this.#nextWrite++;
    const request: WriteRequest = { kind: 'write', id, token, resource, key };
    return new Promise((resolve) => {
      const timer = this.clock.setTimeout(() => {
        this.#writes.delete(id);
        resolve(undefined);
      }, WRITE_TIMEOUT_MS);
      this.#writes.set(id, (answer) => {
        this.clock.clearTimeout(timer);
        resolve(answer);
      });
      this.#setup.network.send(this.address, GUARD_ADDRESS, request, `write#${id} ${resource}/${key}`);
    });
  }

  #receive(from: string, message: unknown): void {
    if (from === GUARD_ADDRESS) {
      const answer = message as WriteAnswer;
      const settle = this.#writes.get(answer.id);
      this.#writes.delete(answer.id);
      settle?.(answer);
      return;
    }
    this.#transport.receive(from, message as ToClient);
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => this.clock.setTimeout(resolve, ms));
  }

  #subscribe(listener: () => void): () => void {
    this.#changeListeners.add(listener);
    return () => this.#changeListeners.delete(listener);
  }

  #context(cluster: Cluster): QuorumContext {
    const mutation = this.#setup.mutation;
    const believed = {
      ...cluster,
      ...(this.#setup.believedThreshold === undefined ? {} : { t: this.#setup.believedThreshold }),
      ...(mutation?.believedF ? { f: mutation.believedF(cluster.f) } : {}),
    };
    return {
      cluster: believed,
      backend: this.#backend ?? cluster.backend,
      ...(mutation?.rules ? { rules: { ...CLIENT_RULES, ...mutation.rules } } : {}),
      identity: this.identity,
      options: this.#options,
      channels: { channels: this.#channels, subscribe: (l) => this.#subscribe(l) },
      evidence: new EvidenceLog({
        maxEvidence: this.#options.maxEvidence,
        partialMemorySize: this.#options.partialMemorySize,
      }),
      epochHints: new BoundedMap(this.#options.epochHintCacheSize),
      grantLatency: mutation?.asksEveryoneAtOnce ? undefined : new GrantLatency(),
      onReleased: (resource, listener) => this.#releaseListeners.listen(resource, listener),
      ...(mutation?.ignoresTurns
        ? {}
        : { onTurn: (resource, listener) => this.#turnListeners.listen(resource, listener) }),
    };
  }
}

/** The options a mutation changes (the view's margin, the straggler wait). */
function mutatedOptions(options: ClientOptions, mutation: ClientMutation | undefined): ClientOptions {
  if (!mutation) return options;
  return {
    ...options,
    ...(mutation.viewOutlastsLeases
      ? { expiryMarginFraction: -options.expiryMarginFraction, minExpiryMarginMs: -options.minExpiryMarginMs }
      : {}),
    ...(mutation.asksEveryoneAtOnce ? { stragglerMinMs: 0 } : {}),
  };
}

/** `backend` with every signature check answering yes (a planted bug), checks batched on the run's virtual time. */
function trustingBackend(backend: BlsBackend, defer: (run: () => void) => void): BlsBackend {
  const trusting = new Proxy(backend, {
    get(target, property) {
      if (property === 'verify' || property === 'verifyAll') return () => true;
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
  installVerifyBatcher(trusting, new VerifyBatcher(trusting, undefined, defer));
  return trusting;
}
