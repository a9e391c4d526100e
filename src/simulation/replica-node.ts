/**
 * A simulated replica: the replica's real service (src/replica/service.ts: policy, check-and-record, leases, the
 * line, catch-up evidence, compaction) over a simulated store and disk, on the node's own drifting clock, behind
 * the server's own dispatch (src/replica/dispatch.ts: answers, `turn` pushes, `released` notices, REPLICA_FROZEN
 * errors) and, for a Byzantine replica, the project's lying front (byzantine-node.ts). Its connections read frames as the server's
 * do (src/replica/connections.ts): the codec's strict decoding, a challenge and a hello verified by the server's own
 * check (`helloVerifies`, real Ed25519), a hello deadline, and the server's in-flight bound and token buckets
 * (`admitsRequest`) with RATE_LIMITED answers and the close after too many in a row. A crash loses the process (its timers, its
 * connections, its disk cache); a restart opens the store from what the disk kept.
 */
import { toHex, u64be } from '../common/bytes.js';
import type { TimerHandle } from '../common/clock.js';
import { isQuorumFenceError } from '../common/errors.js';
import { TokenBucket } from '../common/token-bucket.js';
import { VerifyBatcher } from '../crypto/verify-batch.js';
import { decodeClientMessage, encodeMessage } from '../protocol/codec.js';
import {
  CloseCode,
  NONCE_BYTES,
  isQuietRelease,
  type ClientMessage,
  type Outcome,
  type Request,
  type ServerMessage,
  type WireErrorCode,
  type WireRequest,
} from '../protocol/messages.js';
import { admitsRequest, helloVerifies } from '../replica/connections.js';
import { frozenError } from '../replica/freeze-marker.js';
import { RequestDispatch, type DispatchHost, type RequestWatch } from '../replica/dispatch.js';
import { EvidenceChecker } from '../replica/grant-evidence.js';
import { policyConfig } from '../replica/options.js';
import type { PolicyConfig } from '../replica/policy.js';
import { ReleaseWatchers } from '../replica/release-notices.js';
import { ReplicaService } from '../replica/service.js';
import type { RecordEntry } from '../replica/signing-record.js';
import { inThreadSigner } from '../replica/signer.js';
import { ByzantineFrontSim } from './byzantine-node.js';
import { ABNORMAL_CLOSURE } from './channel.js';
import { NodeClock } from './clock.js';
import type { ReplicaNodeSetup } from './replica-setup.js';
import { SimRecordStore } from './store.js';
import { describeMessage, type ToClient, type ToReplica } from './wire.js';

export type { ReplicaMutation, ReplicaNodeSetup, ReplicaObserver } from './replica-setup.js';

/** Where a message to a client goes: its address, its connection, and whether that connection is gone. */
interface ClientEnd {
  readonly client: string;
  readonly conn: number;
  readonly closed: AbortController;
}

/** One authenticated client connection as the replica's request handling sees it. */
interface Connection extends ClientEnd {
  readonly holder: Uint8Array;
  /** The client session its hello named, as hex ('' for a sessionless client; docs/protocol.md, "Sessions"). */
  readonly session: string;
  readonly evidenceChecks: TokenBucket;
}

/** One client connection as the replica's transport keeps it, from its opening (src/replica/connections.ts). */
interface Link extends ClientEnd {
  readonly nonce: Uint8Array;
  /** The hello's deadline (authTimeoutMs); undefined once it came. */
  authTimer: TimerHandle;
  /** Set by a hello that verifies. */
  connection: Connection | undefined;
  /** Requests answered yet (the in-flight bound). */
  inFlight: number;
  readonly requests: TokenBucket;
  readonly leasesRequests: TokenBucket;
  consecutiveLimited: number;
}

export class SimReplica {
  readonly index: number;
  readonly address: string;
  readonly #setup: ReplicaNodeSetup;
  readonly #front: ByzantineFrontSim | undefined;
  #clock: NodeClock | undefined;
  #service: ReplicaService | undefined;
  #watchers: ReleaseWatchers<Connection> | undefined;
  /** The client connections open now, by "client:conn". */
  readonly #links = new Map<string, Link>();
  /** What an authenticated request does (src/replica/dispatch.ts, the server's own). */
  readonly #requests = new RequestDispatch(this.#dispatchHost());
  #incarnation = 0;
  /** Connections accepted by this process (their nonces). */
  #accepted = 0;
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
    this.#accepted = 0;
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
      lineOrder: this.#setup.mutation.lineOrder,
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
    for (const link of this.#links.values()) {
      link.closed.abort();
      this.#toClient(link, { kind: 'closed', conn: link.conn, code: ABNORMAL_CLOSURE, reason: '' }, 'closed');
    }
    this.#links.clear();
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
    if (message.kind === 'open') return this.#accept(from, message.conn, key);
    const link = this.#links.get(key);
    if (!link) {
      // A connection this process does not know (it restarted, or dropped it): the peer's kernel answers with a
      // reset, so the client learns its connection is gone even when the close itself was lost.
      if (message.kind !== 'close')
        this.#setup.network.send(
          this.address,
          from,
          { kind: 'closed', conn: message.conn, code: ABNORMAL_CLOSURE, reason: '' },
          'reset',
        );
      return;
    }
    switch (message.kind) {
      case 'close':
        return this.#forget(link, key);
      case 'ping':
        // The WebSocket layer answers pings itself, before any request handling (and before a Byzantine front).
        return this.#toClient(link, { kind: 'pong', conn: link.conn, data: message.data }, 'pong');
      case 'frame':
        return this.#onFrame(link, key, message.frame);
    }
  }

  /** A client opened a connection: it is challenged, and has authTimeoutMs to say hello (connections.ts). */
  #accept(client: string, conn: number, key: string): void {
    const clock = this.#clock!;
    const { limits } = this.#setup;
    const now = clock.now();
    const link: Link = {
      client,
      conn,
      // Unique per connection of this process, as the server's random nonces are (and the same every run).
      nonce: nonceOf(this.#incarnation, ++this.#accepted),
      authTimer: undefined,
      connection: undefined,
      closed: new AbortController(),
      inFlight: 0,
      requests: new TokenBucket(limits.requestsPerSecondPerConnection, limits.burstPerConnection, now),
      leasesRequests: new TokenBucket(limits.leasesPerSecondPerConnection, limits.leasesPerSecondPerConnection, now),
      consecutiveLimited: 0,
    };
    this.#links.get(key)?.closed.abort();
    this.#links.set(key, link);
    link.authTimer = clock.setTimeout(
      () => this.#close(link, key, CloseCode.POLICY_VIOLATION, 'authentication timeout'),
      limits.authTimeoutMs,
    );
    this.#toClient(link, { kind: 'accepted', conn }, 'accepted');
    this.#reply(link, { type: 'challenge', nonce: link.nonce, clusterId: this.#setup.cluster.id, replica: this.index });
  }

  /** One frame from a client, read as the server's connections read it (src/replica/connections.ts, #onFrame). */
  #onFrame(link: Link, key: string, frame: Uint8Array): void {
    const { limits } = this.#setup;
    let message: ClientMessage;
    try {
      message = decodeClientMessage(frame, limits.maxFrameBytes);
    } catch (error) {
      return this.#close(link, key, CloseCode.PROTOCOL_ERROR, isQuorumFenceError(error) ? error.message : 'malformed');
    }
    if (!link.connection) return this.#authenticate(link, key, message);
    if (message.type === 'hello') return this.#close(link, key, CloseCode.PROTOCOL_ERROR, 'already authenticated');
    if (!admitsRequest(link, message, limits, this.#clock!.now())) {
      this.#error(link, message.id, 'RATE_LIMITED', 'too many requests; back off');
      if (++link.consecutiveLimited > limits.maxConsecutiveRateLimited)
        this.#close(link, key, CloseCode.POLICY_VIOLATION, 'kept exceeding the rate limit');
      return;
    }
    link.consecutiveLimited = 0;
    const connection = link.connection;
    if (this.#front) this.#front.relay(connection.holder, message, this.#io(link, key));
    else this.#handle(link, key, message, (m) => this.#send(connection, m));
  }

  /** The first frame must be a hello that verifies; the welcome names the replica's floor (connections.ts). */
  #authenticate(link: Link, key: string, message: ClientMessage): void {
    if (message.type !== 'hello') {
      this.#error(link, message.id, 'UNAUTHENTICATED', 'authenticate (hello) before any request');
      return this.#close(link, key, CloseCode.POLICY_VIOLATION, 'request before authentication');
    }
    const verifies = this.#setup.mutation.helloVerifies ?? helloVerifies;
    if (!verifies(message, link.nonce, this.#setup.cluster.id, this.index))
      return this.#close(link, key, CloseCode.POLICY_VIOLATION, 'authentication failed');
    this.#clock!.clearTimeout(link.authTimer);
    link.authTimer = undefined;
    const rate = this.#setup.limits.evidenceChecksPerSecondPerConnection;
    link.connection = {
      client: link.client,
      conn: link.conn,
      closed: link.closed,
      holder: message.holder,
      session: message.session ? toHex(message.session) : '',
      evidenceChecks: new TokenBucket(rate, rate, this.#clock!.now()),
    };
    const floor = this.#service!.store.floor;
    this.#reply(link, { type: 'welcome', id: message.id, replica: this.index, ...(floor > 0n ? { floor } : {}) });
  }

  /** Hands an admitted request to the request handling, counting it in flight until it is answered (the bound). */
  #handle(link: Link, key: string, request: WireRequest, answer: (message: ServerMessage) => void): void {
    const answers = !isQuietRelease(request);
    if (answers) link.inFlight++;
    let pending = answers;
    this.#dispatch(link.connection!, request, (message) => {
      if (pending) {
        pending = false;
        link.inFlight--;
      }
      answer(message);
    });
  }

  /** What the Byzantine front needs of one connection. */
  #io(link: Link, key: string) {
    const connection = link.connection!;
    return {
      handle: (request: WireRequest, answer: (message: ServerMessage) => void) =>
        this.#handle(link, key, request, answer),
      toClient: (frame: Uint8Array | string) =>
        this.#toClient(connection, { kind: 'frame', conn: connection.conn, frame }, 'frame'),
      send: (message: ServerMessage) => this.#send(connection, message),
      drop: () => {
        this.#forget(link, key);
        this.#toClient(link, { kind: 'closed', conn: link.conn, code: ABNORMAL_CLOSURE, reason: '' }, 'dropped');
      },
    };
  }

  /** The connection ends here: its waiting acquires leave their lines, its hello deadline goes. */
  #forget(link: Link, key: string): void {
    link.closed.abort();
    this.#clock?.clearTimeout(link.authTimer);
    if (this.#links.get(key) === link) this.#links.delete(key);
  }

  /** The replica closes the connection with `code` (a close frame the client reads). */
  #close(link: Link, key: string, code: number, reason: string): void {
    if (link.closed.signal.aborted) return;
    this.#forget(link, key);
    this.#toClient(link, { kind: 'closed', conn: link.conn, code, reason: reason.slice(0, 120) }, `closed ${code}`);
  }

  #error(link: Link, id: number | undefined, code: WireErrorCode, message: string): void {
    this.#reply(link, id === undefined ? { type: 'error', code, message } : { type: 'error', id, code, message });
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
    this.#reply(connection, message);
  }

  /** A protocol message, as the frame the codec writes. */
  #reply(end: ClientEnd, message: ServerMessage): void {
    this.#toClient(end, { kind: 'frame', conn: end.conn, frame: encodeMessage(message) }, describeMessage(message));
  }

  #toClient(end: ClientEnd, message: ToClient, label: string): void {
    if (end.closed.signal.aborted && message.kind !== 'closed') return;
    this.#setup.network.send(this.address, end.client, message, label);
  }
}

/** A challenge's nonce: the process's incarnation and the connection's number, in NONCE_BYTES. */
function nonceOf(incarnation: number, accepted: number): Uint8Array {
  const nonce = new Uint8Array(NONCE_BYTES);
  nonce.set(u64be(BigInt(incarnation)), 0);
  nonce.set(u64be(BigInt(accepted)), 8);
  return nonce;
}
