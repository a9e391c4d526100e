/**
 * The replica's plain HTTP requests (everything but the WebSocket upgrade): `GET /healthz` (with version,
 * uptime, last error, frozen), `GET /metrics`, and the operator's `POST /admin/freeze` (docs/resharing.md)
 * with its body limit and operator-secret check. The server (server.ts) routes each request here.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { presentsOperatorSecret } from '../common/operator-secret.js';
import { QuorumFenceError } from '../common/errors.js';
import { PACKAGE_VERSION } from '../common/version.js';
import type { Logger } from '../common/log.js';
import type { LogLimiter } from '../common/log-limiter.js';
import type { MonotonicClock } from '../common/clock.js';
import type { Cluster } from '../cluster/description.js';
import { frozenError } from './freeze-marker.js';
import type { ReplicaMetrics } from './metrics.js';
import type { ReplicaService } from './service.js';
import type { PartialSigner } from './signer.js';

/** The largest body POST /admin/freeze reads (a JSON object with a short reason). */
const MAX_ADMIN_BODY_BYTES = 1024;

/** What the HTTP requests read from the running server. */
export interface ReplicaHttpContext {
  readonly replica: number;
  readonly cluster: Cluster;
  readonly signer: PartialSigner;
  readonly service: ReplicaService;
  readonly metrics: ReplicaMetrics;
  readonly logger: Logger;
  /** Limits the lines a peer can provoke (here: refused admin requests); shared with the server's refusals. */
  readonly logLimiter: LogLimiter;
  readonly clock: MonotonicClock;
  /** What unlocks POST /admin/freeze; undefined: the endpoint refuses everyone. */
  readonly operatorSecret: string | undefined;
  /** When the server started (wall clock, ms). */
  readonly startedAt: number;
  /** False once the server is stopping. */
  ready(): boolean;
  /** The last error the server logged (see ReplicaServer's noteError). */
  lastError(): { readonly at: string; readonly message: string } | undefined;
}

/** Answers one HTTP request that is not a WebSocket upgrade. */
export function serveReplicaHttp(context: ReplicaHttpContext, req: IncomingMessage, res: ServerResponse): void {
  const path = (req.url ?? '/').split('?')[0];
  if (req.method === 'GET' && path === '/healthz') {
    const ready = context.ready();
    res.writeHead(ready ? 200 : 503, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        status: ready ? 'ok' : 'stopping',
        replica: context.replica,
        clusterId: context.cluster.idHex,
        backend: context.cluster.backend.name,
        signingWorkers: context.signer.workers,
        version: PACKAGE_VERSION,
        uptimeSeconds: Math.floor((Date.now() - context.startedAt) / 1000),
        lastError: context.lastError() ?? null,
        frozen: context.service.store.frozen !== undefined,
      }),
    );
    return;
  }
  if (req.method === 'GET' && path === '/metrics') {
    context.metrics.registry.metrics().then(
      (text) => {
        res.writeHead(200, { 'content-type': context.metrics.registry.contentType });
        res.end(text);
      },
      (error: Error) => {
        res.writeHead(500, { 'content-type': 'text/plain' });
        res.end(`metrics failed: ${error.message}\n`);
      },
    );
    return;
  }
  if (path === '/admin/freeze') return onFreezeRequest(context, req, res);
  res.writeHead(404, { 'content-type': 'text/plain' });
  res.end('not found: try /healthz, /metrics, or a WebSocket upgrade\n');
}

/**
 * POST /admin/freeze, body `{ "reason"?: string }` (optional): the operator freezes this replica for a
 * reshare while it runs. The secret is checked before the body is read; a refused request changes
 * nothing. The answer comes after the freeze marker is flushed (SigningRecord.freeze): from then on
 * every request that would sign is refused with REPLICA_FROZEN, also after a restart.
 */
function onFreezeRequest(context: ReplicaHttpContext, req: IncomingMessage, res: ServerResponse): void {
  const answer = (status: number, body: Record<string, unknown>) => {
    if (res.headersSent) return;
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  if (req.method !== 'POST') {
    res.setHeader('allow', 'POST');
    return answer(405, { code: 'INVALID_ARGUMENT', message: 'POST only' });
  }
  if (!presentsOperatorSecret(req.headers.authorization, context.operatorSecret)) {
    req.resume();
    if (context.logLimiter.admit('admin_refused', context.clock.now()))
      context.logger.warn(
        { event: 'admin_refused', path: '/admin/freeze', address: req.socket.remoteAddress },
        'refused an admin request without the operator secret',
      );
    return answer(401, {
      code: 'UNAUTHENTICATED',
      message:
        context.operatorSecret === undefined
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
    context.service.store.freeze(reason).then(
      (state) => {
        // Acquires waiting their turn here would be refused at their turn: tell them now.
        context.service.handoffs.failAll(frozenError(state));
        context.logger.info(
          { event: 'freeze', replica: context.replica, ...state },
          'frozen for a reshare: this replica signs nothing more',
        );
        answer(200, { frozen: true, replica: context.replica, clusterId: context.cluster.idHex, ...state });
      },
      (error: unknown) => {
        context.logger.error({ err: error }, 'freeze failed');
        answer(500, {
          code: error instanceof QuorumFenceError ? error.code : 'INTERNAL',
          message: `the freeze was not recorded: ${(error as Error).message}`,
        });
      },
    );
  });
}
