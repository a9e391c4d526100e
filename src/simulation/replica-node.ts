/**
 * A simulated replica: the replica's real service (src/replica/service.ts: policy, check-and-record, leases, the
 * line, catch-up evidence, compaction) over a simulated store and disk, on the node's own drifting clock, behind
 * the server's own dispatch (src/replica/dispatch.ts: answers, `turn` pushes, `released` notices, REPLICA_FROZEN
 * errors) and, for a Byzantine replica, the project's lying front (byzantine-node.ts). A crash loses the process (its timers, its
 * connections, its disk cache); a restart opens the store from what the disk kept.
 */
import { toHex } from '../common/bytes.js';
import { TokenBucket } from '../common/token-bucket.js';
import type { Cluster } from '../cluster/description.js';
import type { AccessRules } from '../replica/access.js';
import type { SecretKey } from '../crypto/backend.js';
import { VerifyBatcher } from '../crypto/verify-batch.js';
import { type Outcome, type Request, type ServerMessage, type WireRequest } from '../protocol/messages.js';
import { frozenError } from '../replica/freeze-marker.js';
import { RequestDispatch, type DispatchHost, type RequestWatch } from '../replica/dispatch.js';
import { EvidenceChecker } from '../replica/grant-evidence.js';
import type { LinePlacement } from '../replica/handoff-queue.js';
import { policyConfig, type ReplicaLimits } from '../replica/options.js';
import type { decide, PolicyConfig, precheck } from '../replica/policy.js';
import { ReleaseWatchers } from '../replica/release-notices.js';
import { ReplicaService, type LeaseDecisionNote } from '../replica/service.js';
import type { RecordEntry } from '../replica/signing-record.js';
import { inThreadSigner } from '../replica/signer.js';
import type { ByzantineBehaviour, ByzantineParams } from '../testing/byzantine/behaviours.js';
import type { SeededRandom } from '../testing/seeded-random.js';
import { ByzantineFrontSim } from './byzantine-node.js';
import { NodeClock } from './clock.js';
import type { SimDisk } from './disk.js';
import type { SimNetwork } from './network.js';
import type { Scheduler } from './scheduler.js';
import { SimRecordStore } from './store.js';
import { describeMessage, type ToClient, type ToReplica } from './wire.js';

/** What the run's checks hear from a replica. */
export interface ReplicaObserver {
  /** An acquire that may wait its turn (`waitMs`) arrived; `key` names it until it is answered. */
  waiting(replica: number, resource: string, key: string, fixedEpoch: bigint | undefined): void;
  /**
   * Every acquire's answer: `key` is set for one that arrived with `waitMs` (from `waiting`); `grant` names what a
   * `granted` answer signed (its epoch and holder).
   */
  answered(
    replica: number,
    resource: string,
    key: string | undefined,
    outcome: Outcome,
    grant: { readonly epoch: bigint; readonly holder: Uint8Array } | undefined,
  ): void;
  /** The service failed a request with anything but REPLICA_FROZEN: a bug. */
  failed(replica: number, message: string): void;
  /** The process (re)started at `at` (its clock) with these records (the lease ledger's restart rule). */
  started(at: number, records: readonly RecordEntry[], toVirtual: (local: number) => number): void;
  /** The service took a decision that changed a lease (src/replica/service.ts, onLeaseDecision). */
  decided(note: LeaseDecisionNote, toVirtual: (local: number) => number): void;
}

/** The planted bugs a replica can run with (mutations.ts); none in an honest run. */
export interface ReplicaMutation {
  /** The rules' parameters as the replica believes them (for the service's evidence checks as for its rules). */
  readonly policy?: (config: PolicyConfig) => PolicyConfig;
  readonly decide?: typeof decide;
  readonly precheck?: typeof precheck;
  readonly acknowledgeBeforeFlush?: boolean;
  readonly linePlacement?: LinePlacement;
  readonly turnsToldAhead?: number;
}

export interface ReplicaNodeSetup {
  readonly index: number;
  /** Its network address (a reshare's new members get new ones). */
  readonly address: string;
  readonly scheduler: Scheduler;
  readonly network: SimNetwork;
  /** The node's own stream (its Byzantine choices and forgeries). */
  readonly random: SeededRandom;
  readonly cluster: Cluster;
  readonly secretKey: SecretKey;
  readonly limits: ReplicaLimits;
  readonly access: AccessRules;
  readonly disk: SimDisk;
  /** Local ms per virtual ms. */
  readonly rate: number;
  readonly wallClock: () => number;
  readonly byzantine?: {
    readonly behaviours: readonly ByzantineBehaviour[];
    readonly params: ByzantineParams;
    /** Another Byzantine replica's share, for `other-replica`. */
    readonly otherKey?: SecretKey;
  };
  readonly mutation: ReplicaMutation;
  readonly observer: ReplicaObserver;
  /** Told when this replica's disk begins a flush (the fault schedule may crash machines then). */
  readonly onFlushStart: () => void;
}

/** One client connection as the replica keeps it. */
interface Connection {
  readonly client: string;
  readonly conn: number;
  readonly holder: Uint8Array;
  /** The client session its hello named, as hex (docs/protocol.md, "Sessions"). */
  readonly session: string;
  readonly closed: AbortController;
  readonly evidenceChecks: TokenBucket;
}

export class SimReplica {
  readonly index: number;
  readonly address: string;
  readonly #setup: ReplicaNodeSetup;
  readonly #front: ByzantineFrontSim | undefined;
  #clock: NodeClock | undefined;
  #service: ReplicaService | undefined;
  #watchers: ReleaseWatchers<Connection> | undefined;
  readonly #connections = new Map<string, Connection>();
  /** What an authenticated request does (src/replica/dispatch.ts, the server's own). */
  readonly #requests = new RequestDispatch(this.#dispatchHost());
  #incarnation = 0;
  /** Numbers every waiting acquire that arrives (a request sent again is a second arrival). */
  #arrivals = 0;

  constructor(setup: ReplicaNodeSetup) {
    this.#setup = setup;
    this.index = setup.index;
    this.address = setup.address;
    this.#front =
      setup.byzantine &&
      new ByzantineFrontSim(
        setup,
        (ms, run) => this.#clock?.setTimeout(run, ms),
        () => setup.scheduler.now,
      );
  }

  get up(): boolean {
    return this.#service !== undefined;
  }

  get byzantine(): boolean {
    return this.#front !== undefined;
  }

  get service(): ReplicaService | undefined {
    return this.#service;
  }

  get store(): SimRecordStore | undefined {
    return this.#service?.store as SimRecordStore | undefined;
  }

  get clock(): NodeClock | undefined {
    return this.#clock;
  }

  /** Release watchers held now (bounded-state check). */
  get watched(): number {
    return this.#watchers?.size ?? 0;
  }

  /** Starts (or restarts) the process: opens the store from the disk, serves. */
  start(): void {
    const { scheduler, network, limits, disk, cluster, index } = this.#setup;
    const incarnation = ++this.#incarnation;
    const clock = new NodeClock(scheduler, `${this.address}.${incarnation}`, 10_000 * index, this.#setup.rate);
    this.#clock = clock;
    disk.mount(clock);
    // A Byzantine replica that keeps no record across restarts (`no-record`).
    if (incarnation > 1 && this.#front?.wipesRecord) disk.wipe();
    const store = new SimRecordStore(disk, {
      wallClock: this.#setup.wallClock,
      acknowledgeBeforeFlush: this.#setup.mutation.acknowledgeBeforeFlush,
      onFlushStart: this.#setup.onFlushStart,
    });
    const defer = (run: () => void) => void clock.setTimeout(run, 0);
    const toVirtual = (local: number) => clock.virtualAt(local);
    this.#setup.observer.started(clock.now(), store.entries(), toVirtual);
    this.#service = new ReplicaService({
      store,
      signer: inThreadSigner(cluster.backend, this.#setup.secretKey),
      clock,
      timers: clock,
      defer,
      policy: this.#policy(policyConfig(cluster, limits, this.#setup.access)),
      generation: cluster.membershipVersion,
      retentionMs: limits.retentionMs,
      maxWaitersPerResource: limits.maxWaitersPerResource,
      wallClock: this.#setup.wallClock,
      evidence: new EvidenceChecker(cluster, index, new VerifyBatcher(cluster.backend, undefined, defer)),
      decide: this.#setup.mutation.decide,
      precheck: this.#setup.mutation.precheck,
      linePlacement: this.#setup.mutation.linePlacement,
      turnsToldAhead: this.#setup.mutation.turnsToldAhead,
      onLeaseDecision: (note) => this.#setup.observer.decided(note, toVirtual),
    });
    this.#watchers = new ReleaseWatchers(limits.maxWatchedResources, limits.maxWaitersPerResource);
    network.attach(this.address, (from, message) => this.#receive(from, message as ToReplica));
    this.#compactLater();
  }

  /** A reshare's new member: the inherited records and floor go on its disk, durably, before it first starts. */
  inherit(entries: readonly RecordEntry[], floor: bigint): void {
    new SimRecordStore(this.#setup.disk, { wallClock: this.#setup.wallClock }).importInherited(entries, floor);
  }

  /** The process dies: timers, connections and the disk's cache are gone. */
  crash(): void {
    if (!this.#service) return;
    this.#clock?.halt();
    this.#setup.network.detach(this.address);
    this.#setup.disk.crash();
    for (const connection of this.#connections.values()) {
      connection.closed.abort();
      this.#toClient(connection, { kind: 'closed', conn: connection.conn }, 'closed');
    }
    this.#connections.clear();
    this.#service = undefined;
    this.#watchers = undefined;
  }

  /** A reshare retires the replica: it freezes, then stops answering (its record is exported first). */
  async freeze(reason: string): Promise<boolean> {
    const service = this.#service;
    if (!service) return false;
    const state = await service.store.freeze(reason);
    // As the server's POST /admin/freeze does: acquires waiting their turn here hear it now.
    service.handoffs.failAll(frozenError(state));
    return true;
  }

  #policy(config: PolicyConfig): PolicyConfig {
    return this.#setup.mutation.policy?.(config) ?? config;
  }

  #compactLater(): void {
    this.#clock?.setTimeout(() => {
      const service = this.#service;
      if (!service) return;
      service.compact().then(
        () => this.#compactLater(),
        (error: unknown) => this.#setup.observer.failed(this.index, `compaction: ${String(error)}`),
      );
    }, this.#setup.limits.compactionIntervalMs);
  }

  #receive(from: string, message: ToReplica): void {
    const key = `${from}:${message.conn}`;
    if (message.kind === 'open') {
      const clock = this.#clock!;
      const { limits } = this.#setup;
      const connection: Connection = {
        client: from,
        conn: message.conn,
        holder: message.holder,
        session: toHex(message.session),
        closed: new AbortController(),
        evidenceChecks: new TokenBucket(
          limits.evidenceChecksPerSecondPerConnection,
          limits.evidenceChecksPerSecondPerConnection,
          clock.now(),
        ),
      };
      this.#connections.get(key)?.closed.abort();
      this.#connections.set(key, connection);
      this.#toClient(
        connection,
        { kind: 'welcome', conn: message.conn, floor: this.#service?.store.floor ?? 0n },
        'welcome',
      );
      return;
    }
    const connection = this.#connections.get(key);
    if (!connection) {
      // A connection this process does not know (it restarted, or dropped it): the peer's kernel answers with a
      // reset, so the client learns its connection is gone even when the close itself was lost.
      if (message.kind !== 'close')
        this.#setup.network.send(this.address, from, { kind: 'closed', conn: message.conn }, 'reset');
      return;
    }
    if (message.kind === 'close') {
      connection.closed.abort();
      this.#connections.delete(key);
      return;
    }
    if (message.kind === 'ping') {
      // The WebSocket layer answers pings itself, before any request handling (and before a Byzantine front).
      this.#setup.network.send(this.address, from, { kind: 'pong', conn: message.conn, ping: message.ping }, 'pong');
      return;
    }
    if (this.#front) this.#front.relay(connection.holder, message.request, this.#io(connection, key));
    else this.#dispatch(connection, message.request, (m) => this.#send(connection, m));
  }

  /** What the Byzantine front needs of one connection. */
  #io(connection: Connection, key: string) {
    return {
      handle: (request: WireRequest, answer: (message: ServerMessage) => void) =>
        this.#dispatch(connection, request, answer),
      toClient: (frame: Uint8Array | string) =>
        this.#toClient(connection, { kind: 'frame', conn: connection.conn, frame }, 'frame'),
      send: (message: ServerMessage) => this.#send(connection, message),
      drop: () => {
        connection.closed.abort();
        this.#connections.delete(key);
        this.#toClient(connection, { kind: 'closed', conn: connection.conn }, 'dropped');
      },
    };
  }

  /** What an authenticated request does: the server's dispatch (src/replica/dispatch.ts), on this node. */
  #dispatch(connection: Connection, request: WireRequest, answer: (message: ServerMessage) => void): void {
    this.#requests.dispatch(connection, request, connection.holder, answer);
  }

  /** The simulator's side of the dispatch: frames over the simulated network, the run's checks, crashes. */
  #dispatchHost(): DispatchHost<Connection> {
    return {
      service: () => this.#service!,
      watchers: () => this.#watchers!,
      push: (connection, message) => this.#send(connection, message),
      evidenceBudget: (connection) => {
        const clock = this.#clock!;
        return () => connection.evidenceChecks.take(clock.now());
      },
      begin: (connection, request) => (request.type === 'leases' ? undefined : this.#watch(connection, request)),
    };
  }

  /** How the run's checks follow one request; its answer dies with the process if it crashed meanwhile. */
  #watch(connection: Connection, request: Request): RequestWatch {
    const { observer } = this.#setup;
    const service = this.#service;
    const waitKey = `${connection.client}:${connection.conn}#${request.id}@${++this.#arrivals}`;
    const waits = request.type === 'acquire' && (request.waitMs ?? 0) > 0;
    if (waits) observer.waiting(this.index, request.resource, waitKey, request.nextEpoch ? undefined : request.epoch);
    return {
      wanted: () => this.#service === service,
      answered: (outcome) => {
        if (request.type !== 'acquire') return;
        const granted = outcome as Outcome; // an acquire's (`leases` is not watched)
        const epoch = granted.status === 'granted' ? (granted.epoch ?? request.epoch) : undefined;
        const grant = epoch === undefined ? undefined : { epoch, holder: connection.holder };
        observer.answered(this.index, request.resource, waits ? waitKey : undefined, granted, grant);
      },
      failed: (error) => observer.failed(this.index, `${request.type}: ${String(error)}`),
    };
  }

  #send(connection: Connection, message: ServerMessage): void {
    this.#toClient(connection, { kind: 'message', conn: connection.conn, message }, describeMessage(message));
  }

  #toClient(connection: Connection, message: ToClient, label: string): void {
    if (connection.closed.signal.aborted && message.kind !== 'closed') return;
    this.#setup.network.send(this.address, connection.client, message, label);
  }
}
