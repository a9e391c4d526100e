/**
 * The Byzantine front: a WebSocket server in front of a real, unmodified
 * replica (`ReplicaServer`, running in the same process on a loopback port).
 * Every client connection gets its own connection to the real replica; the
 * front relays the handshake untouched (so authentication is the replica's
 * own) and applies the chosen behaviours to requests and answers (what each
 * does to an answer is in lies.ts). The real replica keeps its real signing
 * record; what the front adds on top is the lie.
 *
 * With several behaviours, each request is handled by one of them, picked by
 * the seeded PRNG (so one process shows them all, and a seed replays the
 * choice); `rate` is the chance that a request is handled by any at all.
 *
 * HTTP on the same port: `GET /byzantine` (the state and how often each
 * behaviour acted), `PUT /byzantine` (change behaviours and parameters, jump
 * the clock), and everything else (`/healthz`, `/metrics`) is passed to the
 * real replica.
 *
 * Test use only: this process signs whatever it is told to.
 */
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocket, WebSocketServer, type RawData } from 'ws';
import type { Cluster } from '../../cluster/description.js';
import type { Logger } from '../../common/log.js';
import { decodeClientMessage, decodeServerMessage, encodeMessage } from '../../protocol/codec.js';
import type { ServerMessage } from '../../protocol/messages.js';
import { seededRandom, type SeededRandom } from '../seeded-random.js';
import {
  PROCESS_BEHAVIOURS,
  byzantineParams,
  parseBehaviours,
  pickBehaviour,
  type ByzantineBehaviour,
  type ByzantineParams,
} from './behaviours.js';
import type { PartialForger } from './forge.js';
import type { JumpClock } from './jump-clock.js';
import { answerWithBehaviour, type Outcome, type Pending } from './lies.js';

export { PHANTOM_LEASE_RESOURCE } from './lies.js';

/** Unanswered requests remembered per connection; the real replica bounds in-flight requests far below this. */
const MAX_PENDING_PER_CONNECTION = 4096;
/** Control bodies are a few hundred bytes. */
const MAX_CONTROL_BODY_BYTES = 64 * 1024;

export interface ByzantineFrontOptions {
  /** ws:// url of the real replica behind the front. */
  readonly innerUrl: string;
  readonly cluster: Cluster;
  readonly replicaIndex: number;
  readonly forger: PartialForger;
  readonly behaviours: readonly ByzantineBehaviour[];
  readonly params: ByzantineParams;
  readonly seed: number;
  readonly clock: JumpClock;
  readonly host: string;
  readonly port: number;
  readonly maxFrameBytes: number;
  readonly logger: Logger;
}

/** What `GET /byzantine` answers. */
export interface ByzantineState {
  readonly replica: number;
  /** Per-request behaviours now in force. */
  readonly behaviours: readonly ByzantineBehaviour[];
  /** Process-wide behaviours fixed at start (no-record). */
  readonly processBehaviours: readonly ByzantineBehaviour[];
  readonly params: ByzantineParams;
  readonly seed: number;
  /** Requests seen, and how many a behaviour was chosen for. */
  readonly requests: number;
  readonly chosen: number;
  /** Per behaviour, how many times it changed what a client saw. */
  readonly acts: Readonly<Partial<Record<ByzantineBehaviour, number>>>;
  readonly connections: number;
  readonly clockOffsetMs: number;
}

/** The body of `PUT /byzantine`; every field optional. */
export interface ByzantineControl {
  readonly behaviours?: readonly string[] | string;
  readonly rate?: number;
  readonly slowMs?: number;
  readonly floodCount?: number;
  readonly clockJumpMs?: number;
  /** Jump the replica's monotonic clock forward by this many ms now. */
  readonly jumpClockMs?: number;
}

export class ByzantineFront {
  readonly url: string;
  readonly #server: Server;
  readonly #wss: WebSocketServer;
  readonly #options: ByzantineFrontOptions;
  readonly #innerHttp: string;
  readonly #random: SeededRandom;
  readonly #processBehaviours: ByzantineBehaviour[];
  readonly #sockets = new Set<WebSocket>();
  #behaviours: ByzantineBehaviour[];
  #params: ByzantineParams;
  #requests = 0;
  #chosen = 0;
  readonly #acts: Partial<Record<ByzantineBehaviour, number>> = {};

  private constructor(server: Server, wss: WebSocketServer, url: string, options: ByzantineFrontOptions) {
    this.#server = server;
    this.#wss = wss;
    this.url = url;
    this.#options = options;
    this.#innerHttp = options.innerUrl.replace(/^ws/, 'http');
    this.#random = seededRandom(options.seed);
    this.#processBehaviours = options.behaviours.filter((b) => PROCESS_BEHAVIOURS.has(b));
    this.#behaviours = options.behaviours.filter((b) => !PROCESS_BEHAVIOURS.has(b));
    this.#params = options.params;
  }

  /** Listens; resolves once the port is bound. */
  static async start(options: ByzantineFrontOptions): Promise<ByzantineFront> {
    const wss = new WebSocketServer({
      noServer: true,
      maxPayload: options.maxFrameBytes,
      perMessageDeflate: false,
      clientTracking: false,
    });
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port, options.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    const address = server.address();
    const port = typeof address === 'object' && address ? address.port : options.port;
    const host = options.host.includes(':') ? `[${options.host}]` : options.host;
    const front = new ByzantineFront(server, wss, `ws://${host}:${port}`, options);
    server.on('request', (req, res) => front.#onHttp(req, res));
    server.on('upgrade', (req, socket, head) => {
      (socket as Duplex).on('error', () => (socket as Duplex).destroy());
      wss.handleUpgrade(req, socket as Duplex, head, (ws) => front.#onConnection(ws));
    });
    server.on('clientError', (_error, socket) => socket.destroy());
    return front;
  }

  state(): ByzantineState {
    return {
      replica: this.#options.replicaIndex,
      behaviours: [...this.#behaviours],
      processBehaviours: [...this.#processBehaviours],
      params: this.#params,
      seed: this.#options.seed,
      requests: this.#requests,
      chosen: this.#chosen,
      acts: { ...this.#acts },
      connections: this.#sockets.size,
      clockOffsetMs: this.#options.clock.offsetMs,
    };
  }

  /**
   * Changes behaviours and parameters at run time (the control endpoint).
   * @throws QuorumFenceError INVALID_OPTION (unknown behaviour), INVALID_ARGUMENT (bad parameter)
   */
  control(change: ByzantineControl): ByzantineState {
    let behaviours = this.#behaviours;
    if (change.behaviours !== undefined) {
      const list =
        typeof change.behaviours === 'string'
          ? change.behaviours
          : Array.isArray(change.behaviours)
            ? change.behaviours.join(',')
            : String(change.behaviours);
      behaviours = parseBehaviours(list).filter((b) => !PROCESS_BEHAVIOURS.has(b));
    }
    const params = byzantineParams(
      { rate: change.rate, slowMs: change.slowMs, floodCount: change.floodCount, clockJumpMs: change.clockJumpMs },
      this.#params,
    );
    if (change.jumpClockMs !== undefined) this.#options.clock.jump(change.jumpClockMs);
    if (behaviours.includes('other-replica') && !this.#options.forger.hasOtherKey) {
      this.#options.logger.warn(
        "other-replica without --other-key: it replays another index's partial when it has one, else answers honestly",
      );
    }
    this.#behaviours = behaviours;
    this.#params = params;
    this.#options.logger.info({ behaviours, params, jumpClockMs: change.jumpClockMs }, 'byzantine behaviour changed');
    return this.state();
  }

  #act(behaviour: ByzantineBehaviour): void {
    this.#acts[behaviour] = (this.#acts[behaviour] ?? 0) + 1;
  }

  #choose(): ByzantineBehaviour | undefined {
    this.#requests++;
    const behaviour = pickBehaviour(this.#random, this.#behaviours, this.#params.rate);
    if (behaviour) this.#chosen++;
    return behaviour;
  }

  // ---------- HTTP: control, and the real replica's endpoints ----------

  #onHttp(req: IncomingMessage, res: ServerResponse): void {
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/byzantine') {
      if (req.method === 'GET') return json(res, 200, this.state());
      if (req.method !== 'PUT' && req.method !== 'POST') return json(res, 405, { error: 'GET or PUT' });
      let body = '';
      let tooLarge = false;
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => {
        body += chunk;
        if (body.length > MAX_CONTROL_BODY_BYTES) {
          tooLarge = true;
          req.destroy();
        }
      });
      req.on('end', () => {
        if (tooLarge) return;
        try {
          const change = JSON.parse(body || '{}') as unknown;
          if (typeof change !== 'object' || change === null || Array.isArray(change))
            throw new Error('expected a JSON object');
          json(res, 200, this.control(change as ByzantineControl));
        } catch (error) {
          json(res, 400, { error: (error as Error).message });
        }
      });
      return;
    }
    // Everything else (/healthz, /metrics) is the real replica's.
    const inner = httpRequest(
      this.#innerHttp + (req.url ?? '/'),
      { method: req.method, headers: req.headers, timeout: 5_000 },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    inner.on('timeout', () => inner.destroy());
    inner.on('error', (error) => {
      if (!res.headersSent) json(res, 502, { error: `the replica behind the front did not answer: ${error.message}` });
      else res.destroy();
    });
    req.pipe(inner);
  }

  // ---------- WebSocket relay ----------

  #onConnection(client: WebSocket): void {
    this.#sockets.add(client);
    const upstream = new WebSocket(this.#options.innerUrl, {
      perMessageDeflate: false,
      maxPayload: this.#options.maxFrameBytes,
    });
    const queued: { data: RawData; binary: boolean }[] = [];
    const pending = new Map<number, Pending>();
    let holder: Uint8Array | undefined;
    let closed = false;

    const closeBoth = (code: number, reason: Buffer | string) => {
      if (closed) return;
      closed = true;
      // 1005 and 1006 are reserved for "no code" and "abnormal": they cannot be sent.
      const sendable = code === 1005 || code === 1006 ? 1001 : code;
      for (const socket of [client, upstream]) {
        if (socket.readyState === WebSocket.OPEN) socket.close(sendable, reason);
        else socket.terminate();
        setTimeout(() => socket.terminate(), 2_000).unref();
      }
    };
    const drop = () => {
      closed = true;
      client.terminate();
      upstream.terminate();
    };
    const toClient = (data: Uint8Array | string) => {
      if (client.readyState === WebSocket.OPEN) client.send(data, { binary: typeof data !== 'string' });
    };
    const toUpstream = (data: RawData, binary: boolean) => {
      if (upstream.readyState === WebSocket.OPEN) upstream.send(data, { binary });
      else if (upstream.readyState === WebSocket.CONNECTING) queued.push({ data, binary });
    };

    upstream.on('open', () => {
      for (const m of queued.splice(0)) upstream.send(m.data, { binary: m.binary });
    });
    client.on('close', (code, reason) => {
      this.#sockets.delete(client);
      closeBoth(code, reason);
    });
    upstream.on('close', (code, reason) => closeBoth(code, reason));
    client.on('error', drop);
    upstream.on('error', drop);

    client.on('message', (data: RawData, binary: boolean) => {
      const frame = asBuffer(data);
      let message;
      try {
        if (!binary) throw new Error('text');
        message = decodeClientMessage(frame, this.#options.maxFrameBytes);
      } catch {
        // Not ours to judge: the real replica refuses it and closes.
        return toUpstream(data, binary);
      }
      if (message.type === 'hello') {
        holder = message.holder;
        return toUpstream(data, binary);
      }
      const behaviour = this.#choose();
      if (behaviour === 'silent') {
        this.#act('silent');
        return;
      }
      if (behaviour === 'ignore-release' && message.type === 'release' && holder) {
        this.#act('ignore-release');
        return toClient(encodeMessage({ type: 'reply', id: message.id, outcome: { status: 'released' } }));
      }
      if (pending.size < MAX_PENDING_PER_CONNECTION) pending.set(message.id, { request: message, behaviour });
      toUpstream(data, binary);
    });

    upstream.on('message', (data: RawData, binary: boolean) => {
      const frame = asBuffer(data);
      let message: ServerMessage;
      try {
        message = decodeServerMessage(frame, this.#options.maxFrameBytes);
      } catch {
        return toClient(binary ? frame : frame.toString('utf8'));
      }
      const id = message.type === 'reply' || message.type === 'error' ? message.id : undefined;
      const entry = id === undefined ? undefined : pending.get(id);
      if (!entry) return toClient(frame);
      pending.delete(id!);
      if (message.type !== 'reply' || !entry.behaviour || !holder) return toClient(frame);
      answerWithBehaviour(
        entry,
        message.outcome as Outcome,
        holder,
        frame,
        { toClient, drop },
        {
          clusterId: this.#options.cluster.id,
          forger: this.#options.forger,
          random: this.#random,
          params: this.#params,
          act: (behaviour) => this.#act(behaviour),
        },
      );
    });
  }

  async close(): Promise<void> {
    for (const socket of this.#sockets) socket.terminate();
    this.#wss.close();
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

function asBuffer(data: RawData): Buffer {
  return Array.isArray(data) ? Buffer.concat(data) : data instanceof ArrayBuffer ? Buffer.from(data) : data;
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(
    JSON.stringify(body, (_key, value: unknown) => (typeof value === 'bigint' ? value.toString() : value)) + '\n',
  );
}
