/**
 * How ceremony packets move: an interface the runner uses, and the real one
 * over WebSocket. Each participant listens at its ceremony endpoint and dials
 * every other one; it sends on the connections it dialled and receives on the
 * ones it accepted.
 *
 * The endpoints are public (they are in the proposal), so an accepted
 * connection holds nothing until it says who dialled: the listener sends a
 * fresh challenge and the dialler signs it with its node key (hello.ts).
 * Until then it waits apart from the members' places (admission.ts: in places
 * reserved for the address prefixes the other participants' endpoints resolve
 * to, which only a newcomer of the same prefix displaces, or else in a general
 * pool bounded in all and per prefix, the oldest displaced by a newcomer), and
 * is dropped after HANDSHAKE_TIMEOUT_MS, whether it is stuck
 * in its HTTP upgrade or silent after it. Each participant has one place: its
 * new connection replaces its old one. A place whose connection answers no
 * ping for two heartbeats is freed. What one participant may send over the
 * whole ceremony is bounded (framesAllowed). Packets stay signed and shares
 * sealed end to end: the hello only keeps outsiders from holding places.
 */
import { lookup } from 'node:dns/promises';
import { createServer, type IncomingMessage } from 'node:http';
import { isIP, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { WebSocket, WebSocketServer, type RawData } from 'ws';
import { QuorumFenceError } from '../common/errors.js';
import { addressPrefix, admissionLimits, admit, type CeremonyWaiting } from './admission.js';
import { decodeChallenge, encodeChallenge, encodeHello, MAX_HELLO_BYTES, newChallenge, verifyHello } from './hello.js';
import type { NodeKey } from './node-key.js';
import { MAX_PACKET_BYTES, PHASES } from './packets.js';
import type { Proposal } from './proposal.js';

export interface CeremonyTransport {
  /** Queues a frame for a participant; delivered once its connection is up (bounded queue). */
  send(to: number, bytes: Uint8Array): void;
  /** Every frame received from an authenticated participant. */
  onFrame(handler: (bytes: Uint8Array) => void): void;
  /** Connections refused at the hello (garbage, another ceremony, a bad signature), for the progress log. */
  onRefused(handler: (refusal: { reason: string; code: string }) => void): void;
  /** Frames still queued for participants not yet reached. */
  pending(): number;
  close(): Promise<void>;
}

/**
 * How long a connection may take from TCP accept to a valid hello: one round trip and a signature for an honest
 * member, so 5 s covers a slow WAN and a loaded host, and is all an idle outsider holds a waiting place for.
 */
export const HANDSHAKE_TIMEOUT_MS = 5000;
/**
 * Ping period for connections in use. One that answered none of two pings (10 to 15 s) is dead and is dropped:
 * two, because after our own event loop was busy the first check runs before the answer is read.
 */
export const HEARTBEAT_MS = 5000;
/** Queued frames per peer: 6 phases and the relays, with room to spare; a full queue drops the oldest. */
const MAX_QUEUED_PER_PEER = 256;
/** Redial a participant that is not up yet this often. */
const REDIAL_MS = 200;
/** Look up again the endpoint hosts that did not resolve (a peer's name may appear only once its container runs). */
const RESOLVE_AGAIN_MS = 2000;

/**
 * Frames one participant may send a listener over the whole ceremony, all its connections together: one packet
 * per phase and a certificate, at most two relays (an echo, a ready) per reliable-broadcast instance (a complaint
 * per member, a justification per participant); twice that, since nothing is resent and it only stops a flood.
 */
export function framesAllowed(proposal: Proposal): number {
  return 2 * (PHASES.length + 1 + 2 * (proposal.n + proposal.participants.length));
}

interface Peer {
  readonly index: number;
  readonly url: string;
  socket: WebSocket | undefined;
  /** True once the hello is sent: frames then go out in order behind it. */
  open: boolean;
  readonly queue: Uint8Array[];
  timer: NodeJS.Timeout | undefined;
}

interface Waiting extends CeremonyWaiting {
  readonly socket: Duplex;
  readonly timer: NodeJS.Timeout;
}

/**
 * The address prefixes the other participants' ceremony endpoints resolve to, each with how many participants
 * it stands for (their reserved waiting places, admission.ts). An IP literal is its own; a name is looked up
 * (every address it has). Names that do not resolve are left out and listed in `unresolved`.
 */
export async function expectedPrefixes(
  proposal: Proposal,
  self: number,
): Promise<{ prefixes: Map<string, number>; unresolved: number }> {
  const prefixes = new Map<string, number>();
  let unresolved = 0;
  await Promise.all(
    proposal.participants
      .filter((p) => p.sender !== self)
      .map(async (participant) => {
        const { host } = listenAddressOf(participant.ceremonyEndpoint);
        let addresses: string[];
        try {
          addresses = isIP(host) ? [host] : (await lookup(host, { all: true })).map((a) => a.address);
        } catch {
          unresolved++;
          return;
        }
        for (const prefix of new Set(addresses.map(addressPrefix)))
          prefixes.set(prefix, (prefixes.get(prefix) ?? 0) + 1);
      }),
  );
  return { prefixes, unresolved };
}

/** Where a member listens by default: the host and port of its ceremony endpoint. */
export function listenAddressOf(url: string): { host: string; port: number } {
  const parsed = new URL(url);
  const port = parsed.port ? Number(parsed.port) : parsed.protocol === 'wss:' ? 443 : 80;
  return { host: parsed.hostname.replace(/^\[(.*)\]$/, '$1'), port };
}

function frameBytes(data: RawData): Uint8Array {
  const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
  return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** Pings connections in use and drops the ones that answered none of two pings. */
class Heartbeat {
  /** Pings sent to each connection since it was last heard from. */
  readonly #unanswered = new Map<WebSocket, number>();
  readonly #timer: NodeJS.Timeout;

  constructor() {
    this.#timer = setInterval(() => {
      for (const [socket, unanswered] of this.#unanswered) {
        if (unanswered >= 2) socket.terminate();
        else {
          this.#unanswered.set(socket, unanswered + 1);
          socket.ping();
        }
      }
    }, HEARTBEAT_MS);
    this.#timer.unref();
  }

  watch(socket: WebSocket): void {
    this.#unanswered.set(socket, 0);
    const heard = () => {
      if (this.#unanswered.has(socket)) this.#unanswered.set(socket, 0);
    };
    socket.on('pong', heard);
    socket.on('message', heard);
    socket.on('close', () => this.#unanswered.delete(socket));
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}

/**
 * Listens and starts dialling every other participant, authenticating with `nodeKey`.
 * @throws QuorumFenceError IO_ERROR when the address cannot be bound
 */
export async function openWebSocketTransport(options: {
  proposal: Proposal;
  self: number;
  nodeKey: NodeKey;
  listen?: { host: string; port: number };
}): Promise<CeremonyTransport> {
  const { proposal, self, nodeKey } = options;
  const listen = options.listen ?? listenAddressOf(proposal.participants[self - 1]!.ceremonyEndpoint);
  let onFrame: (bytes: Uint8Array) => void = () => undefined;
  let onRefused: (refusal: { reason: string; code: string }) => void = () => undefined;
  let closed = false;
  const heartbeat = new Heartbeat();
  let limits = admissionLimits(proposal.participants.length);
  /** Reserved places follow the expected prefixes as they resolve; a slow name service never delays listening. */
  let resolving: NodeJS.Timeout | undefined;
  const resolvePrefixes = () => {
    void expectedPrefixes(proposal, self).then(({ prefixes, unresolved }) => {
      if (closed) return;
      limits = admissionLimits(proposal.participants.length, prefixes);
      if (unresolved === 0) return;
      resolving = setTimeout(resolvePrefixes, RESOLVE_AGAIN_MS);
      resolving.unref();
    });
  };
  resolvePrefixes();
  const allowed = framesAllowed(proposal);
  const waiting = new Map<Duplex, Waiting>();
  /** Every TCP connection accepted and not yet closed, so close() ends them all. */
  const sockets = new Set<Socket>();
  let arrivals = 0;
  /** Each participant's one place: its authenticated connection. */
  const places = new Map<number, WebSocket>();
  const framesFrom = new Map<number, number>();

  const http = createServer((_request, response) => {
    response.writeHead(426, { connection: 'close' }).end();
  });
  const server = new WebSocketServer({
    noServer: true,
    maxPayload: MAX_PACKET_BYTES + 1024,
    perMessageDeflate: false,
    clientTracking: false,
  });
  await new Promise<void>((resolve, reject) => {
    http.once('listening', resolve);
    http.once('error', (error) =>
      reject(new QuorumFenceError('IO_ERROR', `cannot listen on ${listen.host}:${listen.port}: ${error.message}`)),
    );
    http.listen(listen.port, listen.host);
  });
  http.on('error', () => undefined);
  http.on('clientError', (_error, socket) => socket.destroy());
  http.on('connection', (socket: Socket) => {
    if (closed) return void socket.destroy();
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    const prefix = addressPrefix(socket.remoteAddress ?? 'unknown');
    const { reserved, displaced } = admit([...waiting.values()], prefix, limits);
    if (displaced) displaced.socket.destroy();
    const entry: Waiting = {
      order: arrivals++,
      prefix,
      reserved,
      socket,
      timer: setTimeout(() => socket.destroy(), HANDSHAKE_TIMEOUT_MS),
    };
    waiting.set(socket, entry);
    socket.on('error', () => undefined);
    socket.once('close', () => {
      clearTimeout(entry.timer);
      waiting.delete(socket);
    });
  });
  http.on('upgrade', (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    // Only a connection still waiting may upgrade (once).
    if (closed || !waiting.has(socket)) return void socket.destroy();
    server.handleUpgrade(request, socket, head, (ws) => accept(ws, socket));
  });

  /** A connection upgraded: challenge it; its first frame must be the hello, then it holds its sender's place. */
  const accept = (ws: WebSocket, raw: Duplex) => {
    ws.on('error', () => undefined);
    const challenge = newChallenge();
    let from: number | undefined;
    let refused = false;
    ws.send(encodeChallenge(proposal, challenge));
    ws.on('message', (data: RawData, isBinary) => {
      // Frames already read behind a refused hello are dropped with it.
      if (refused) return;
      if (from === undefined) {
        try {
          if (!isBinary) throw new QuorumFenceError('PROTOCOL_ERROR', 'ceremony hello: a text frame');
          from = verifyHello(frameBytes(data), proposal, self, challenge);
        } catch (error) {
          if (!(error instanceof QuorumFenceError)) throw error;
          refused = true;
          onRefused({ reason: error.message, code: error.code });
          return void ws.terminate();
        }
        const entry = waiting.get(raw);
        if (entry) clearTimeout(entry.timer);
        waiting.delete(raw);
        if ((framesFrom.get(from) ?? 0) >= allowed) {
          refused = true;
          return void ws.terminate();
        }
        places.get(from)?.terminate();
        places.set(from, ws);
        heartbeat.watch(ws);
        const sender = from;
        ws.on('close', () => {
          if (places.get(sender) === ws) places.delete(sender);
        });
        return;
      }
      const count = (framesFrom.get(from) ?? 0) + 1;
      framesFrom.set(from, count);
      if (count > allowed) {
        refused = true;
        return void ws.terminate();
      }
      if (isBinary) onFrame(frameBytes(data));
    });
  };

  const peers = new Map<number, Peer>();
  const flush = (peer: Peer) => {
    while (peer.open && peer.queue.length > 0) peer.socket!.send(peer.queue.shift()!);
  };
  const dial = (peer: Peer) => {
    if (closed) return;
    // A listener sends only its challenge: a small payload bound keeps a false one from filling our memory.
    const socket = new WebSocket(peer.url, {
      perMessageDeflate: false,
      handshakeTimeout: HANDSHAKE_TIMEOUT_MS,
      maxPayload: MAX_HELLO_BYTES,
    });
    peer.socket = socket;
    peer.open = false;
    const giveUp = setTimeout(() => socket.terminate(), HANDSHAKE_TIMEOUT_MS);
    socket.on('message', (data: RawData) => {
      if (peer.open || peer.socket !== socket) return;
      try {
        const challenge = decodeChallenge(frameBytes(data), proposal);
        socket.send(encodeHello(proposal, self, peer.index, challenge, (m) => nodeKey.sign(m)));
      } catch {
        return void socket.terminate();
      }
      clearTimeout(giveUp);
      peer.open = true;
      heartbeat.watch(socket);
      flush(peer);
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(giveUp);
      if (peer.socket !== socket) return;
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
      onFrame = next;
    },
    onRefused(next) {
      onRefused = next;
    },
    pending() {
      let count = 0;
      for (const peer of peers.values()) count += peer.queue.length + (peer.socket?.bufferedAmount ? 1 : 0);
      return count;
    },
    async close() {
      closed = true;
      heartbeat.stop();
      clearTimeout(resolving);
      for (const peer of peers.values()) {
        clearTimeout(peer.timer);
        // close, not terminate: what was sent last (our confirmation) still reaches the member.
        peer.socket?.close();
      }
      for (const entry of waiting.values()) clearTimeout(entry.timer);
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
