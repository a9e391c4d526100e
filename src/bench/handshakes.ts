/**
 * The replica bench's raw connections: the handshake a client does (challenge,
 * a signed hello, welcome) without the SDK, and the figure for a reconnect
 * storm: many connections authenticating at the same moment, as when every
 * client of a replica that restarted comes back at once.
 */
import { WebSocket } from 'ws';
import { QuorumFenceError } from '../common/errors.js';
import { ed25519Signer, newEd25519Seed } from '../common/ed25519.js';
import { decodeServerMessage, encodeMessage } from '../protocol/codec.js';
import { authTranscript } from '../protocol/messages.js';
import { processCpuMs } from './counters.js';

export interface LoadConnection {
  readonly socket: WebSocket;
  readonly sent: Map<number, number>;
}

/** Opens an authenticated raw connection (the same handshake a client does) with a fresh holder key. */
export function connectLoad(url: string, index: number): Promise<LoadConnection> {
  const signer = ed25519Signer(newEd25519Seed());
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, { perMessageDeflate: false });
    socket.binaryType = 'nodebuffer';
    socket.once('error', reject);
    let state: 'challenge' | 'welcome' = 'challenge';
    const onMessage = (data: Buffer): void => {
      const message = decodeServerMessage(new Uint8Array(data));
      if (state === 'challenge' && message.type === 'challenge') {
        const signature = signer.sign(authTranscript(message.nonce, message.clusterId, message.replica));
        socket.send(encodeMessage({ type: 'hello', id: 0, holder: signer.publicKey, signature }));
        state = 'welcome';
      } else if (state === 'welcome' && message.type === 'welcome') {
        socket.off('message', onMessage);
        resolve({ socket, sent: new Map() });
      } else {
        reject(new QuorumFenceError('CONNECTION_FAILED', `load connection ${index}: unexpected ${message.type}`));
      }
    };
    socket.on('message', onMessage);
  });
}

export interface HandshakeFigures {
  readonly connections: number;
  /** From the first connect to the last welcome (the clients' signing in this process included). */
  readonly wallMs: number;
  /** The replica process's CPU (/proc, all threads) per connection authenticated. */
  readonly replicaCpuMsEach: number;
}

/**
 * Opens `count` connections to the replica at `url` (process `pid`) at once, waits for every welcome, and
 * closes them. The replica must allow `count` unauthenticated connections from one address.
 */
export async function measureHandshakes(url: string, pid: number, count: number): Promise<HandshakeFigures> {
  const cpuBefore = processCpuMs(pid);
  const started = performance.now();
  const connections = await Promise.all(Array.from({ length: count }, (_, k) => connectLoad(url, k)));
  const wallMs = performance.now() - started;
  const cpuAfter = processCpuMs(pid);
  await Promise.all(
    connections.map((c) => new Promise((resolve) => (c.socket.once('close', resolve), c.socket.close()))),
  );
  return { connections: count, wallMs, replicaCpuMsEach: (cpuAfter - cpuBefore) / count };
}
