/**
 * A network delay in user space, for any TCP protocol (HTTP, gRPC, WebSocket,
 * etcd's Raft peer links): each accepted connection is piped to one target,
 * and every chunk read in either direction is written to the other side a
 * fixed one-way delay after it arrived, in the order it arrived. The delay is
 * per chunk from its own arrival, never cumulative: a burst of chunks all
 * arrive one delay later. fault-proxy.ts is the per-message WebSocket proxy
 * for fault injection; this one forwards bytes and only delays them, so it
 * serves protocols the other cannot parse. Both deliver through one queue
 * (delivery-queue.ts).
 *
 * Back-pressure: a direction stops reading when the bytes it holds (waiting
 * for their time, or written but not yet taken by the kernel) reach
 * `maxHeldBytes`, and reads again when they fall below, so a slow reader
 * slows its writer as a real link would, and the proxy's memory is bounded.
 *
 * Not modelled: the TCP handshake's round trip (the upstream connection is
 * opened when the client's is accepted; the bench's loops run on open
 * keep-alive connections), bandwidth, loss.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';
import { DeliveryQueue } from './delivery-queue.js';

export interface DelayProxyOptions {
  /** Where every accepted connection is forwarded. */
  readonly target: { readonly host: string; readonly port: number };
  /** Delay of every chunk in each direction, ms (a round trip pays it twice). */
  readonly oneWayMs: number;
  readonly host?: string;
  /** 0 (the default) picks a free port. */
  readonly port?: number;
  /** Per direction of each connection, default DEFAULT_MAX_HELD_BYTES. */
  readonly maxHeldBytes?: number;
}

/**
 * 4 MiB per direction: at a 10 ms one-way delay that is 400 MB/s per connection, far above what the bench's
 * messages (a few hundred bytes each) need, so the bound limits memory and never the rate.
 */
export const DEFAULT_MAX_HELD_BYTES = 4 * 1024 * 1024;

export interface DelayProxyStats {
  connections: number;
  chunks: number;
  bytes: number;
  /** The most bytes any one direction held at once (never above maxHeldBytes plus one chunk). */
  maxHeldBytes: number;
  /** Times a direction stopped reading because it held maxHeldBytes. */
  pauses: number;
  /** How late chunks left, beyond their delay (timer granularity and this process's scheduling), ms. */
  lateMsSum: number;
  lateMsMax: number;
}

export interface DelayProxy {
  readonly host: string;
  readonly port: number;
  readonly stats: Readonly<DelayProxyStats>;
  close(): Promise<void>;
}

/** One direction of one connection: `from`'s chunks written to `to`, each `oneWayMs` after it was read. */
function delayedPipe(from: Socket, to: Socket, oneWayMs: number, maxHeld: number, stats: DelayProxyStats): void {
  const queue = new DeliveryQueue();
  let held = 0;
  const resumeIfRoom = () => {
    if (from.isPaused() && held < maxHeld && !from.destroyed) from.resume();
  };
  from.on('data', (chunk: Buffer) => {
    held += chunk.length;
    stats.chunks++;
    stats.bytes += chunk.length;
    stats.maxHeldBytes = Math.max(stats.maxHeldBytes, held);
    if (held >= maxHeld) {
      stats.pauses++;
      from.pause();
    }
    const at = performance.now() + oneWayMs;
    queue.push({
      at,
      deliver: () => {
        const late = performance.now() - at;
        stats.lateMsSum += late;
        stats.lateMsMax = Math.max(stats.lateMsMax, late);
        if (to.destroyed) return;
        // The chunk is held until the kernel has taken it: a reader that stops reading stops its writer.
        to.write(chunk, () => {
          held -= chunk.length;
          resumeIfRoom();
        });
      },
    });
  });
  // A half-close travels like data: after the chunks before it, one delay after it happened.
  from.on('end', () => queue.push({ at: performance.now() + oneWayMs, deliver: () => to.end() }));
  from.on('close', () => {
    if (!from.readableEnded) {
      // Reset or refused, not a clean end: the other side is reset too, at once (a dead link loses what was
      // in flight), so its peer sees the error instead of an orderly end.
      queue.clear();
      if (!to.destroyed) to.resetAndDestroy();
    }
  });
}

/** Statistics of a proxy that has carried nothing yet (also the start of a sum over proxies). */
export function emptyDelayProxyStats(): DelayProxyStats {
  return { connections: 0, chunks: 0, bytes: 0, maxHeldBytes: 0, pauses: 0, lateMsSum: 0, lateMsMax: 0 };
}

export async function startDelayProxy(options: DelayProxyOptions): Promise<DelayProxy> {
  const maxHeld = options.maxHeldBytes ?? DEFAULT_MAX_HELD_BYTES;
  const stats = emptyDelayProxyStats();
  const sockets = new Set<Socket>();
  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    // Errors end the link through 'close'; a listener keeps them from throwing.
    socket.on('error', () => undefined);
  };
  // Half-open: each direction ends on its own, when its own end arrives (a delay after it was sent).
  const server: Server = createServer({ allowHalfOpen: true }, (client) => {
    stats.connections++;
    const upstream = connect({ host: options.target.host, port: options.target.port, allowHalfOpen: true });
    track(client);
    track(upstream);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    delayedPipe(client, upstream, options.oneWayMs, maxHeld, stats);
    delayedPipe(upstream, client, options.oneWayMs, maxHeld, stats);
  });
  const host = options.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => resolve());
  });
  const address = server.address();
  return {
    host,
    port: typeof address === 'object' && address ? address.port : 0,
    stats,
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  };
}
