/**
 * How ceremony packets move: an interface the runner uses, and the real one
 * over WebSocket. Each member listens at its ceremony endpoint and dials every
 * other member's; it sends on the connections it dialled and receives on the
 * ones it accepted. Nothing on the wire is trusted (packets are signed and
 * shares sealed), so connections carry no authentication of their own; they
 * are bounded in count, frame size and frames per connection.
 */
import { WebSocket, WebSocketServer, type RawData } from 'ws';
import { QuorumFenceError } from '../common/errors.js';
import { MAX_PACKET_BYTES } from './packets.js';
import type { Proposal } from './proposal.js';

export interface CeremonyTransport {
  /** Queues a frame for a member; delivered once its connection is up (bounded queue). */
  send(to: number, bytes: Uint8Array): void;
  /** Every frame received, from anyone. */
  onFrame(handler: (bytes: Uint8Array) => void): void;
  /** Frames still queued for members not yet reached. */
  pending(): number;
  close(): Promise<void>;
}

/** An honest member sends 6 packets; a reconnecting one maybe twice that. 64 bounds a flooding connection. */
const MAX_FRAMES_PER_CONNECTION = 64;
/** Queued frames per peer: 6 phases, with room to spare; a full queue drops the oldest (the peer is far behind). */
const MAX_QUEUED_PER_PEER = 16;
/** Redial a member that is not up yet this often. */
const REDIAL_MS = 200;

interface Peer {
  readonly index: number;
  readonly url: string;
  socket: WebSocket | undefined;
  open: boolean;
  readonly queue: Uint8Array[];
  timer: NodeJS.Timeout | undefined;
}

/** Where a member listens by default: the host and port of its ceremony endpoint. */
export function listenAddressOf(url: string): { host: string; port: number } {
  const parsed = new URL(url);
  const port = parsed.port ? Number(parsed.port) : parsed.protocol === 'wss:' ? 443 : 80;
  return { host: parsed.hostname.replace(/^\[(.*)\]$/, '$1'), port };
}

/**
 * Listens and starts dialling every other member.
 * @throws QuorumFenceError IO_ERROR when the address cannot be bound
 */
export async function openWebSocketTransport(options: {
  proposal: Proposal;
  self: number;
  listen?: { host: string; port: number };
}): Promise<CeremonyTransport> {
  const { proposal, self } = options;
  const listen = options.listen ?? listenAddressOf(proposal.participants[self - 1]!.ceremonyEndpoint);
  let handler: (bytes: Uint8Array) => void = () => undefined;
  let closed = false;
  const server = new WebSocketServer({
    host: listen.host,
    port: listen.port,
    maxPayload: MAX_PACKET_BYTES + 1024,
    perMessageDeflate: false,
    // Every member dials once, and may redial after a drop; garbage senders get what is left.
    clientTracking: true,
  });
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', (error) =>
      reject(new QuorumFenceError('IO_ERROR', `cannot listen on ${listen.host}:${listen.port}: ${error.message}`)),
    );
  });
  server.on('error', () => undefined);
  server.on('connection', (socket) => {
    if (server.clients.size > 4 * proposal.participants.length) {
      socket.close(1013, 'too many connections');
      return;
    }
    let frames = 0;
    socket.on('error', () => undefined);
    socket.on('message', (data: RawData, isBinary) => {
      if (++frames > MAX_FRAMES_PER_CONNECTION) {
        socket.close(1008, 'too many frames');
        return;
      }
      if (!isBinary) return;
      const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
      handler(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    });
  });

  const peers = new Map<number, Peer>();
  const flush = (peer: Peer) => {
    while (peer.open && peer.queue.length > 0) peer.socket!.send(peer.queue.shift()!);
  };
  const dial = (peer: Peer) => {
    if (closed) return;
    const socket = new WebSocket(peer.url, { perMessageDeflate: false, handshakeTimeout: 5000 });
    peer.socket = socket;
    socket.on('open', () => {
      peer.open = true;
      flush(peer);
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      peer.open = false;
      if (!closed) peer.timer = setTimeout(() => dial(peer), REDIAL_MS);
    });
  };
  // Every participant, outside dealers of a reshare included: they deal and justify, and read the complaints.
  for (const member of proposal.participants) {
    if (member.sender === self) continue;
    const peer: Peer = {
      index: member.sender,
      url: member.ceremonyEndpoint,
      socket: undefined,
      open: false,
      queue: [],
      timer: undefined,
    };
    peers.set(member.sender, peer);
    dial(peer);
  }

  return {
    send(to, bytes) {
      const peer = peers.get(to);
      if (!peer || closed) return;
      peer.queue.push(bytes);
      if (peer.queue.length > MAX_QUEUED_PER_PEER) peer.queue.shift();
      flush(peer);
    },
    onFrame(next) {
      handler = next;
    },
    pending() {
      let count = 0;
      for (const peer of peers.values()) count += peer.queue.length + (peer.socket?.bufferedAmount ? 1 : 0);
      return count;
    },
    async close() {
      closed = true;
      for (const peer of peers.values()) {
        clearTimeout(peer.timer);
        // close, not terminate: what was sent last (our confirmation) still reaches the member.
        peer.socket?.close();
      }
      for (const client of server.clients) client.terminate();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
