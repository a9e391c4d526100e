/**
 * A fault-injecting proxy for one replica link, in user space (tc netem and
 * iptables are not available everywhere, and they cannot act per message).
 * It speaks WebSocket on both sides and forwards message by message, so it
 * can drop, duplicate, delay and reorder whole frames without corrupting the
 * stream, reset connections, and partition the link.
 *
 * A partition is a black hole: connections stay open and every message in
 * either direction is lost, as a client sees a silent network. When it heals,
 * the connections that lived through it are reset (as a TCP timeout would
 * end them) and new ones pass again.
 *
 * Plain HTTP requests (a replica's /healthz and /metrics, on the same port)
 * are passed through whole, with no per-message faults; during a partition
 * they get no answer until it heals, when they are cut off.
 */
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { request as requestTls } from 'node:https';
import type { Duplex } from 'node:stream';
import { WebSocket, WebSocketServer, type RawData } from 'ws';
import { DeliveryQueue, type Delivery } from './delivery-queue.js';
import { seededRandom, type SeededRandom } from './seeded-random.js';

export interface LinkFaults {
  /** Extra delay per message, uniform in [min, max] ms; order is kept unless reordered. */
  readonly delayMs?: readonly [number, number];
  /** Probability that a message is lost. */
  readonly dropRate?: number;
  /** Probability that a message is delivered twice. */
  readonly duplicateRate?: number;
  /** Probability that a message is held back and delivered after the next one (or after 50 ms). */
  readonly reorderRate?: number;
  /** Probability, per message, that the whole connection is reset instead. */
  readonly resetRate?: number;
  readonly partitioned?: boolean;
}

export interface FaultProxyStats {
  connections: number;
  forwarded: number;
  dropped: number;
  duplicated: number;
  reordered: number;
  resets: number;
}

export interface FaultProxy {
  /** ws:// URL clients connect to instead of the replica. */
  readonly url: string;
  readonly stats: Readonly<FaultProxyStats>;
  setFaults(faults: LinkFaults): void;
  partition(on: boolean): void;
  /** Abruptly ends every connection through the proxy (both sides see the link die). */
  resetConnections(): void;
  /**
   * Sends new connections to another replica url from now on (the replica that replaced this one after a
   * reshare); connections already open stay with the old one until they end.
   */
  retarget(target: string): void;
  close(): Promise<void>;
}

export interface FaultProxyOptions {
  /** The replica's ws:// URL. */
  readonly target: string;
  readonly host?: string;
  /** 0 (the default) picks a free port. */
  readonly port?: number;
  readonly seed?: number;
  readonly faults?: LinkFaults;
  /** Frames above this size are refused at the proxy, as a replica would (default 1 MiB). */
  readonly maxMessageBytes?: number;
}

/** A held-back message is released after this long if no later message overtakes it. */
const REORDER_HOLD_MS = 50;

class Link {
  readonly #faults: () => LinkFaults;
  readonly #random: SeededRandom;
  readonly #stats: FaultProxyStats;
  readonly #client: WebSocket;
  readonly #upstream: WebSocket;
  readonly #pending: { data: RawData; binary: boolean }[] = [];
  /** Per direction: messages waiting for their delivery time, in delivery order. */
  readonly #queues = { up: new DeliveryQueue(), down: new DeliveryQueue() };
  /** Per direction: a message held back to be delivered after the next one. */
  readonly #held: { up?: Delivery; down?: Delivery } = {};
  #closed = false;
  sawPartition = false;

  constructor(
    client: WebSocket,
    target: string,
    faults: () => LinkFaults,
    random: SeededRandom,
    stats: FaultProxyStats,
  ) {
    this.#client = client;
    this.#faults = faults;
    this.#random = random;
    this.#stats = stats;
    this.#upstream = new WebSocket(target, { perMessageDeflate: false });
    this.#upstream.on('open', () => {
      for (const m of this.#pending.splice(0)) this.#forward('up', m.data, m.binary);
    });
    client.on('message', (data, binary) => {
      if (this.#upstream.readyState === WebSocket.CONNECTING) this.#pending.push({ data, binary });
      else this.#forward('up', data, binary);
    });
    this.#upstream.on('message', (data, binary) => this.#forward('down', data, binary));
    const closeOther = (other: WebSocket) => (code: number, reason: Buffer) => {
      if (this.#closed) return;
      this.#closed = true;
      // 1005 and 1006 are reserved for "no code" and "abnormal": they cannot be sent.
      if (other.readyState === WebSocket.OPEN) other.close(code === 1005 || code === 1006 ? 1001 : code, reason);
      else other.terminate();
    };
    client.on('close', closeOther(this.#upstream));
    this.#upstream.on('close', closeOther(client));
    client.on('error', () => this.reset());
    this.#upstream.on('error', () => this.reset());
  }

  #forward(direction: 'up' | 'down', data: RawData, binary: boolean): void {
    const faults = this.#faults();
    if (faults.partitioned) {
      this.sawPartition = true;
      this.#stats.dropped++;
      return;
    }
    if (faults.resetRate && this.#random.chance(faults.resetRate)) {
      this.reset();
      return;
    }
    if (faults.dropRate && this.#random.chance(faults.dropRate)) {
      this.#stats.dropped++;
      return;
    }
    const copies = faults.duplicateRate && this.#random.chance(faults.duplicateRate) ? 2 : 1;
    if (copies === 2) this.#stats.duplicated++;
    const target = direction === 'up' ? this.#upstream : this.#client;
    const [min, max] = faults.delayMs ?? [0, 0];
    const delivery: Delivery = {
      at: performance.now() + (max > 0 ? min + this.#random.next() * (max - min) : 0),
      deliver: () => {
        for (let i = 0; i < copies; i++) {
          if (target.readyState === WebSocket.OPEN) {
            target.send(data, { binary });
            this.#stats.forwarded++;
          }
        }
      },
    };
    const queue = this.#queues[direction];
    const held = this.#held[direction];
    if (!held && faults.reorderRate && this.#random.chance(faults.reorderRate)) {
      this.#stats.reordered++;
      this.#held[direction] = delivery;
      // If nothing overtakes it soon, it goes anyway.
      setTimeout(() => {
        if (this.#held[direction] === delivery) {
          this.#held[direction] = undefined;
          queue.push(delivery);
        }
      }, REORDER_HOLD_MS);
      return;
    }
    queue.push(delivery);
    if (held) {
      this.#held[direction] = undefined;
      queue.push(held);
    }
  }

  reset(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#stats.resets++;
    this.#client.terminate();
    this.#upstream.terminate();
  }

  get closed(): boolean {
    return this.#closed;
  }
}

export async function startFaultProxy(options: FaultProxyOptions): Promise<FaultProxy> {
  let faults: LinkFaults = options.faults ?? {};
  const random = seededRandom(options.seed ?? 1);
  const stats: FaultProxyStats = { connections: 0, forwarded: 0, dropped: 0, duplicated: 0, reordered: 0, resets: 0 };
  const links = new Set<Link>();
  let target = options.target.replace(/\/+$/, '');
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: options.maxMessageBytes ?? 1024 * 1024,
    perMessageDeflate: false,
  });
  /** HTTP requests held unanswered by a partition. */
  const heldRequests = new Set<ServerResponse>();
  const server: Server = createServer((req, res) => {
    if (faults.partitioned) {
      heldRequests.add(res);
      res.on('close', () => heldRequests.delete(res));
      return;
    }
    const url = target.replace(/^ws/, 'http') + (req.url ?? '/');
    const upstream = (url.startsWith('https:') ? requestTls : request)(
      url,
      { method: req.method, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on('error', () => (res.headersSent ? res.destroy() : res.writeHead(502).end()));
    req.pipe(upstream);
  });
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    wss.handleUpgrade(req, socket, head, (client) => {
      stats.connections++;
      const link = new Link(client, target + (req.url ?? '/'), () => faults, random, stats);
      links.add(link);
      client.on('close', () => links.delete(link));
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  const host = options.host ?? '127.0.0.1';

  const setFaults = (next: LinkFaults) => {
    const healed = faults.partitioned && !next.partitioned;
    faults = next;
    if (healed) {
      for (const link of links) if (link.sawPartition) link.reset();
      for (const res of heldRequests) res.destroy();
    }
  };
  return {
    url: `ws://${host}:${port}`,
    stats,
    setFaults,
    partition(on) {
      setFaults({ ...faults, partitioned: on });
    },
    resetConnections() {
      for (const link of links) link.reset();
    },
    retarget(next) {
      target = next.replace(/\/+$/, '');
    },
    async close() {
      for (const link of links) link.reset();
      for (const res of heldRequests) res.destroy();
      wss.close();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
