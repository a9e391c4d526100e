/**
 * QuorumFenceClient: the SDK's entry point. Holds one authenticated
 * connection per replica and runs acquire, status, renew and release as
 * quorum rounds over them. Expected outcomes come back as `{ ok, ... }`
 * values; only misuse (bad arguments, use after close) throws.
 */
import { BoundedMap } from '../common/bounded-map.js';
import { GrantLatency } from './signer-choice.js';
import { TurnTiming } from './turn-timing.js';
import { ResourceListeners } from './resource-listeners.js';
import { EventEmitter } from 'node:events';
import { randomBytes } from 'node:crypto';
import { copyBytes, fromHex, toHex } from '../common/bytes.js';
import { SESSION_BYTES } from '../protocol/messages.js';
import { QuorumFenceError } from '../common/errors.js';
import { expectEpoch, expectInteger, expectResource } from '../common/check.js';
import type { Cluster } from '../cluster/description.js';
import { acquireGrant, type AcquiredGrant, type AcquireRefusal } from './acquire.js';
import type { ConnectionState } from './connection-state.js';
import { EvidenceLog, type Evidence, type ReplicaFault } from './evidence.js';
import type { Identity } from './identity.js';
import { Lease, type LeaseEnd } from './lease.js';
import { releaseGrant, type ReleaseResult } from './lease-calls.js';
import { resolveClientOptions, type ClientOptions } from './options.js';
import type { QuorumContext } from './quorum-context.js';
import { ReplicaConnection } from './replica-connection.js';
import { resourceStatus, type ResourceStatus } from './status.js';
import { replicaLeases, type ReplicaLeases } from './active-leases.js';

/** Longest ttl, wait or timeout accepted: the wire carries ttl as a u31 of milliseconds. */
const MAX_DURATION_MS = 0x7fff_ffff;

export interface AcquireOptions {
  /** Lease length each replica grants (default: the client's defaultTtlMs). */
  readonly ttlMs?: number;
  /** How long to keep waiting while another holder has the resource (default 0: one look, then `busy`). */
  readonly waitMs?: number;
  /** Hard limit for the whole call (default: waitMs + the client's acquireTimeoutMs). */
  readonly timeoutMs?: number;
  /** Cancels the acquire; it then resolves `{ ok: false, reason: 'aborted' }` and keeps nothing. */
  readonly signal?: AbortSignal;
  /** Renew automatically before the lease view ends (default true). */
  readonly autoRenew?: boolean;
  /** Called once if the lease ends without being released (expired, lost, client closed). */
  readonly onLost?: (end: LeaseEnd) => void;
  /**
   * Crash recovery (docs/protocol.md, "Sessions"): a lease this identity holds under another session (a process
   * that crashed) is ended by this acquire, which gets a new epoch, instead of being waited out. Without it, another
   * session's lease answers `busy` like any other holder's.
   */
  readonly resume?: boolean;
}

export type AcquireResult =
  { readonly ok: true; readonly lease: Lease; readonly faults: readonly ReplicaFault[] } | AcquireRefusal;

export interface ClientConstructionOptions extends Partial<ClientOptions> {
  /** Share one evidence log between clients (e.g. several identities) to catch a replica signing two holders. */
  readonly evidenceLog?: EvidenceLog;
  /**
   * The session this client speaks for (16 bytes, or 32 hex digits): by default a fresh random one, so two clients
   * of one identity are two holders (docs/protocol.md, "Sessions"). Pass an earlier client's `session` to release
   * or renew its leases from another process (the CLI's `release --session`).
   */
  readonly session?: Uint8Array | string;
}

export interface ReplicaConnectionInfo {
  readonly replica: number;
  readonly endpoint: string;
  readonly state: ConnectionState;
}

export interface ClientEvents {
  /** A replica misbehaved (malformed frame, wrong challenge, invalid reply or partial). */
  fault: [ReplicaFault];
  /** New evidence was recorded. */
  evidence: [Evidence];
  /** A connection changed state (connected, dropped, reconnecting). */
  connection: [ReplicaConnectionInfo];
}

export class QuorumFenceClient extends EventEmitter<ClientEvents> implements AsyncDisposable {
  readonly cluster: Cluster;
  readonly identity: Identity;
  readonly options: Readonly<ClientOptions>;
  /** This client's session id, hex (docs/protocol.md, "Sessions"). */
  readonly session: string;
  readonly #connections: ReplicaConnection[];
  readonly #listeners = new Set<() => void>();
  /** Resource → the busy waiters of this client listening for a release notice (only while they wait). */
  readonly #releaseListeners = new ResourceListeners<[]>();
  readonly #turnListeners = new ResourceListeners<[replica: number, epoch: bigint]>();
  readonly #leases = new Set<Lease>();
  readonly #evidence: EvidenceLog;
  readonly #ctx: QuorumContext;
  /** Release rounds still running (a release resolves once sent): close() waits for them. */
  readonly #releases = new Set<Promise<unknown>>();
  #closed = false;

  /**
   * Starts connecting to every replica at once; use `QuorumFenceClient.connect` to also wait for the first connections.
   * @throws QuorumFenceError INVALID_ARGUMENT for bad options.
   */
  constructor(cluster: Cluster, identity: Identity, options: ClientConstructionOptions = {}) {
    super();
    const { evidenceLog, session, ...rest } = options;
    this.cluster = cluster;
    this.identity = identity;
    this.options = resolveClientOptions(rest);
    const sessionBytes = sessionFrom(session);
    this.session = toHex(sessionBytes);
    this.#evidence =
      evidenceLog ??
      new EvidenceLog({ maxEvidence: this.options.maxEvidence, partialMemorySize: this.options.partialMemorySize });
    this.#evidence.subscribe((item) => this.emit('evidence', item));
    const logger = this.options.logger;
    const turnTiming = new TurnTiming(cluster.f);
    this.#connections = cluster.replicas.map(
      (replica) =>
        new ReplicaConnection(replica, {
          clusterId: cluster.id,
          identity,
          session: sessionBytes,
          options: this.options,
          onChange: (connection) => {
            logger.debug(
              { replica: connection.index, phase: connection.state.phase, failure: connection.state.lastFailure },
              'replica connection',
            );
            this.emit('connection', {
              replica: connection.index,
              endpoint: connection.endpoint,
              state: connection.state,
            });
            for (const listener of this.#listeners) listener();
          },
          onFault: (fault) => {
            logger.warn({ replica: fault.replica, kind: fault.kind, message: fault.message }, 'replica fault');
            this.emit('fault', fault);
          },
          onReleased: (_replica, resource) => this.#releaseListeners.notify(resource),
          onTurn: (replica, resource, epoch) => this.#turnListeners.notify(resource, replica, epoch),
          turnTiming,
        }),
    );
    this.#ctx = {
      cluster,
      backend: cluster.backend,
      identity,
      options: this.options,
      channels: {
        channels: this.#connections,
        subscribe: (listener) => {
          this.#listeners.add(listener);
          return () => this.#listeners.delete(listener);
        },
      },
      evidence: this.#evidence,
      epochHints: new BoundedMap(this.options.epochHintCacheSize),
      grantLatency: new GrantLatency(),
      releases: this.#releases,
      onReleased: (resource, listener) => this.#releaseListeners.listen(resource, listener),
      onTurn: (resource, listener) => this.#turnListeners.listen(resource, listener),
    };
    for (const connection of this.#connections) connection.start();
  }

  /**
   * Creates a client and waits until t replicas are connected, or every
   * replica's first attempt has ended, or the handshake timeout passed. Never
   * fails for unreachable replicas: acquire reports `unavailable` if too few
   * come up. See `replicas()` for each connection's state.
   * @throws QuorumFenceError INVALID_ARGUMENT for bad options.
   */
  static async connect(
    cluster: Cluster,
    identity: Identity,
    options: ClientConstructionOptions = {},
  ): Promise<QuorumFenceClient> {
    const client = new QuorumFenceClient(cluster, identity, options);
    await client.#settled(client.options.handshakeTimeoutMs);
    return client;
  }

  #settled(timeoutMs: number): Promise<void> {
    const done = () =>
      this.#connections.filter((c) => c.state.phase === 'ready').length >= this.cluster.t ||
      this.#connections.every((c) => c.state.phase === 'ready' || c.state.failures > 0 || c.state.phase === 'closed');
    if (done()) return Promise.resolve();
    return new Promise((resolve) => {
      const finish = () => {
        this.options.clock.clearTimeout(timer);
        this.#listeners.delete(check);
        resolve();
      };
      const check = () => {
        if (done()) finish();
      };
      const timer = this.options.clock.setTimeout(finish, timeoutMs);
      this.#listeners.add(check);
    });
  }

  /** True after close(). */
  get isClosed(): boolean {
    return this.#closed;
  }

  /** Each replica's connection: phase (ready, connecting, backoff, ...) and how the last attempt failed. */
  replicas(): ReplicaConnectionInfo[] {
    return this.#connections.map((c) => ({ replica: c.index, endpoint: c.endpoint, state: c.state }));
  }

  /** Evidence of replica misbehaviour collected so far (bounded; oldest dropped first). */
  evidence(): readonly Evidence[] {
    return this.#evidence.list();
  }

  /** Leases this client holds right now. */
  leases(): Lease[] {
    return [...this.#leases];
  }

  /**
   * Acquires a lease on `resource`: an admission token signed by a quorum,
   * kept alive by automatic renewal until released.
   * @returns `{ ok: true, lease }`, or `{ ok: false, reason }` with reason busy, timeout, unavailable, aborted, forbidden or invalid.
   * @throws QuorumFenceError INVALID_ARGUMENT / RESOURCE_* / NAME_CONTROL_CHARACTER for bad arguments; CLOSED after close();
   *   EPOCH_OUT_OF_RANGE if the resource's 2^63-1 epochs are used up.
   */
  async acquire(resource: string, options: AcquireOptions = {}): Promise<AcquireResult> {
    this.#assertOpen();
    expectResource(resource);
    const ttlMs = expectInteger(options.ttlMs ?? this.options.defaultTtlMs, 1, MAX_DURATION_MS, 'ttlMs');
    const waitMs = expectInteger(options.waitMs ?? 0, 0, MAX_DURATION_MS, 'waitMs');
    const timeoutMs = expectInteger(
      options.timeoutMs ?? Math.min(MAX_DURATION_MS, waitMs + this.options.acquireTimeoutMs),
      1,
      MAX_DURATION_MS,
      'timeoutMs',
    );
    const result = await acquireGrant(this.#ctx, {
      resource,
      ttlMs,
      waitMs,
      timeoutMs,
      signal: options.signal,
      resume: options.resume === true,
    });
    if (!result.ok) return result;
    if (this.#closed) {
      // Closed while acquiring: hand the grant straight back rather than return a lease nothing can renew.
      const lease = this.#makeLease(result.grant, result.faults, options);
      void lease.release();
      throw new QuorumFenceError('CLOSED', 'the client was closed during acquire');
    }
    return { ok: true, lease: this.#makeLease(result.grant, result.faults, options), faults: result.faults };
  }

  #makeLease(grant: AcquiredGrant, faults: readonly ReplicaFault[], options: AcquireOptions): Lease {
    return new Lease(
      this.#ctx,
      grant,
      faults,
      { autoRenew: options.autoRenew ?? true, onLost: options.onLost },
      (lease) => {
        this.#leases.add(lease);
        return () => this.#leases.delete(lease);
      },
    );
  }

  /**
   * Each replica's view of `resource` and a quorum summary. Waits up to
   * `timeoutMs` (default: the client's requestTimeoutMs) for answers.
   * @throws QuorumFenceError INVALID_ARGUMENT / RESOURCE_* / NAME_CONTROL_CHARACTER for bad arguments; CLOSED after close().
   */
  async status(resource: string, options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<ResourceStatus> {
    this.#assertOpen();
    expectResource(resource);
    const timeoutMs = expectInteger(
      options.timeoutMs ?? this.options.requestTimeoutMs,
      1,
      MAX_DURATION_MS,
      'timeoutMs',
    );
    return resourceStatus(this.#ctx, resource, timeoutMs, options.signal);
  }

  /**
   * Each replica's running leases (the read-only `leases` request; at most 32 per replica), each its own word.
   * For monitoring (the operator console); nothing here is checked against the other replicas.
   * @throws QuorumFenceError INVALID_ARGUMENT for a bad timeout; CLOSED after close().
   */
  async replicaLeases(options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<ReplicaLeases[]> {
    this.#assertOpen();
    const timeoutMs = expectInteger(
      options.timeoutMs ?? this.options.requestTimeoutMs,
      1,
      MAX_DURATION_MS,
      'timeoutMs',
    );
    return replicaLeases(this.#ctx, timeoutMs, undefined, options.signal);
  }

  /**
   * Releases this identity's grant of `epoch` on `resource` without its Lease object: for a lease another
   * process of the same identity took (`quorumfence release`). A lease this client holds is ended with
   * `lease.release()` instead, which also stops its renewal. Succeeds once t replicas confirm.
   * @returns `{ ok: true }`, or `{ ok: false, reason }`: `not_holder` when f+1 replicas say the epoch is not (or no longer) this identity's.
   * @throws QuorumFenceError INVALID_ARGUMENT / RESOURCE_* / NAME_CONTROL_CHARACTER / EPOCH_OUT_OF_RANGE for bad arguments; CLOSED after close().
   */
  async release(resource: string, epoch: bigint, options: { signal?: AbortSignal } = {}): Promise<ReleaseResult> {
    this.#assertOpen();
    expectResource(resource);
    expectEpoch(epoch);
    return releaseGrant(this.#ctx, { resource, epoch }, options.signal).done;
  }

  /**
   * Releases every lease still held (quiet releases, sent before the connections close), waits for every answered
   * release round still running (`release({ wait: true })`, `client.release`: each at most requestTimeoutMs),
   * then closes every connection. Idempotent.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const lease of [...this.#leases]) void lease.release();
    await Promise.allSettled([...this.#releases]);
    for (const lease of [...this.#leases]) lease.clientClosed();
    for (const connection of this.#connections) connection.close();
    this.#listeners.clear();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #assertOpen(): void {
    if (this.#closed) throw new QuorumFenceError('CLOSED', 'the client is closed');
  }
}

/** A client's session id: the one given (16 bytes or 32 hex digits), or a fresh random one. */
function sessionFrom(session: Uint8Array | string | undefined): Uint8Array {
  if (session === undefined) return new Uint8Array(randomBytes(SESSION_BYTES));
  if (typeof session === 'string') return fromHex(session, SESSION_BYTES, 'session');
  if (!(session instanceof Uint8Array) || session.length !== SESSION_BYTES)
    throw new QuorumFenceError('INVALID_ARGUMENT', `"session" expected ${SESSION_BYTES} bytes`, { field: 'session' });
  return copyBytes(session);
}
