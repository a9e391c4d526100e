/**
 * The SDK's transport (replica-transport.ts): one `ws` WebSocket per link, without compression, bounded by the
 * client's maxFrameBytes and handshake timeout. Closing a link that is open sends a close frame and terminates the
 * socket a second later should the replica never answer it; late errors of a closed socket are swallowed.
 */
import { WebSocket, type RawData } from 'ws';
import type { LinkEvents, LinkOptions, ReplicaLink, ReplicaTransport } from './replica-transport.js';

/** How long a replica has to answer our close frame before the socket is terminated. */
const CLOSE_ANSWER_MS = 1_000;

export const webSocketTransport: ReplicaTransport = {
  connect(endpoint: string, options: LinkOptions, events: LinkEvents): ReplicaLink {
    const socket = new WebSocket(endpoint, {
      perMessageDeflate: false,
      maxPayload: options.maxFrameBytes,
      handshakeTimeout: options.handshakeTimeoutMs,
    });
    socket.on('open', () => events.open());
    socket.on('message', (data: RawData, isBinary: boolean) =>
      events.frame(isBinary ? bytesOf(data) : bytesOf(data).toString('utf8')),
    );
    socket.on('pong', (data: Buffer) => events.pong(data));
    socket.on('error', (error: Error) => events.error(error.message));
    socket.on('close', (code: number, reason: Buffer) => events.close(code, reason.toString('utf8')));
    return new WebSocketLink(socket);
  },
};

class WebSocketLink implements ReplicaLink {
  readonly #socket: WebSocket;

  constructor(socket: WebSocket) {
    this.#socket = socket;
  }

  get isOpen(): boolean {
    return this.#socket.readyState === WebSocket.OPEN;
  }

  send(frame: Uint8Array): void {
    this.#socket.send(frame);
  }

  ping(data: Uint8Array): void {
    this.#socket.ping(data);
  }

  close(code: number, reason: string): void {
    const socket = this.#socket;
    socket.removeAllListeners();
    // Late errors from a socket we already gave up on must not become uncaught exceptions.
    socket.on('error', () => {});
    try {
      if (socket.readyState === WebSocket.OPEN) {
        socket.close(code, reason);
        // A replica that never answers the close handshake must not keep the socket open.
        setTimeout(() => socket.terminate(), CLOSE_ANSWER_MS).unref();
      } else {
        socket.terminate();
      }
    } catch {
      // Closing a socket that is already going away: nothing left to do.
    }
  }
}

function bytesOf(data: RawData): Buffer {
  return Array.isArray(data) ? Buffer.concat(data) : data instanceof ArrayBuffer ? Buffer.from(data) : data;
}
