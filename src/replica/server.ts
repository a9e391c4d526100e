/**
 * The replica's network face: one HTTP(S) server carrying the WebSocket
 * protocol (upgrade on any path), `GET /healthz`, `GET /metrics`, and the
 * operator's `POST /admin/freeze` (docs/resharing.md), which answers only a
 * request presenting the operator secret.
 *
 * Per connection: the replica sends a challenge; the client proves its
 * Ed25519 key over authTranscript(nonce, clusterId, replica index); then each
 * request gets a reply or an error frame. Every frame is decoded by the one
 * strict codec, and anything it refuses closes the connection; nothing a peer
 * sends can change state except a well-formed, authenticated, permitted
 * request, or crash the process.
 *
 *   text frame                               → close 1003
 *   frame over maxFrameBytes                 → close 1009 (ws maxPayload)
 *   undecodable / malformed / unknown type   → close 1002
 *   request before hello                     → error UNAUTHENTICATED, close 1008
 *   hello with a bad signature (or replayed),
 *     or a small-order / non-canonical key  → close 1008
 *   upgrade over maxConnections, or over maxUnauthenticatedPerAddress
 *     from the peer's IP address            → HTTP 503, no WebSocket
 *   second hello                             → close 1002
 *   over the in-flight bound or rate         → error RATE_LIMITED (closed with 1008 after many in a row)
 *
 * Connections told that a resource is held (a busy acquire, a status with a
 * running lease) get a `released` notice when its holder releases it, so
 * waiters need not poll fast; the waiter sets are bounded (ReplicaLimits).
 *   no hello within authTimeoutMs            → close 1008
 */
import { BoundedMap } from '../common/bounded-map.js';
import { randomBytes } from 'node:crypto';
import {
  createServer as createHttpServer,
  type IncomingMessage,
  type Server as HttpServer,
  type ServerResponse,
} from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Duplex } from 'node:stream';
import { ed25519 } from '@noble/curves/ed25519.js';
import { isUsableHolderKey } from '../common/holder-key.js';
import { checkOperatorSecret, presentsOperatorSecret } from '../common/operator-secret.js';
import { WebSocketServer, type WebSocket } from 'ws';
import { QuorumFenceError, isQuorumFenceError } from '../common/errors.js';
import { PACKAGE_VERSION } from '../common/version.js';
import { systemClock, type Clock, type TimerHandle } from '../common/clock.js';
import { silentLogger, type Logger } from '../common/log.js';
import type { Cluster } from '../cluster/description.js';
import type { ReplicaKey } from '../cluster/replica-key.js';
import { decodeClientMessage, encodeMessage } from '../protocol/codec.js';
import {
  CloseCode,
  NONCE_BYTES,
  authTranscript,
  type Request,
  type ServerMessage,
  type WireErrorCode,
  type WireRequest,
} from '../protocol/messages.js';
import { OPEN_ACCESS, type AccessRules } from './access.js';
import { ReplicaMetrics } from './metrics.js';
import { replicaLimits, type ReplicaLimits } from './options.js';
import { ReplicaService } from './service.js';
import { inThreadSigner, startWorkerSigner, type PartialSigner } from './signer.js';
import { probeSigningRecord, SigningRecord } from './signing-record.js';
import { frozenError } from './freeze-marker.js';

export interface ReplicaServerOptions {
  readonly cluster: Cluster;
  /** The replica's key, already checked against the cluster (loadReplicaKeyFile / parseReplicaKey). */
  readonly key: ReplicaKey;
  /** The parsed cluster description and key file, for signing threads to load the key themselves. */
  readonly clusterJson: unknown;
  readonly keyJson: unknown;
  readonly dataDir: string;
  readonly host?: string;
  /** 0 picks a free port. */
  readonly port?: number;
  readonly access?: AccessRules;
  readonly limits?: Partial<ReplicaLimits>;
  /** PEM certificate and key: serve https + wss instead of http + ws. */
  readonly tls?: { readonly cert: string | Buffer; readonly key: string | Buffer };
  readonly clock?: Clock;
  readonly logger?: Logger;
  /**
   * A running probeSigningRecord(dataDir), started early so it overlaps other
   * start-up work; without it, the store is probed when opened.
   */
  readonly storeProbe?: Promise<void>;
  /** Called when the replica can no longer work (a signing thread died); the process should stop. */
  readonly onFatal?: (error: Error) => void;
  /**
   * What unlocks POST /admin/freeze (`Authorization: Bearer <secret>`); without one the endpoint refuses
   * everyone. See common/operator-secret.ts.
   */
  readonly operatorSecret?: string;
}

/** The largest body POST /admin/freeze reads (a JSON object with a short reason). */
const MAX_ADMIN_BODY_BYTES = 1024;

interface Connection {
  readonly socket: WebSocket;
  /** The TCP/TLS stream under the WebSocket, for corking (ws keeps it in `_socket`). */
  readonly stream: Duplex | undefined;
  /** Replies written this turn are held in the stream until setImmediate uncorks it. */
  corked: boolean;
  readonly nonce: Uint8Array;
  holder: Uint8Array | undefined;
  inFlight: number;
  tokens: number;
  refilledAt: number;
  consecutiveLimited: number;
  authTimer: TimerHandle;
  /** The peer's IP address while it counts against maxUnauthenticatedPerAddress; undefined once authenticated or closed. */
  unauthenticatedFrom: string | undefined;
  /** Aborted when the connection closes: its acquires waiting their turn leave the line. */
  readonly closed: AbortController;
}

export class ReplicaServer {
  readonly url: string;
  /** Resource → connections told `busy` for it since its last release (insertion order = age). */
  readonly #waiters: BoundedMap<string, Set<Connection>>;
  readonly healthUrl: string;
  readonly port: number;
  readonly service: ReplicaService;
  readonly metrics: ReplicaMetrics;
  readonly limits: ReplicaLimits;
  readonly #http: HttpServer;
  readonly #wss: WebSocketServer;
  readonly #signer: PartialSigner;
  readonly #cluster: Cluster;
  readonly #index: number;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #operatorSecret: string | undefined;
  readonly #connections = new Set<Connection>();
  /** IP address → connections from it not yet authenticated (see maxUnauthenticatedPerAddress). */
  readonly #unauthenticatedByAddress = new Map<string, number>();
  #inFlight = 0;
  #closing: Promise<void> | undefined;
  /** For /healthz: when this server started (wall clock, ms) and the last error it logged. */
  readonly #startedAt = Date.now();
  #lastError: { readonly at: string; readonly message: string } | undefined;
  /** Runs compaction every compactionIntervalMs (docs/storage.md). */
  #compactionTimer: NodeJS.Timeout | undefined;

  private constructor(fields: {
    url: string;
    port: number;
    http: HttpServer;
    wss: WebSocketServer;
    service: ReplicaService;
    signer: PartialSigner;
    metrics: ReplicaMetrics;
    limits: ReplicaLimits;
    cluster: Cluster;
    index: number;
    logger: Logger;
    clock: Clock;
    operatorSecret: string | undefined;
  }) {
    this.url = fields.url;
    this.port = fields.port;
    this.healthUrl = fields.url.replace(/^ws/, 'http') + '/healthz';
    this.#http = fields.http;
    this.#wss = fields.wss;
    this.service = fields.service;
    this.#signer = fields.signer;
    this.metrics = fields.metrics;
    this.limits = fields.limits;
    this.#waiters = new BoundedMap(this.limits.maxWatchedResources);
    this.#cluster = fields.cluster;
    this.#index = fields.index;
    this.#logger = fields.logger;
    this.#clock = fields.clock;
    this.#operatorSecret = fields.operatorSecret;
    this.#compactionTimer = setInterval(() => this.#compactNow(), fields.limits.compactionIntervalMs);
    this.#compactionTimer.unref();
  }

  #compactNow(): void {
    if (this.#closing) return;
    const started = performance.now();
    this.service.compact().then(
      (summary) => {
        this.metrics.compactedRecords.inc(summary.compacted);
        if (summary.compacted > 0)
          this.#logger.info(
            { ...summary, floor: summary.floor.toString(), ms: Math.round(performance.now() - started) },
            'compacted the signing record',
          );
      },
      (error: unknown) => {
        if (this.#closing) return;
        this.#logger.error({ err: error }, 'compaction failed; will retry');
        this.#noteError('compaction failed', error);
      },
    );
  }

  /**
   * Opens the signing record, starts the signer, and listens. Resolves once
   * /healthz answers 200.
   * @throws QuorumFenceError INVALID_OPTION, CLUSTER_MISMATCH, STORE_CORRUPT, STORE_LOCKED, IO_ERROR, INTERNAL
   */
  static async start(options: ReplicaServerOptions): Promise<ReplicaServer> {
    const limits = replicaLimits(options.limits);
    const logger = options.logger ?? silentLogger;
    const clock = options.clock ?? systemClock;
    const { cluster, key } = options;
    const operatorSecret =
      options.operatorSecret === undefined ? undefined : checkOperatorSecret(options.operatorSecret);
    let fatal: ((error: Error) => void) | undefined = options.onFatal;
    // Probe the store (a child process) while the signing threads load the key.
    const probing = (options.storeProbe ?? probeSigningRecord(options.dataDir)).then(
      () => undefined,
      (error: unknown) => error,
    );
    const signer =
      limits.signingWorkers === 0
        ? inThreadSigner(cluster.backend, key.secretKey)
        : await startWorkerSigner({
            workers: limits.signingWorkers,
            cluster: options.clusterJson,
            key: options.keyJson,
            backend: cluster.backend.name,
            onFatal: (error) => fatal?.(error),
          });
    let store: SigningRecord | undefined;
    try {
      const probeFailure = await probing;
      if (probeFailure) throw probeFailure;
      // Metrics and service refer to each other: each reads the other through a late-bound reference.
      const late: { metrics?: ReplicaMetrics; service?: ReplicaService } = {};
      store = SigningRecord.open(
        options.dataDir,
        { clusterId: cluster.id, replicaIndex: key.index },
        { onFlush: (ms) => late.metrics?.flushSeconds.observe(ms / 1000), probe: false },
      );
      const metrics = new ReplicaMetrics(
        { replica: key.index, cluster: cluster.idHex, n: cluster.n, t: cluster.t },
        () => late.service?.leases.activeCount() ?? 0,
        () => ({ records: store?.size ?? 0, floor: store?.floor ?? 0n }),
        () => late.service?.handoffs.size ?? 0,
      );
      late.metrics = metrics;
      const service = new ReplicaService({
        store,
        signer,
        clock,
        metrics,
        retentionMs: limits.retentionMs,
        timers: clock,
        maxWaitersPerResource: limits.maxWaitersPerResource,
        generation: cluster.membershipVersion,
        policy: {
          clusterId: cluster.id,
          minTtlMs: limits.minTtlMs,
          maxTtlMs: limits.maxTtlMs,
          maxEpochStep: limits.maxEpochStep,
          access: options.access ?? OPEN_ACCESS,
        },
      });
      late.service = service;
      let http: HttpServer;
      try {
        // A request head (an upgrade, /healthz, /metrics) gets authTimeoutMs, as an unauthenticated socket does:
        // Node's defaults (60 s, checked every 30 s) let a slow client hold sockets that maxConnections does not count.
        const deadlines = {
          headersTimeout: limits.authTimeoutMs,
          requestTimeout: limits.authTimeoutMs,
          connectionsCheckingInterval: Math.max(100, Math.min(1_000, Math.floor(limits.authTimeoutMs / 10))),
        };
        http = options.tls
          ? createHttpsServer({ ...deadlines, cert: options.tls.cert, key: options.tls.key })
          : createHttpServer(deadlines);
      } catch (error) {
        throw new QuorumFenceError(
          'INVALID_OPTION',
          `TLS certificate or key unusable: ${(error as Error).message}`,
          undefined,
          { cause: error },
        );
      }
      const wss = new WebSocketServer({
        noServer: true,
        maxPayload: limits.maxFrameBytes,
        perMessageDeflate: false,
        clientTracking: false,
      });
      const host = options.host ?? '127.0.0.1';
      await new Promise<void>((resolve, reject) => {
        http.once('error', reject);
        http.listen(options.port ?? 0, host, () => {
          http.off('error', reject);
          resolve();
        });
      }).catch((error: NodeJS.ErrnoException) => {
        throw new QuorumFenceError(
          'IO_ERROR',
          `cannot listen on ${host}:${options.port ?? 0}: ${error.message}`,
          undefined,
          { cause: error },
        );
      });
      const address = http.address();
      const port = typeof address === 'object' && address ? address.port : (options.port ?? 0);
      const urlHost = host.includes(':') ? `[${host}]` : host;
      const server = new ReplicaServer({
        url: `${options.tls ? 'wss' : 'ws'}://${urlHost}:${port}`,
        port,
        http,
        wss,
        service,
        signer,
        metrics,
        limits,
        cluster,
        index: key.index,
        logger,
        clock,
        operatorSecret,
      });
      fatal = (error) => {
        logger.error({ err: error }, 'fatal: the replica cannot sign any more');
        server.#noteError('fatal: the replica cannot sign any more', error);
        options.onFatal?.(error);
      };
      http.on('request', (req, res) => server.#onHttp(req, res));
      http.on('upgrade', (req, socket, head) => server.#onUpgrade(req, socket as Duplex, head));
      // A client that half-opens a TLS or TCP connection must not crash the process.
      http.on('clientError', (_error, socket) => socket.destroy());
      return server;
    } catch (error) {
      await store?.close().catch(() => undefined);
      await signer.close();
      throw error;
    }
  }

  /** Remembers the last error for /healthz (a short line: the operator console shows it). */
  #noteError(what: string, error: unknown): void {
    const detail =
      error instanceof QuorumFenceError ? error.code : error instanceof Error ? error.message : String(error);
    this.#lastError = { at: new Date().toISOString(), message: `${what}: ${detail}`.slice(0, 200) };
  }

  get ready(): boolean {
    return this.#closing === undefined;
  }

  #onHttp(req: IncomingMessage, res: ServerResponse): void {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/healthz') {
      const ready = this.ready;
      res.writeHead(ready ? 200 : 503, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          status: ready ? 'ok' : 'stopping',
          replica: this.#index,
          clusterId: this.#cluster.idHex,
          backend: this.#cluster.backend.name,
          signingWorkers: this.#signer.workers,
          version: PACKAGE_VERSION,
          uptimeSeconds: Math.floor((Date.now() - this.#startedAt) / 1000),
          lastError: this.#lastError ?? null,
          frozen: this.service.store.frozen !== undefined,
        }),
      );
      return;
    }
    if (req.method === 'GET' && path === '/metrics') {
      this.metrics.registry.metrics().then(
        (text) => {
          res.writeHead(200, { 'content-type': this.metrics.registry.contentType });
          res.end(text);
        },
        (error: Error) => {
          res.writeHead(500, { 'content-type': 'text/plain' });
          res.end(`metrics failed: ${error.message}\n`);
        },
      );
      return;
    }
    if (path === '/admin/freeze') return this.#onFreezeRequest(req, res);
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end('not found: try /healthz, /metrics, or a WebSocket upgrade\n');
  }

  /**
   * POST /admin/freeze, body `{ "reason"?: string }` (optional): the operator freezes this replica for a
   * reshare while it runs. The secret is checked before the body is read; a refused request changes
   * nothing. The answer comes after the freeze marker is flushed (SigningRecord.freeze): from then on
   * every request that would sign is refused with REPLICA_FROZEN, also after a restart.
   */
  #onFreezeRequest(req: IncomingMessage, res: ServerResponse): void {
    const answer = (status: number, body: Record<string, unknown>) => {
      if (res.headersSent) return;
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (req.method !== 'POST') {
      res.setHeader('allow', 'POST');
      return answer(405, { code: 'INVALID_ARGUMENT', message: 'POST only' });
    }
    if (!presentsOperatorSecret(req.headers.authorization, this.#operatorSecret)) {
      req.resume();
      this.#logger.warn({ path: '/admin/freeze' }, 'refused an admin request without the operator secret');
      return answer(401, {
        code: 'UNAUTHENTICATED',
        message:
          this.#operatorSecret === undefined
            ? 'this replica has no operator secret (--operator-secret-file): its admin endpoint is closed'
            : 'expected "Authorization: Bearer <operator secret>"',
      });
    }
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      if (res.headersSent) return; // refused already; the rest is read and dropped (the request timeout bounds it)
      size += chunk.length;
      if (size > MAX_ADMIN_BODY_BYTES)
        return answer(413, { code: 'INVALID_ARGUMENT', message: `the body is over ${MAX_ADMIN_BODY_BYTES} bytes` });
      chunks.push(chunk);
    });
    req.on('error', () => undefined);
    req.on('end', () => {
      if (res.headersSent) return;
      let reason = 'reshare';
      const text = Buffer.concat(chunks).toString('utf8').trim();
      if (text !== '') {
        let body: unknown;
        try {
          body = JSON.parse(text);
        } catch {
          body = undefined;
        }
        const given = (body as { reason?: unknown } | undefined)?.reason;
        if (
          typeof body !== 'object' ||
          body === null ||
          Array.isArray(body) ||
          (given !== undefined && typeof given !== 'string')
        )
          return answer(400, { code: 'INVALID_ARGUMENT', message: 'expected a JSON object { "reason"?: string }' });
        if (typeof given === 'string' && given !== '') reason = given;
      }
      this.service.store.freeze(reason).then(
        (state) => {
          // Acquires waiting their turn here would be refused at their turn: tell them now.
          this.service.handoffs.failAll(frozenError(state));
          this.#logger.warn(
            { replica: this.#index, ...state },
            'frozen for a reshare: this replica signs nothing more',
          );
          answer(200, { frozen: true, replica: this.#index, clusterId: this.#cluster.idHex, ...state });
        },
        (error: unknown) => {
          this.#logger.error({ err: error }, 'freeze failed');
          answer(500, {
            code: error instanceof QuorumFenceError ? error.code : 'INTERNAL',
            message: `the freeze was not recorded: ${(error as Error).message}`,
          });
        },
      );
    });
  }

  #onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    const address = req.socket.remoteAddress ?? '';
    if (
      !this.ready ||
      this.#connections.size >= this.limits.maxConnections ||
      (this.#unauthenticatedByAddress.get(address) ?? 0) >= this.limits.maxUnauthenticatedPerAddress
    ) {
      socket.end('HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    this.#wss.handleUpgrade(req, socket, head, (ws) => this.#onConnection(ws, address));
  }

  /** Counts a connection that has not authenticated against its address (add = 1), or stops counting it (add = -1). */
  #countUnauthenticated(address: string, add: 1 | -1): void {
    const count = (this.#unauthenticatedByAddress.get(address) ?? 0) + add;
    if (count > 0) this.#unauthenticatedByAddress.set(address, count);
    else this.#unauthenticatedByAddress.delete(address);
  }

  #authenticated(connection: Connection): void {
    if (connection.unauthenticatedFrom === undefined) return;
    this.#countUnauthenticated(connection.unauthenticatedFrom, -1);
    connection.unauthenticatedFrom = undefined;
  }

  #onConnection(socket: WebSocket, address: string): void {
    const connection: Connection = {
      socket,
      stream: (socket as unknown as { _socket?: Duplex })._socket,
      corked: false,
      nonce: new Uint8Array(randomBytes(NONCE_BYTES)),
      holder: undefined,
      inFlight: 0,
      tokens: this.limits.burstPerConnection,
      refilledAt: this.#clock.now(),
      consecutiveLimited: 0,
      authTimer: undefined,
      unauthenticatedFrom: address,
      closed: new AbortController(),
    };
    this.#countUnauthenticated(address, 1);
    this.#connections.add(connection);
    this.metrics.connections.inc();
    connection.authTimer = this.#clock.setTimeout(
      () => this.#close(connection, CloseCode.POLICY_VIOLATION, 'authentication timeout'),
      this.limits.authTimeoutMs,
    );
    socket.on('message', (data, isBinary) => {
      try {
        this.#onFrame(connection, data as Buffer, isBinary);
      } catch (error) {
        // A bug, not a peer's fault; never let it take the process down.
        this.#logger.error({ err: error }, 'unexpected error handling a frame');
        this.#close(connection, CloseCode.INTERNAL_ERROR, 'internal error');
      }
    });
    socket.on('error', (error: Error & { code?: string }) => {
      // ws reports frames over maxPayload here and then closes with 1009; other codes are transport errors.
      if (error.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH')
        this.metrics.closes.inc({ code: String(CloseCode.MESSAGE_TOO_BIG) });
      else if (error.code?.startsWith('WS_ERR_')) this.metrics.closes.inc({ code: String(CloseCode.PROTOCOL_ERROR) });
    });
    socket.on('close', () => {
      connection.closed.abort();
      this.#clock.clearTimeout(connection.authTimer);
      this.#authenticated(connection); // stops counting it either way
      if (this.#connections.delete(connection)) this.metrics.connections.dec();
    });
    this.#send(connection, {
      type: 'challenge',
      nonce: connection.nonce,
      clusterId: this.#cluster.id,
      replica: this.#index,
    });
  }

  #onFrame(connection: Connection, data: Buffer, isBinary: boolean): void {
    if (connection.socket.readyState !== connection.socket.OPEN) return;
    if (!isBinary) return this.#close(connection, CloseCode.UNSUPPORTED_DATA, 'binary frames only');
    let message;
    try {
      message = decodeClientMessage(data, this.limits.maxFrameBytes);
    } catch (error) {
      return this.#close(
        connection,
        CloseCode.PROTOCOL_ERROR,
        error instanceof QuorumFenceError ? error.message : 'malformed frame',
      );
    }
    if (!connection.holder) {
      if (message.type !== 'hello') {
        this.#sendError(connection, message.id, 'UNAUTHENTICATED', 'authenticate (hello) before any request');
        return this.#close(connection, CloseCode.POLICY_VIOLATION, 'request before authentication');
      }
      let valid: boolean;
      try {
        // Small-order and non-canonical keys are refused first (one verifies any message); then RFC 8032's strict rules.
        valid =
          isUsableHolderKey(message.holder) &&
          ed25519.verify(
            message.signature,
            authTranscript(connection.nonce, this.#cluster.id, this.#index),
            message.holder,
            { zip215: false },
          );
      } catch {
        valid = false; // A malformed key or signature is just a failed proof.
      }
      if (!valid) return this.#close(connection, CloseCode.POLICY_VIOLATION, 'authentication failed');
      this.#clock.clearTimeout(connection.authTimer);
      connection.authTimer = undefined;
      this.#authenticated(connection);
      connection.holder = message.holder;
      this.#send(connection, { type: 'welcome', id: message.id, replica: this.#index });
      return;
    }
    if (message.type === 'hello') return this.#close(connection, CloseCode.PROTOCOL_ERROR, 'already authenticated');
    if (!this.ready) return this.#sendError(connection, message.id, 'INTERNAL', 'the replica is shutting down');
    if (!this.#admit(connection)) {
      this.#sendError(connection, message.id, 'RATE_LIMITED', 'too many requests; back off');
      if (++connection.consecutiveLimited > this.limits.maxConsecutiveRateLimited) {
        this.#close(connection, CloseCode.POLICY_VIOLATION, 'kept exceeding the rate limit');
      }
      return;
    }
    connection.consecutiveLimited = 0;
    this.#dispatch(connection, message, connection.holder);
  }

  /** The in-flight bound and the token bucket. */
  #admit(connection: Connection): boolean {
    if (connection.inFlight >= this.limits.maxInFlightPerConnection) return false;
    const now = this.#clock.now();
    const rate = this.limits.requestsPerSecondPerConnection / 1000;
    connection.tokens = Math.min(
      this.limits.burstPerConnection,
      connection.tokens + (now - connection.refilledAt) * rate,
    );
    connection.refilledAt = now;
    if (connection.tokens < 1) return false;
    connection.tokens -= 1;
    return true;
  }

  #dispatch(connection: Connection, received: WireRequest, holder: Uint8Array): void {
    if (received.type === 'leases') {
      // Answered at once from memory: no record is written, nothing waits.
      this.#send(connection, { type: 'reply', id: received.id, outcome: this.service.activeLeases(received, holder) });
      return;
    }
    const request: Request = received;
    connection.inFlight++;
    this.#inFlight++;
    this.service
      .handle(request, holder, {
        signal: connection.closed.signal,
        onFirst: (epoch) => this.#send(connection, { type: 'turn', resource: request.resource, epoch }),
      })
      .then(
        (outcome) => {
          this.#send(connection, { type: 'reply', id: request.id, outcome });
          // Whoever learned that someone holds the lease (a busy acquire, or a status showing it) hears of its release.
          if (
            (request.type === 'acquire' && outcome.status === 'busy') ||
            (request.type === 'status' && outcome.status === 'ok' && outcome.leased)
          ) {
            this.#watch(request.resource, connection);
          } else if (request.type === 'release' && outcome.status === 'released')
            this.#announceRelease(request.resource);
        },
        (error: unknown) => {
          // Frozen for a reshare: an expected answer of its own (clients count this replica as unable to vote),
          // not a failure to log per request.
          if (isQuorumFenceError(error, 'REPLICA_FROZEN'))
            return this.#sendError(connection, request.id, 'REPLICA_FROZEN', error.message);
          this.#logger.error(
            { err: error, resource: request.resource.slice(0, 64), type: request.type },
            'request failed',
          );
          this.#noteError(`${request.type} failed`, error);
          this.#sendError(
            connection,
            request.id,
            'INTERNAL',
            error instanceof QuorumFenceError ? error.code : 'internal error',
          );
        },
      )
      .finally(() => {
        connection.inFlight--;
        this.#inFlight--;
      });
  }

  /** Remembers that `connection` waits for `resource` (bounded; see maxWatchedResources). */
  #watch(resource: string, connection: Connection): void {
    let waiters = this.#waiters.get(resource);
    if (!waiters) {
      waiters = new Set();
      this.#waiters.set(resource, waiters);
    }
    if (waiters.size < this.limits.maxWaitersPerResource) waiters.add(connection);
  }

  /** Tells the connections waiting for `resource` that its holder released it. */
  #announceRelease(resource: string): void {
    const waiters = this.#waiters.get(resource);
    if (!waiters) return;
    this.#waiters.delete(resource);
    for (const waiter of waiters) this.#send(waiter, { type: 'released', resource });
  }

  #send(connection: Connection, message: ServerMessage): void {
    const socket = connection.socket;
    if (socket.readyState !== socket.OPEN) return;
    if (socket.bufferedAmount > this.limits.maxBufferedBytesPerConnection) {
      this.metrics.closes.inc({ code: 'dropped' });
      socket.terminate();
      return;
    }
    // Signing threads answer in batches, so many replies become ready in one
    // turn; corking the stream makes them one write instead of one each.
    const stream = connection.stream;
    if (stream && !connection.corked) {
      connection.corked = true;
      stream.cork();
      setImmediate(() => {
        connection.corked = false;
        stream.uncork();
      });
    }
    socket.send(encodeMessage(message));
  }

  #sendError(connection: Connection, id: number | undefined, code: WireErrorCode, message: string): void {
    this.metrics.wireErrors.inc({ code });
    this.#send(connection, id === undefined ? { type: 'error', code, message } : { type: 'error', id, code, message });
  }

  #close(connection: Connection, code: number, reason: string): void {
    const socket = connection.socket;
    if (socket.readyState !== socket.OPEN) return;
    this.metrics.closes.inc({ code: String(code) });
    // Close reasons are limited to 123 bytes by RFC 6455.
    socket.close(code, Buffer.from(reason).subarray(0, 120).toString());
    // A peer that never answers the close handshake must not hold the socket.
    setTimeout(() => socket.terminate(), 2_000).unref();
  }

  /**
   * Graceful stop: refuse new connections and requests, let in-flight
   * requests finish (up to shutdownTimeoutMs), close connections with 1001,
   * stop the signer and close the store. Idempotent.
   */
  close(): Promise<void> {
    this.#closing ??= this.#shutdown();
    return this.#closing;
  }

  async #shutdown(): Promise<void> {
    clearInterval(this.#compactionTimer);
    this.#http.close();
    this.service.handoffs.close();
    const deadline = Date.now() + this.limits.shutdownTimeoutMs;
    while (this.#inFlight > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    for (const connection of this.#connections) {
      this.#clock.clearTimeout(connection.authTimer);
      if (connection.socket.readyState === connection.socket.OPEN)
        connection.socket.close(CloseCode.GOING_AWAY, 'replica shutting down');
    }
    const closeDeadline = Date.now() + 1_000;
    while (this.#connections.size > 0 && Date.now() < closeDeadline) await new Promise((r) => setTimeout(r, 5));
    for (const connection of this.#connections) connection.socket.terminate();
    this.#http.closeAllConnections();
    await this.service.store.close();
    await this.#signer.close();
    this.#logger.info({ replica: this.#index }, 'stopped');
  }
}
