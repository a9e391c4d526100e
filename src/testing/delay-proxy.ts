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
 * A route may add an extra one-way delay on top (`extraOneWayMs`): the same
 * for every connection, or per connection by where it was dialed from (the
 * bench's gray faults slow one node's links, those it dials too). It is read
 * for every chunk, so `setExtraOneWayMs` takes effect at once, on open
 * connections as well; chunks still leave in the order they arrived, so when
 * the extra delay falls, a chunk waits for the ones before it.
 *
 * Not modelled: the TCP handshake's round trip (the upstream connection is
 * opened when the client's is accepted; the bench's loops run on open
 * keep-alive connections), bandwidth, loss.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';
import { QuorumFenceError } from '../common/errors.js';
import { DeliveryQueue } from './delivery-queue.js';

/** Where a proxied connection was dialed from: the dialing socket's address and port, and the proxy's port it dialed. */
export interface ConnectionSource {
  readonly remoteAddress: string;
  readonly remotePort: number;
  readonly localPort: number;
}

/**
 * An extra one-way delay, ms, on top of `oneWayMs`: the same for every connection of the route, or chosen per
 * connection by where it came from (called for every chunk; a result that is not a number >= 0 counts as 0).
 */
export type ExtraDelay = number | ((source: ConnectionSource) => number);

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
  /** Added to `oneWayMs` in each direction (default 0); `setExtraOneWayMs` changes it while running. */
  readonly extraOneWayMs?: ExtraDelay;
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
  /**
   * Replaces the extra one-way delay; chunks that arrive from now on get it, on open connections too.
   * @throws QuorumFenceError INVALID_ARGUMENT for a number that is not finite and >= 0
   */
  setExtraOneWayMs(extra: ExtraDelay): void;
  close(): Promise<void>;
}

/**
 * The extra delay as given, checked.
 * @throws QuorumFenceError INVALID_ARGUMENT for a number that is not finite and >= 0
 */
function checkedExtra(extra: ExtraDelay): ExtraDelay {
  if (typeof extra === 'function') return extra;
  if (typeof extra !== 'number' || !Number.isFinite(extra) || extra < 0)
    throw new QuorumFenceError('INVALID_ARGUMENT', `extraOneWayMs must be a number of ms >= 0, got ${String(extra)}`, {
      field: 'extraOneWayMs',
    });
  return extra;
}

/** One direction of one connection: `from`'s chunks written to `to`, each `delayMs()` after it was read. */
function delayedPipe(from: Socket, to: Socket, delayMs: () => number, maxHeld: number, stats: DelayProxyStats): void {
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
    const at = performance.now() + delayMs();
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
  from.on('end', () => queue.push({ at: performance.now() + delayMs(), deliver: () => to.end() }));
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

/**
 * @throws QuorumFenceError INVALID_ARGUMENT for an extra delay that is not a number >= 0
 */
export async function startDelayProxy(options: DelayProxyOptions): Promise<DelayProxy> {
  const maxHeld = options.maxHeldBytes ?? DEFAULT_MAX_HELD_BYTES;
  const stats = emptyDelayProxyStats();
  let extra = checkedExtra(options.extraOneWayMs ?? 0);
  let listeningPort = 0;
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
    // Read now: a reset client's address is gone by the time its last chunks are timed.
    const source: ConnectionSource = {
      remoteAddress: client.remoteAddress ?? '',
      remotePort: client.remotePort ?? 0,
      localPort: listeningPort,
    };
    const delayMs = () => {
      if (typeof extra === 'number') return options.oneWayMs + extra;
      const added = extra(source);
      return options.oneWayMs + (Number.isFinite(added) && added > 0 ? added : 0);
    };
    delayedPipe(client, upstream, delayMs, maxHeld, stats);
    delayedPipe(upstream, client, delayMs, maxHeld, stats);
  });
  const host = options.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => resolve());
  });
  const address = server.address();
  listeningPort = typeof address === 'object' && address ? address.port : 0;
  return {
    host,
    port: listeningPort,
    stats,
    setExtraOneWayMs(next) {
      extra = checkedExtra(next);
    },
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  };
}
