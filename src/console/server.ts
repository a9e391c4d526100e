/**
 * The console's HTTP server (node:http):
 *
 *   GET  /                          the page (page.ts)
 *   GET  /api/state                 the state the page renders (JSON; epochs as decimal strings)
 *   GET  /api/evidence/<id>.json    one piece of verified equivocation evidence, as a download
 *   POST /api/evidence              hand the console equivocation evidence (JSON, at most 64 KiB); recorded
 *                                   only if it verifies against the cluster (400 with the error code if not);
 *                                   refused (403) when a browser sends it from another origin
 *   GET  /metrics                   the console's own metrics (metric-names.ts)
 *
 * There is no login: on a loopback address only the local machine reaches it. Every path, /metrics included, answers
 * only to the Host names it was given (its own loopback names, and --allowed-host) or to an IP address: a web page
 * elsewhere cannot rebind a name of its own to the console's address and read any of it (docs/console.md).
 * A request never crashes the server.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { QuorumFenceError, isQuorumFenceError } from '../common/errors.js';
import { EVIDENCE_FORMAT } from './evidence-json.js';
import type { ConsoleMetrics } from './metrics.js';
import { consolePage } from './page.js';
import type { ConsoleWatcher } from './watcher.js';

const MAX_EVIDENCE_BODY_BYTES = 64 * 1024;

export interface ConsoleServerOptions {
  readonly watcher: ConsoleWatcher;
  readonly metrics: ConsoleMetrics;
  readonly host: string;
  readonly port: number;
  /** Serve a non-loopback address (the operator asked for it with --allow-remote). */
  readonly allowRemote?: boolean;
  /**
   * More Host headers (host:port) every path answers to (--allowed-host): the names a port-forward, a proxy or a
   * scraper gives it. On a loopback address the console's own loopback names are allowed besides; on another address
   * none given means any. An IP address is always answered (isAddressHost).
   */
  readonly allowedHosts?: readonly string[];
}

/** Whether `host` (an address to listen on) is a loopback one. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127(?:\.\d{1,3}){3}$/.test(host);
}

/**
 * The Host names every path answers to (undefined: any). On a loopback address the console's own loopback names and
 * the names the operator allowed (--allowed-host: a scraper's, a proxy's), so a web page elsewhere cannot rebind a
 * name of its own to it; on another address the names allowed, or any when none were given.
 */
export function allowedHostsFor(host: string, port: number, allowedHosts: readonly string[]): Set<string> | undefined {
  if (isLoopback(host)) {
    const urlHost = host.includes(':') ? `[${host}]` : host;
    return new Set([`${urlHost}:${port}`, `localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, ...allowedHosts]);
  }
  return allowedHosts.length > 0 ? new Set(allowedHosts) : undefined;
}

/**
 * A Host header that is an IP address (with or without a port): what a scraper sends when it names the console by its
 * address (a pod's, a node's). DNS rebinding needs a name the attacker controls, and a page can read an answer only
 * from its own origin, so a page that reaches the console by an address cannot read it unless it was served by it.
 */
export function isAddressHost(host: string): boolean {
  const ipv4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?::\d{1,5})?$/.exec(host);
  if (ipv4) return ipv4.slice(1, 5).every((octet) => Number(octet) <= 255);
  const ipv6 = /^\[([0-9a-fA-F:.]+)\](?::\d{1,5})?$/.exec(host);
  return ipv6 !== null && ipv6[1]!.includes(':');
}

/** Whether a request with this Host header is answered (on every path, /metrics included). */
export function hostAllowed(allowed: ReadonlySet<string> | undefined, host: string | undefined): boolean {
  if (!allowed) return true;
  if (host === undefined) return false;
  return allowed.has(host) || isAddressHost(host);
}

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store', ...headers });
  res.end(JSON.stringify(body) + '\n');
}

/**
 * Why a POST comes from a page of another site, or null. Browsers send `Origin` with every POST (and
 * `Sec-Fetch-Site`), so a page elsewhere cannot post evidence through a visitor's browser (a form or fetch
 * to the console's address); clients that are not browsers send neither and are not affected.
 */
export function crossSiteRefusal(req: IncomingMessage): string | null {
  // A header pages cannot set: the browser's own word on where the request comes from.
  const site = req.headers['sec-fetch-site'];
  if (site === 'same-origin') return null;
  if (site !== undefined && site !== 'none')
    return `Sec-Fetch-Site ${String(site).slice(0, 40)}: evidence is accepted from this console's own page or from clients that are not browsers`;
  const origin = req.headers.origin;
  if (origin === undefined) return null;
  let host: string;
  try {
    host = new URL(origin).host;
  } catch {
    return `Origin ${origin.slice(0, 80)} is not this console's`;
  }
  return host !== '' && host === req.headers.host ? null : `Origin ${origin.slice(0, 80)} is not this console's`;
}

export class ConsoleServer {
  readonly url: string;
  readonly #http: Server;
  readonly #options: ConsoleServerOptions;
  readonly #allowedHosts: ReadonlySet<string> | undefined;

  private constructor(http: Server, url: string, options: ConsoleServerOptions, allowedHosts?: ReadonlySet<string>) {
    this.#http = http;
    this.url = url;
    this.#options = options;
    this.#allowedHosts = allowedHosts;
  }

  /**
   * Listens and resolves once it does.
   * @throws QuorumFenceError INVALID_OPTION (a non-loopback address without allowRemote), IO_ERROR (cannot listen)
   */
  static async start(options: ConsoleServerOptions): Promise<ConsoleServer> {
    const remote = !isLoopback(options.host);
    if (remote && !options.allowRemote)
      throw new QuorumFenceError(
        'INVALID_OPTION',
        `--listen ${options.host} is not a loopback address: the console has no login, so it serves other machines only with --allow-remote (put it behind an authenticating proxy)`,
      );
    const http = createServer({ headersTimeout: 10_000, requestTimeout: 10_000 });
    await new Promise<void>((resolve, reject) => {
      http.once('error', reject);
      http.listen(options.port, options.host, () => {
        http.off('error', reject);
        resolve();
      });
    }).catch((error: Error) => {
      throw new QuorumFenceError('IO_ERROR', `cannot listen on ${options.host}:${options.port}: ${error.message}`);
    });
    const address = http.address();
    const port = typeof address === 'object' && address ? address.port : options.port;
    const urlHost = options.host.includes(':') ? `[${options.host}]` : options.host;
    const allowed = allowedHostsFor(options.host, port, options.allowedHosts ?? []);
    const server = new ConsoleServer(http, `http://${urlHost}:${port}`, options, allowed);
    http.on('request', (req, res) => {
      try {
        server.#onRequest(req, res);
      } catch {
        // A bug, not the caller's fault: answer 500 and keep serving.
        if (!res.headersSent) json(res, 500, { error: 'internal error' });
        else res.destroy();
      }
    });
    http.on('clientError', (_error, socket) => socket.destroy());
    return server;
  }

  #onRequest(req: IncomingMessage, res: ServerResponse): void {
    const path = (req.url ?? '/').split('?')[0]!;
    // A page elsewhere that rebinds a name of its own to this address must not read anything here, /metrics
    // included (issue 43): a scraper names the console by its address, or by a name given with --allowed-host.
    if (!hostAllowed(this.#allowedHosts, req.headers.host))
      return json(res, 421, {
        error: 'this console does not answer to that Host: name it by its address, or add the name with --allowed-host',
        code: 'FORBIDDEN_HOST',
      });
    const { watcher, metrics } = this.#options;
    if (req.method === 'GET' && path === '/') {
      const nonce = randomBytes(16).toString('base64');
      res.writeHead(200, {
        'content-type': 'text/html; charset=utf-8',
        'cache-control': 'no-store',
        'x-content-type-options': 'nosniff',
        'referrer-policy': 'no-referrer',
        'content-security-policy': `default-src 'none'; script-src 'nonce-${nonce}'; style-src 'nonce-${nonce}'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
      });
      res.end(consolePage(nonce));
      return;
    }
    if (req.method === 'GET' && path === '/api/state')
      return json(res, 200, { ...watcher.state, servedAt: new Date().toISOString() });
    const download = /^\/api\/evidence\/(\d{1,9})\.json$/.exec(path);
    if (req.method === 'GET' && download) {
      const document = watcher.evidenceDocument(Number(download[1]));
      if (!document) return json(res, 404, { error: 'no evidence with that id', code: 'NOT_FOUND' });
      const kind = document.format === EVIDENCE_FORMAT ? 'equivocation' : document.kind.replace(/[^a-z_]/g, '');
      return json(res, 200, document, {
        'content-disposition': `attachment; filename="${kind}-replica-${document.replica}-${download[1]}.json"`,
      });
    }
    if (req.method === 'POST' && path === '/api/evidence') {
      const refused = crossSiteRefusal(req);
      if (refused) {
        req.resume();
        return json(res, 403, { error: refused, code: 'FORBIDDEN_ORIGIN' });
      }
      return this.#receiveEvidence(req, res);
    }
    if (req.method === 'GET' && path === '/metrics') {
      metrics.registry.metrics().then(
        (text) => {
          res.writeHead(200, { 'content-type': metrics.registry.contentType });
          res.end(text);
        },
        () => json(res, 500, { error: 'metrics failed' }),
      );
      return;
    }
    json(res, 404, { error: 'not found: try /, /api/state, /api/evidence/<id>.json or /metrics', code: 'NOT_FOUND' });
  }

  #receiveEvidence(req: IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_EVIDENCE_BODY_BYTES) chunks.push(chunk);
      // A body over the limit is read and dropped so the sender gets its 413; one far over it is cut off.
      else if (size > 16 * MAX_EVIDENCE_BODY_BYTES) req.destroy();
    });
    req.on('error', () => undefined);
    req.on('end', () => {
      if (size > MAX_EVIDENCE_BODY_BYTES)
        return json(res, 413, { error: `body over ${MAX_EVIDENCE_BODY_BYTES} bytes`, code: 'INVALID_ARGUMENT' });
      let document: unknown;
      try {
        document = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        return json(res, 400, { error: 'the body is not JSON', code: 'INVALID_ARGUMENT' });
      }
      try {
        const id = this.#options.watcher.addEvidence(document);
        json(res, 201, { id, url: `/api/evidence/${id}.json` });
      } catch (error) {
        if (isQuorumFenceError(error)) json(res, 400, { error: error.message, code: error.code });
        else json(res, 500, { error: 'internal error' });
      }
    });
  }

  async close(): Promise<void> {
    this.#http.closeAllConnections();
    await new Promise<void>((resolve) => this.#http.close(() => resolve()));
  }
}
