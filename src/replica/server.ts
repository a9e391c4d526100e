/**
 * The replica's network face and its wiring: one HTTP(S) server carrying the WebSocket protocol (upgrade on
 * any path; connections.ts: authentication, framing, limits), `GET /healthz`, `GET /metrics`, and the
 * operator's `POST /admin/freeze` (docs/resharing.md; http-endpoints.ts), which answers only a request
 * presenting the operator secret. Here: start-up (store, signer, service, metrics, listening), what an
 * admitted request does, the periodic compaction, and the graceful stop.
 *
 * Connections told that a resource is held (a busy acquire, a status with a
 * running lease) get a `released` notice when its holder releases it, so
 * waiters need not poll fast; the waiter sets are bounded (ReplicaLimits).
 */
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Duplex } from 'node:stream';
import { checkOperatorSecret } from '../common/operator-secret.js';
import { WebSocketServer } from 'ws';
import { QuorumFenceError } from '../common/errors.js';
import { systemClock, type Clock } from '../common/clock.js';
import { silentLogger, type Logger } from '../common/log.js';
import type { Cluster } from '../cluster/description.js';
import type { ReplicaKey } from '../cluster/replica-key.js';
import type { LeasesOutcome, Outcome } from '../protocol/messages.js';
import type { AccessRules } from './access.js';
import { ReplicaConnections, type Connection } from './connections.js';
import { RequestDispatch, type DispatchHost } from './dispatch.js';
import { serveReplicaHttp, type ReplicaHttpContext } from './http-endpoints.js';
import { ReplicaMetrics } from './metrics.js';
import { policyConfig, replicaLimits, type ReplicaLimits } from './options.js';
import { EvidenceAllowance, EvidenceChecker } from './grant-evidence.js';
import { RequestLog } from './request-log.js';
import { ReleaseWatchers } from './release-notices.js';
import { ReplicaService } from './service.js';
import { inThreadSigner, startWorkerSigner, type PartialSigner } from './signer.js';
import { probeSigningRecord, SigningRecord } from './signing-record.js';

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
   * Create the signing record when `dataDir` has none (default false: refused, STORE_MISSING). `replica run` never
   * sets it (the commands that know a replica is new create its record); tests and the Byzantine tool may.
   */
  readonly createStore?: boolean;
  /**
   * What unlocks POST /admin/freeze (`Authorization: Bearer <secret>`); without one the endpoint refuses
   * everyone. See common/operator-secret.ts.
   */
  readonly operatorSecret?: string;
}

export class ReplicaServer {
  readonly url: string;
  /** Connections told a resource is held, to be told of its release (release-notices.ts). */
  readonly #watchers: ReleaseWatchers<Connection>;
  readonly healthUrl: string;
  readonly port: number;
  readonly service: ReplicaService;
  readonly metrics: ReplicaMetrics;
  readonly limits: ReplicaLimits;
  readonly #http: HttpServer;
  readonly #signer: PartialSigner;
  readonly #index: number;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #connections: ReplicaConnections;
  readonly #httpContext: ReplicaHttpContext;
  /** Who pays for catch-up evidence checks: each identity, and the process (grant-evidence.ts). */
  readonly #evidenceAllowance: EvidenceAllowance;
  /** What an authenticated request does (dispatch.ts, shared with the simulator). */
  readonly #dispatch: RequestDispatch<Connection>;
  #inFlight = 0;
  #closing: Promise<void> | undefined;
  /** For /healthz: when this server started (wall clock, ms) and the last error it logged. */
  readonly #startedAt = Date.now();
  #lastError: { readonly at: string; readonly message: string } | undefined;
  /** Runs compaction every compactionIntervalMs (docs/storage.md). */
  #compactionTimer: NodeJS.Timeout | undefined;
  /** The grant and refusal lines, limited, with their periodic summaries (request-log.ts). */
  readonly #requestLog: RequestLog;

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
    this.service = fields.service;
    this.#signer = fields.signer;
    this.metrics = fields.metrics;
    this.limits = fields.limits;
    this.#watchers = new ReleaseWatchers(this.limits.maxWatchedResources, this.limits.maxWaitersPerResource);
    this.#index = fields.index;
    this.#logger = fields.logger;
    this.#clock = fields.clock;
    this.#requestLog = new RequestLog(fields.logger, fields.clock);
    this.#evidenceAllowance = new EvidenceAllowance(
      { perIdentity: fields.limits.evidenceChecksPerSecondPerIdentity, total: fields.limits.evidenceChecksPerSecond },
      () => this.#clock.now(),
    );
    this.#dispatch = new RequestDispatch(this.#dispatchHost());
    this.#connections = new ReplicaConnections({
      wss: fields.wss,
      limits: fields.limits,
      metrics: fields.metrics,
      cluster: fields.cluster,
      index: fields.index,
      clock: fields.clock,
      logger: fields.logger,
      ready: () => this.ready,
      floor: () => this.service.store.floor,
      dispatch: (connection, request, holder) =>
        this.#dispatch.dispatch(connection, request, holder, (message) => this.#connections.send(connection, message)),
    });
    this.#httpContext = {
      replica: fields.index,
      cluster: fields.cluster,
      signer: fields.signer,
      service: fields.service,
      metrics: fields.metrics,
      logger: fields.logger,
      logLimiter: this.#requestLog.limiter,
      clock: fields.clock,
      operatorSecret: fields.operatorSecret,
      startedAt: this.#startedAt,
      ready: () => this.ready,
      lastError: () => this.#lastError,
    };
    this.#compactionTimer = setInterval(() => this.#compactNow(), fields.limits.compactionIntervalMs);
    this.#compactionTimer.unref();
  }

  #compactNow(): void {
    if (this.#closing) return;
    const started = performance.now();
    this.service.compact().then(
      (summary) => {
        this.metrics.compactedRecords.inc(summary.compacted);
        // A run that folded nothing is routine (every compactionIntervalMs): debug only.
        this.#logger[summary.compacted > 0 ? 'info' : 'debug'](
          {
            event: 'compaction',
            ...summary,
            floor: summary.floor.toString(),
            ms: Math.round(performance.now() - started),
          },
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
   * @throws QuorumFenceError INVALID_OPTION, CLUSTER_MISMATCH, STORE_CORRUPT, STORE_MISSING, STORE_LOCKED, IO_ERROR,
   *   INTERNAL
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
    const signer = await startSigner(options, limits, (error) => fatal?.(error));
    let store: SigningRecord | undefined;
    try {
      const probeFailure = await probing;
      if (probeFailure) throw probeFailure;
      // Metrics and service refer to each other: each reads the other through a late-bound reference.
      const late: { metrics?: ReplicaMetrics; service?: ReplicaService } = {};
      store = SigningRecord.open(
        options.dataDir,
        { clusterId: cluster.id, replicaIndex: key.index },
        {
          onFlush: (ms) => late.metrics?.flushSeconds.observe(ms / 1000),
          probe: false,
          create: options.createStore === true,
        },
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
        policy: policyConfig(cluster, limits, options.access),
        evidence: new EvidenceChecker(cluster, key.index, undefined, { maxPending: limits.evidenceChecksPerSecond }),
      });
      late.service = service;
      const http = createReplicaHttp(limits, options.tls);
      const wss = new WebSocketServer({
        noServer: true,
        maxPayload: limits.maxFrameBytes,
        perMessageDeflate: false,
        clientTracking: false,
      });
      const host = options.host ?? '127.0.0.1';
      await listen(http, host, options.port ?? 0);
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
      http.on('request', (req, res) => serveReplicaHttp(server.#httpContext, req, res));
      http.on('upgrade', (req, socket, head) => server.#connections.onUpgrade(req, socket as Duplex, head));
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

  /** The server's side of dispatch.ts: frames through the connections, the request log, in-flight counts. */
  #dispatchHost(): DispatchHost<Connection> {
    return {
      service: () => this.service,
      watchers: () => this.#watchers,
      push: (connection, message) => this.#connections.send(connection, message),
      evidenceBudget: (connection, holder) => this.#evidenceAllowance.budgetFor(holder, connection.evidenceChecks),
      begin: (connection, request, holder, replies) => {
        const answered = (outcome: Outcome | LeasesOutcome) => this.#requestLog.answered(request, holder, outcome);
        // `leases` is answered before dispatch returns: nothing in flight.
        if (request.type === 'leases') return { answered };
        // A quiet release takes no in-flight slot of its connection (isQuietRelease): its client cannot know when
        // it would free one. The server's count includes it, so that a graceful stop lets it finish.
        if (replies) connection.inFlight++;
        this.#inFlight++;
        return {
          answered,
          failed: (error) => {
            this.#logger.error(
              { err: error, resource: request.resource.slice(0, 64), type: request.type },
              'request failed',
            );
            this.#noteError(`${request.type} failed`, error);
          },
          settled: () => {
            if (replies) connection.inFlight--;
            this.#inFlight--;
          },
        };
      },
    };
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
    await this.#connections.closeAll();
    this.#http.closeAllConnections();
    await this.service.store.close();
    await this.#signer.close();
    this.#requestLog.close();
    this.#logger.info({ replica: this.#index }, 'stopped');
  }
}

/** The signing threads (or the calling thread with signingWorkers 0); `onFatal` hears a thread that died. */
function startSigner(
  options: ReplicaServerOptions,
  limits: ReplicaLimits,
  onFatal: (error: Error) => void,
): Promise<PartialSigner> {
  const { cluster, key } = options;
  if (limits.signingWorkers === 0) return Promise.resolve(inThreadSigner(cluster.backend, key.secretKey));
  return startWorkerSigner({
    workers: limits.signingWorkers,
    cluster: options.clusterJson,
    key: options.keyJson,
    backend: cluster.backend.name,
    inline: { backend: cluster.backend, secretKey: key.secretKey },
    onFatal,
  });
}

/**
 * The HTTP(S) server. A request head (an upgrade, /healthz, /metrics) gets authTimeoutMs, as an unauthenticated
 * socket does: Node's defaults (60 s, checked every 30 s) let a slow client hold sockets that maxConnections does
 * not count.
 * @throws QuorumFenceError INVALID_OPTION for an unusable certificate or key
 */
function createReplicaHttp(limits: ReplicaLimits, tls: ReplicaServerOptions['tls']): HttpServer {
  const deadlines = {
    headersTimeout: limits.authTimeoutMs,
    requestTimeout: limits.authTimeoutMs,
    connectionsCheckingInterval: Math.max(100, Math.min(1_000, Math.floor(limits.authTimeoutMs / 10))),
  };
  try {
    return tls ? createHttpsServer({ ...deadlines, cert: tls.cert, key: tls.key }) : createHttpServer(deadlines);
  } catch (error) {
    throw new QuorumFenceError(
      'INVALID_OPTION',
      `TLS certificate or key unusable: ${(error as Error).message}`,
      undefined,
      {
        cause: error,
      },
    );
  }
}

/** @throws QuorumFenceError IO_ERROR when the address cannot be listened on */
async function listen(http: HttpServer, host: string, port: number): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(port, host, () => {
      http.off('error', reject);
      resolve();
    });
  }).catch((error: NodeJS.ErrnoException) => {
    throw new QuorumFenceError('IO_ERROR', `cannot listen on ${host}:${port}: ${error.message}`, undefined, {
      cause: error,
    });
  });
}
