/**
 * The replica's WebSocket connections, one frame at a time: admission of an upgrade (maxConnections,
 * maxUnauthenticated, maxUnauthenticatedPerAddress), the challenge and the hello that authenticates a holder key, the strict
 * decoding of every frame, the per-connection in-flight bound and token bucket, and writing replies (corked,
 * bounded by maxBufferedBytesPerConnection) and closes. What an admitted request does is the server's
 * `dispatch` (server.ts).
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
 *   upgrade with every slot taken and no
 *     connection still unauthenticated       → HTTP 503, no WebSocket
 *   upgrade over maxUnauthenticatedPerAddress
 *     (per address prefix), over
 *     maxUnauthenticated, or at maxConnections → admitted; the oldest unauthenticated connection of its own
 *                                              prefix, or of the prefix holding the most, closed with 1008
 *   second hello                             → close 1002
 *   over the in-flight bound or rate, or
 *     over the `leases` request's own rate   → error RATE_LIMITED (closed with 1008 after many in a row)
 *   no hello within authTimeoutMs            → close 1008
 */
import { randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { WebSocket, WebSocketServer } from 'ws';
import { addressPrefix, displacedBy, type WaitingConnection } from '../common/address-admission.js';
import { toHex } from '../common/bytes.js';
import { verifyEd25519 } from '../common/ed25519.js';
import { QuorumFenceError } from '../common/errors.js';
import type { Clock, TimerHandle } from '../common/clock.js';
import type { Logger } from '../common/log.js';
import type { Cluster } from '../cluster/description.js';
import { decodeClientMessage, encodeMessage } from '../protocol/codec.js';
import {
  CloseCode,
  NONCE_BYTES,
  authTranscript,
  isQuietRelease,
  type Hello,
  type ServerMessage,
  type WireErrorCode,
  type WireRequest,
} from '../protocol/messages.js';
import { TokenBucket } from '../common/token-bucket.js';
import type { ReplicaMetrics } from './metrics.js';
import type { ReplicaLimits } from './options.js';

export interface Connection {
  readonly socket: WebSocket;
  /** The TCP/TLS stream under the WebSocket, for corking (ws keeps it in `_socket`). */
  readonly stream: Duplex | undefined;
  /** Replies written this turn are held in the stream until setImmediate uncorks it. */
  corked: boolean;
  readonly nonce: Uint8Array;
  holder: Uint8Array | undefined;
  /** The client session the hello named, as hex ('' for a sessionless client); set with `holder`. */
  session: string;
  inFlight: number;
  /** Requests per second (requestsPerSecondPerConnection, burstPerConnection). */
  readonly requests: TokenBucket;
  /** Pairing checks of catch-up evidence (evidenceChecksPerSecondPerConnection): each costs about a millisecond. */
  readonly evidenceChecks: TokenBucket;
  /** `leases` requests (leasesPerSecondPerConnection), on top of `requests`. */
  readonly leasesRequests: TokenBucket;
  consecutiveLimited: number;
  authTimer: TimerHandle;
  /** Its place among the connections not yet authenticated; undefined once authenticated, displaced or closed. */
  waiting: WaitingConnection | undefined;
  /** Aborted when the connection closes: its acquires waiting their turn leave the line. */
  readonly closed: AbortController;
}

export interface ReplicaConnectionsOptions {
  readonly wss: WebSocketServer;
  readonly limits: ReplicaLimits;
  readonly metrics: ReplicaMetrics;
  readonly cluster: Cluster;
  readonly index: number;
  readonly clock: Clock;
  readonly logger: Logger;
  /** False once the server is stopping: no new connections, no new requests. */
  readonly ready: () => boolean;
  /** The replica's epoch floor now, told in the welcome (docs/protocol.md, "Epoch choice"). */
  readonly floor: () => bigint;
  /** Handles an authenticated request that passed the rate limits. */
  readonly dispatch: (connection: Connection, request: WireRequest, holder: Uint8Array) => void;
}

export class ReplicaConnections {
  readonly #options: ReplicaConnectionsOptions;
  readonly #limits: ReplicaLimits;
  readonly #metrics: ReplicaMetrics;
  readonly #clock: Clock;
  readonly #connections = new Set<Connection>();
  /** The connections not yet authenticated (maxUnauthenticated, maxUnauthenticatedPerAddress). */
  readonly #waiting = new Map<WaitingConnection, Connection>();
  #arrivals = 0;

  constructor(options: ReplicaConnectionsOptions) {
    this.#options = options;
    this.#limits = options.limits;
    this.#metrics = options.metrics;
    this.#clock = options.clock;
  }

  /**
   * Admits an upgrade unless the replica is stopping, or every slot is taken by authenticated connections. The
   * bounds on connections that have not authenticated yet (per address prefix, in all, and maxConnections itself)
   * make room instead of refusing: the oldest unauthenticated connection of the newcomer's prefix, or of the prefix
   * holding the most, goes (src/common/address-admission.ts). So idle sockets from a few hosts can never keep an
   * honest client out; to push out one whose hello is in flight they must come from prefixes holding as many.
   */
  onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    const prefix = addressPrefix(req.socket.remoteAddress ?? '');
    const slotFree = this.#connections.size < this.#limits.maxConnections;
    const displaced = displacedBy([...this.#waiting.keys()], prefix, {
      perPrefix: this.#limits.maxUnauthenticatedPerAddress,
      total: slotFree ? this.#limits.maxUnauthenticated : 0,
    });
    if (!this.#options.ready() || (!slotFree && !displaced)) {
      socket.end('HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    if (displaced) this.#displace(this.#waiting.get(displaced)!);
    this.#options.wss.handleUpgrade(req, socket, head, (ws) => this.#onConnection(ws, prefix));
  }

  /** Makes room for a newcomer: `connection` stops counting at once, and is closed. */
  #displace(connection: Connection): void {
    this.#authenticated(connection); // no longer waiting
    if (this.#connections.delete(connection)) this.#metrics.connections.dec();
    this.#metrics.closes.inc({ code: 'displaced' });
    this.#clock.clearTimeout(connection.authTimer);
    connection.socket.terminate();
  }

  /** Stops counting `connection` among those not yet authenticated (it authenticated, was displaced, or closed). */
  #authenticated(connection: Connection): void {
    if (connection.waiting === undefined) return;
    this.#waiting.delete(connection.waiting);
    connection.waiting = undefined;
  }

  #onConnection(socket: WebSocket, prefix: string): void {
    const connection: Connection = {
      socket,
      stream: (socket as unknown as { _socket?: Duplex })._socket,
      corked: false,
      nonce: new Uint8Array(randomBytes(NONCE_BYTES)),
      holder: undefined,
      session: '',
      inFlight: 0,
      requests: new TokenBucket(
        this.#limits.requestsPerSecondPerConnection,
        this.#limits.burstPerConnection,
        this.#clock.now(),
      ),
      evidenceChecks: new TokenBucket(
        this.#limits.evidenceChecksPerSecondPerConnection,
        this.#limits.evidenceChecksPerSecondPerConnection,
        this.#clock.now(),
      ),
      leasesRequests: new TokenBucket(
        this.#limits.leasesPerSecondPerConnection,
        this.#limits.leasesPerSecondPerConnection,
        this.#clock.now(),
      ),
      consecutiveLimited: 0,
      authTimer: undefined,
      waiting: { order: this.#arrivals++, prefix },
      closed: new AbortController(),
    };
    this.#waiting.set(connection.waiting!, connection);
    this.#connections.add(connection);
    this.#metrics.connections.inc();
    connection.authTimer = this.#clock.setTimeout(
      () => this.close(connection, CloseCode.POLICY_VIOLATION, 'authentication timeout'),
      this.#limits.authTimeoutMs,
    );
    socket.on('message', (data, isBinary) => {
      try {
        this.#onFrame(connection, data as Buffer, isBinary);
      } catch (error) {
        // A bug, not a peer's fault; never let it take the process down.
        this.#options.logger.error({ err: error }, 'unexpected error handling a frame');
        this.close(connection, CloseCode.INTERNAL_ERROR, 'internal error');
      }
    });
    socket.on('error', (error: Error & { code?: string }) => {
      // ws reports frames over maxPayload here and then closes with 1009; other codes are transport errors.
      if (error.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH')
        this.#metrics.closes.inc({ code: String(CloseCode.MESSAGE_TOO_BIG) });
      else if (error.code?.startsWith('WS_ERR_')) this.#metrics.closes.inc({ code: String(CloseCode.PROTOCOL_ERROR) });
    });
    socket.on('close', () => {
      connection.closed.abort();
      this.#clock.clearTimeout(connection.authTimer);
      this.#authenticated(connection); // stops counting it either way
      if (this.#connections.delete(connection)) this.#metrics.connections.dec();
    });
    this.send(connection, {
      type: 'challenge',
      nonce: connection.nonce,
      clusterId: this.#options.cluster.id,
      replica: this.#options.index,
    });
  }

  #onFrame(connection: Connection, data: Buffer, isBinary: boolean): void {
    if (connection.socket.readyState !== connection.socket.OPEN) return;
    if (!isBinary) return this.close(connection, CloseCode.UNSUPPORTED_DATA, 'binary frames only');
    let message;
    try {
      message = decodeClientMessage(data, this.#limits.maxFrameBytes);
    } catch (error) {
      return this.close(
        connection,
        CloseCode.PROTOCOL_ERROR,
        error instanceof QuorumFenceError ? error.message : 'malformed frame',
      );
    }
    if (!connection.holder) {
      if (message.type !== 'hello') {
        this.sendError(connection, message.id, 'UNAUTHENTICATED', 'authenticate (hello) before any request');
        return this.close(connection, CloseCode.POLICY_VIOLATION, 'request before authentication');
      }
      if (!helloVerifies(message, connection.nonce, this.#options.cluster.id, this.#options.index))
        return this.close(connection, CloseCode.POLICY_VIOLATION, 'authentication failed');
      this.#clock.clearTimeout(connection.authTimer);
      connection.authTimer = undefined;
      this.#authenticated(connection);
      connection.holder = message.holder;
      connection.session = message.session ? toHex(message.session) : '';
      const floor = this.#options.floor();
      this.send(connection, {
        type: 'welcome',
        id: message.id,
        replica: this.#options.index,
        ...(floor > 0n ? { floor } : {}),
      });
      return;
    }
    if (message.type === 'hello') return this.close(connection, CloseCode.PROTOCOL_ERROR, 'already authenticated');
    if (!this.#options.ready())
      return this.sendError(connection, message.id, 'INTERNAL', 'the replica is shutting down');
    if (!admitsRequest(connection, message, this.#limits, this.#clock.now())) {
      this.sendError(connection, message.id, 'RATE_LIMITED', 'too many requests; back off');
      if (++connection.consecutiveLimited > this.#limits.maxConsecutiveRateLimited) {
        this.close(connection, CloseCode.POLICY_VIOLATION, 'kept exceeding the rate limit');
      }
      return;
    }
    connection.consecutiveLimited = 0;
    this.#options.dispatch(connection, message, connection.holder);
  }

  send(connection: Connection, message: ServerMessage): void {
    const socket = connection.socket;
    if (socket.readyState !== socket.OPEN) return;
    if (socket.bufferedAmount > this.#limits.maxBufferedBytesPerConnection) {
      this.#metrics.closes.inc({ code: 'dropped' });
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

  sendError(connection: Connection, id: number | undefined, code: WireErrorCode, message: string): void {
    this.#metrics.wireErrors.inc({ code });
    this.send(connection, id === undefined ? { type: 'error', code, message } : { type: 'error', id, code, message });
  }

  close(connection: Connection, code: number, reason: string): void {
    const socket = connection.socket;
    if (socket.readyState !== socket.OPEN) return;
    this.#metrics.closes.inc({ code: String(code) });
    // Close reasons are limited to 123 bytes by RFC 6455.
    socket.close(code, Buffer.from(reason).subarray(0, 120).toString());
    // A peer that never answers the close handshake must not hold the socket.
    setTimeout(() => socket.terminate(), 2_000).unref();
  }

  /** The shutdown's part: closes every connection with 1001, waits up to 1 s for them, then terminates the rest. */
  async closeAll(): Promise<void> {
    for (const connection of this.#connections) {
      this.#clock.clearTimeout(connection.authTimer);
      if (connection.socket.readyState === connection.socket.OPEN)
        connection.socket.close(CloseCode.GOING_AWAY, 'replica shutting down');
    }
    const closeDeadline = Date.now() + 1_000;
    while (this.#connections.size > 0 && Date.now() < closeDeadline) await new Promise((r) => setTimeout(r, 5));
    for (const connection of this.#connections) connection.socket.terminate();
  }
}

/**
 * The hello proves the holder key over this connection's nonce, this cluster and replica, and the session it names.
 * Small-order and non-canonical keys are refused first (one verifies any message); then RFC 8032 (common/ed25519.ts).
 * The server and the simulator's replica (src/simulation/replica-node.ts) both judge a hello here.
 */
export function helloVerifies(hello: Hello, nonce: Uint8Array, clusterId: Uint8Array, index: number): boolean {
  return verifyEd25519(hello.holder, authTranscript(nonce, clusterId, index, hello.session), hello.signature);
}

/**
 * The in-flight bound and the token buckets (every request's, and the `leases` request's own): whether `request`
 * may be handled now, or is answered RATE_LIMITED. Takes a token when it admits. The server and the simulator's
 * replica both admit requests here.
 */
export function admitsRequest(
  connection: Pick<Connection, 'inFlight' | 'requests' | 'leasesRequests'>,
  request: WireRequest,
  limits: Pick<ReplicaLimits, 'maxInFlightPerConnection'>,
  now: number,
): boolean {
  if (connection.inFlight >= limits.maxInFlightPerConnection && !isQuietRelease(request)) return false;
  if (!connection.requests.take(now)) return false;
  return request.type !== 'leases' || connection.leasesRequests.take(now);
}
