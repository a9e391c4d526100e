/**
 * The reference guarded resource: a key-value service over HTTP whose every
 * write passes the guard, with data, barrier and guard log in one LMDB store.
 *
 *   PUT    /kv/<resource>/<key>   body = value           fenced write
 *   DELETE /kv/<resource>/<key>                          fenced delete
 *   GET    /kv/<resource>/<key>   with a token           fenced read (see below)
 *   GET    /kv/<resource>/<key>   without a token        plain read
 *   GET    /barrier/<resource>                           the barrier (epoch, token digest)
 *   GET    /log?after=N&limit=M                          the guard log, in order (tokens only for an operator: operator.ts)
 *   GET    /healthz, /metrics
 *
 * Path segments are URL-encoded (a resource name may contain `/`). Requests
 * carry `Authorization: QuorumFence <token text>`; optional headers:
 *   QuorumFence-If-Version: N        compare-and-set: the key is at version N (0: absent)
 *   QuorumFence-Proof: C.SIG         proof of possession: counter C (decimal) and the
 *                                    base64url Ed25519 signature over the transcript (proof.ts)
 *
 * Fenced reads: a holder that reads, computes, then writes must not do so
 * with a stale token, or it writes a value computed from a world it no longer
 * owns. So a GET with a token goes through the guard like a write: refused
 * when stale, and it raises the barrier when its epoch is new (once a new
 * holder has read, no older holder can write under it). It is logged like
 * any attempt and costs a durable commit. A GET without a token is a plain
 * read of the committed value, for observers that write nothing.
 *
 * Status codes: 200 accepted; 409 stale or conflict (`code` tells which; the
 * body names the barrier); 401 missing, malformed, invalid or wrong-cluster
 * token, or a missing, bad or replayed proof; 403 token for another
 * resource; 412 failed If-Version; 400 malformed request; 404 unknown path or
 * absent key; 405 wrong method; 413 body too large; 500 internal failure.
 * No input crashes the process: every handler's failure becomes a response.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { QuorumFenceError } from '../common/errors.js';
import { toHex } from '../common/bytes.js';
import { expectInteger } from '../common/check.js';
import { silentLogger, type Logger } from '../common/log.js';
import type { Cluster } from '../cluster/description.js';
import { withoutTokens } from './log.js';
import type { GuardResult } from './core.js';
import { LmdbGuard, type LmdbGuardOptions, type StoredValue } from './lmdb-guard.js';
import { GuardMetrics } from './metrics.js';
import { verifyBatcherFor } from '../crypto/verify-batch.js';
import { checkOperatorSecret, presentsOperatorSecret } from '../common/operator-secret.js';
import {
  BadRequest,
  CLIENT_ERROR_STATUS,
  ClientGone,
  expectMethod,
  ifVersionHeader,
  keySegment,
  proofHeader,
  queryInteger,
  readBody,
  resourceSegment,
  sendJson,
  sendValue,
  STATUS_BY_REASON,
} from './resource-http.js';

export { STATUS_BY_REASON };

export interface ResourceServerOptions extends Omit<LmdbGuardOptions, 'observer' | 'logger' | 'maxValueBytes'> {
  /** Default 127.0.0.1. */
  readonly host?: string;
  /** Default 0: any free port (the `listening` log line and `url` say which). */
  readonly port?: number;
  /** Largest request body, in bytes; also the largest value. Default DEFAULT_MAX_BODY_BYTES. */
  readonly maxBodyBytes?: number;
  /** Time a client has to send a request's head (line and headers). Default DEFAULT_HEADERS_TIMEOUT_MS. */
  readonly headersTimeoutMs?: number;
  /** Time a client has to send a whole request, body included. Default DEFAULT_REQUEST_TIMEOUT_MS. */
  readonly requestTimeoutMs?: number;
  /**
   * The secret that unlocks the full guard log (tokens included) at `/log`
   * (see operator.ts). Default: none, and `/log` serves every entry without tokens.
   */
  readonly operatorSecret?: string;
  readonly logger?: Logger;
}

/** 1 MiB: generous for a key-value value, small enough that a flood of bodies cannot exhaust memory. */
export const DEFAULT_MAX_BODY_BYTES = 1 << 20;
/** A request head is a few hundred bytes: 10 s (the replica's authTimeoutMs) allows a slow link, and bounds idle sockets. */
export const DEFAULT_HEADERS_TIMEOUT_MS = 10_000;
/** 30 s sends a 1 MiB body at ~35 KB/s; a client slower than that holds a socket for nothing. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;

const AUTH_SCHEME = /^QuorumFence\s+(\S+)\s*$/i;
/** How long a graceful stop waits for requests in flight; a guarded write takes milliseconds. */
const SHUTDOWN_GRACE_MS = 5000;

export class ResourceServer {
  readonly guard: LmdbGuard;
  readonly metrics: GuardMetrics;
  readonly #server: Server;
  readonly #logger: Logger;
  readonly #maxBodyBytes: number;
  readonly #operatorSecret: string | undefined;
  #url = '';
  #closing: Promise<void> | undefined;
  #active = 0;
  #idle: (() => void) | undefined;

  private constructor(
    guard: LmdbGuard,
    metrics: GuardMetrics,
    logger: Logger,
    maxBodyBytes: number,
    operatorSecret: string | undefined,
    timeouts: { readonly headersTimeoutMs: number; readonly requestTimeoutMs: number },
  ) {
    this.guard = guard;
    this.metrics = metrics;
    this.#logger = logger;
    this.#maxBodyBytes = maxBodyBytes;
    this.#operatorSecret = operatorSecret;
    const serverOptions = {
      headersTimeout: timeouts.headersTimeoutMs,
      requestTimeout: timeouts.requestTimeoutMs,
      // Node checks both timeouts on this period (default 30 s); a tenth of the shorter keeps them close to their value.
      connectionsCheckingInterval: Math.max(100, Math.min(1_000, Math.floor(timeouts.headersTimeoutMs / 10))),
    };
    this.#server = createServer(serverOptions, (req, res) => {
      this.#active++;
      res.once('close', () => {
        if (--this.#active === 0) this.#idle?.();
      });
      if (this.#closing)
        return sendJson(
          res,
          503,
          { ok: false, code: 'shutting_down', message: 'the resource is shutting down' },
          { connection: 'close' },
        );
      this.#handle(req, res).catch((error: unknown) => this.#fail(res, error));
    });
    // Unparseable HTTP (bad request line, oversized headers) or a request that ran past its timeout: answer
    // if the socket still takes writes, then destroy it. Never only half-close: a peer that neither reads nor
    // closes would keep the descriptor (as the replica does, the socket is destroyed).
    this.#server.on('clientError', (error: Error & { code?: string }, socket) => {
      if (!socket.writable) return void socket.destroy();
      const status = CLIENT_ERROR_STATUS[error.code ?? ''] ?? '400 Bad Request';
      socket.end(`HTTP/1.1 ${status}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`, () => socket.destroy());
      // The answer is a few dozen bytes; if even those cannot leave, stop waiting for them.
      setTimeout(() => socket.destroy(), 1_000).unref();
    });
  }

  /**
   * Opens the store in `dataDir` and starts listening.
   * @throws QuorumFenceError CLUSTER_MISMATCH, STORE_CORRUPT, IO_ERROR, INVALID_ARGUMENT; a listen error (EADDRINUSE) as is
   */
  static async start(dataDir: string, cluster: Cluster, options: ResourceServerOptions = {}): Promise<ResourceServer> {
    const maxBodyBytes = expectInteger(options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES, 0, 1 << 30, 'maxBodyBytes');
    const operatorSecret =
      options.operatorSecret === undefined ? undefined : checkOperatorSecret(options.operatorSecret);
    const requestTimeoutMs = expectInteger(
      options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS,
      1,
      0x7fff_ffff,
      'requestTimeoutMs',
    );
    const timeouts = {
      requestTimeoutMs,
      headersTimeoutMs: expectInteger(
        options.headersTimeoutMs ?? Math.min(DEFAULT_HEADERS_TIMEOUT_MS, requestTimeoutMs),
        1,
        0x7fff_ffff,
        'headersTimeoutMs',
      ),
    };
    // Node requires the head's deadline to fit inside the request's.
    if (timeouts.headersTimeoutMs > timeouts.requestTimeoutMs)
      throw new QuorumFenceError('INVALID_ARGUMENT', '"headersTimeoutMs" must not exceed "requestTimeoutMs"', {
        field: 'headersTimeoutMs',
      });
    const logger = options.logger ?? silentLogger;
    // The metrics read the guard lazily: it opens after them so it can report to them.
    const guardRef: { current?: LmdbGuard } = {};
    const metrics = new GuardMetrics(
      { cluster: cluster.idHex },
      {
        tokenCacheEntries: () => guardRef.current?.core.verifier.cacheEntries ?? 0,
        verifyBatches: verifyBatcherFor(cluster.backend),
        processMetrics: true,
      },
    );
    const guard = await LmdbGuard.open(dataDir, cluster, {
      ...options,
      maxValueBytes: maxBodyBytes,
      observer: metrics,
      logger,
    });
    guardRef.current = guard;
    const server = new ResourceServer(guard, metrics, logger, maxBodyBytes, operatorSecret, timeouts);
    try {
      await new Promise<void>((resolve, reject) => {
        server.#server.once('error', reject);
        server.#server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => {
          server.#server.off('error', reject);
          resolve();
        });
      });
    } catch (error) {
      await guard.close();
      throw error;
    }
    const address = server.#server.address() as AddressInfo;
    const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
    server.#url = `http://${host}:${address.port}`;
    logger.info({ url: server.#url, cluster: cluster.idHex, data: dataDir }, 'listening');
    return server;
  }

  get url(): string {
    return this.#url;
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let path: string;
    let query: URLSearchParams;
    try {
      const url = new URL(req.url ?? '/', 'http://resource.invalid');
      path = url.pathname;
      query = url.searchParams;
    } catch {
      throw new BadRequest(400, 'bad_request', 'unparseable request target');
    }
    const segments = path.split('/').slice(1);
    const method = req.method ?? '';
    const route = segments[0];

    if (route === 'healthz' && segments.length === 1) {
      expectMethod(method, ['GET', 'HEAD']);
      return sendJson(res, 200, { ok: true });
    }
    if (route === 'metrics' && segments.length === 1) {
      expectMethod(method, ['GET']);
      const text = await this.metrics.registry.metrics();
      res.writeHead(200, { 'content-type': this.metrics.registry.contentType });
      res.end(text);
      return;
    }
    if (route === 'log' && segments.length === 1) {
      expectMethod(method, ['GET']);
      const after = queryInteger(query, 'after', 0);
      const limit = queryInteger(query, 'limit', 100);
      if (limit < 1) throw new BadRequest(400, 'bad_request', '"limit" must be at least 1');
      const entries = this.guard.readLog({ after, limit: Math.min(limit, 1000) });
      // Tokens are bearer credentials (without --require-proof): only an operator gets them.
      const operator = presentsOperatorSecret(req.headers.authorization, this.#operatorSecret);
      return sendJson(res, 200, {
        entries: operator ? entries : entries.map(withoutTokens),
        lastSeq: this.guard.lastSeq(),
        tokens: operator ? 'included' : 'withheld',
      });
    }
    if (route === 'barrier' && segments.length === 2) {
      expectMethod(method, ['GET']);
      const resource = resourceSegment(segments[1]!);
      const barrier = this.guard.barrier(resource);
      if (!barrier)
        return sendJson(res, 404, {
          ok: false,
          code: 'not_found',
          message: 'no write was ever accepted for this resource',
        });
      return sendJson(res, 200, { resource, epoch: barrier.epoch.toString(), tokenDigest: toHex(barrier.tokenDigest) });
    }
    if (route === 'kv' && segments.length === 3) {
      expectMethod(method, ['GET', 'PUT', 'DELETE']);
      return this.#kv(
        req,
        res,
        method,
        resourceSegment(segments[1]!),
        keySegment(segments[2]!, this.guard.core.maxKeyBytes),
      );
    }
    throw new BadRequest(404, 'not_found', 'no such path');
  }

  async #kv(req: IncomingMessage, res: ServerResponse, method: string, resource: string, key: string): Promise<void> {
    const authorization = req.headers.authorization;
    if (method === 'GET' && authorization === undefined) {
      const value = this.guard.read(resource, key);
      if (!value) return sendJson(res, 404, { ok: false, code: 'not_found', message: 'no such key' });
      return sendValue(res, value, {});
    }
    const body = await readBody(req, this.#maxBodyBytes);
    const token = authorization === undefined ? undefined : AUTH_SCHEME.exec(authorization)?.[1];
    const proof = proofHeader(req, method, body);
    const ifVersion = ifVersionHeader(req, key);
    const request = {
      token,
      resource,
      key,
      op: method.toLowerCase(),
      ...(proof ? { proof } : {}),
      ...(ifVersion ? { ifVersion } : {}),
    };

    let result: GuardResult<StoredValue | boolean | undefined>;
    if (method === 'PUT')
      result = await this.guard.write(request, (tx) => {
        tx.put(key, body);
        return undefined;
      });
    else if (method === 'DELETE') result = await this.guard.write(request, (tx) => tx.remove(key));
    else result = await this.guard.write(request, (tx) => tx.get(key));

    if (!result.ok) {
      const status = STATUS_BY_REASON[result.reason];
      return sendJson(res, status, {
        ok: false,
        code: result.reason,
        message: result.message,
        seq: result.seq,
        barrier: result.barrier,
        ...(result.errorCode ? { errorCode: result.errorCode } : {}),
      });
    }
    const fence = {
      'quorumfence-seq': String(result.seq),
      'quorumfence-epoch': result.epoch.toString(),
      'quorumfence-barrier': result.barrier.toString(),
    };
    const common = { ok: true, seq: result.seq, epoch: result.epoch, barrier: result.barrier, raised: result.raised };
    if (method === 'GET') {
      const value = result.result as StoredValue | undefined;
      if (!value) return sendJson(res, 404, { ...common, ok: false, code: 'not_found', message: 'no such key' }, fence);
      return sendValue(res, value, fence);
    }
    if (method === 'DELETE')
      return sendJson(res, 200, { ...common, deleted: result.result as boolean, version: result.version }, fence);
    return sendJson(res, 200, { ...common, version: result.version }, fence);
  }

  #fail(res: ServerResponse, error: unknown): void {
    if (error instanceof BadRequest) {
      if (res.headersSent) return void res.destroy();
      // An unread body would be parsed as the next request: close the connection after answering.
      const headers: Record<string, string> = error.status === 413 ? { connection: 'close' } : {};
      return sendJson(res, error.status, { ok: false, code: error.code, message: error.message }, headers);
    }
    if (error instanceof QuorumFenceError && error.code === 'CLOSED') {
      if (!res.headersSent)
        sendJson(
          res,
          503,
          { ok: false, code: 'shutting_down', message: 'the resource is shutting down' },
          { connection: 'close' },
        );
      return;
    }
    if (error instanceof ClientGone) {
      // The client's doing, and anyone can do it as often as they like: debug, never error with a stack.
      this.#logger.debug({ reason: error.message }, 'client disconnected mid-request');
      return void res.destroy();
    }
    this.#logger.error({ err: error }, 'request failed');
    if (res.headersSent) return void res.destroy();
    sendJson(res, 500, { ok: false, code: 'internal', message: 'internal error' }, { connection: 'close' });
  }

  /**
   * Graceful stop: no new connections, idle ones closed, requests in flight
   * answered, then the store closed (its writes are durable by then).
   */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
      this.#server.closeIdleConnections();
      if (this.#active > 0) {
        // Bounded: a client that never finishes sending its body must not hold the shutdown forever.
        await Promise.race([
          new Promise<void>((resolve) => (this.#idle = resolve)),
          new Promise((resolve) => setTimeout(resolve, SHUTDOWN_GRACE_MS).unref()),
        ]);
      }
      this.#server.closeAllConnections();
      await this.guard.close();
      await closed;
    })();
    return this.#closing;
  }
}
