/**
 * The transport floor: what one request and its reply cost in CPU over the
 * project's wire (WebSocket, binary msgpack frames, the project's codec)
 * between two Node processes on this box, with nothing behind it
 * (echo-child.ts). An acquire + release cycle at N = 4 is six such round
 * trips (three signers, each an acquire and a release) plus the guarded
 * write's HTTP round trip, so six times this figure is CPU that no change to
 * the rules, the storage or the crypto can remove.
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { WebSocket } from 'ws';
import { QuorumFenceError } from '../common/errors.js';
import { decodeServerMessage, encodeMessage } from '../protocol/codec.js';
import { ownCpuMs, processCpuMs } from './counters.js';

export interface TransportFloor {
  readonly connections: number;
  readonly roundTrips: number;
  readonly perSecond: number;
  /** CPU per round trip: the client process (this one), the server process, and both. */
  readonly clientCpuMs: number;
  readonly serverCpuMs: number;
  readonly totalCpuMs: number;
}

/** `connections` closed loops of one acquire-sized request each, for `seconds` after `warmupSeconds`. */
export async function measureTransportFloor(
  connections: number,
  seconds: number,
  warmupSeconds = 0.5,
): Promise<TransportFloor> {
  const child = fork(fileURLToPath(new URL('./echo-child.js', import.meta.url)), [], {
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  try {
    const port = await new Promise<number>((resolve, reject) => {
      child.once('message', (message) => resolve(Number(message)));
      child.once('exit', (code) => reject(new QuorumFenceError('INTERNAL', `the echo process exited (${code})`)));
    });
    const sockets = await Promise.all(
      Array.from(
        { length: connections },
        () =>
          new Promise<WebSocket>((resolve, reject) => {
            const socket = new WebSocket(`ws://127.0.0.1:${port}`, { perMessageDeflate: false });
            socket.binaryType = 'nodebuffer';
            socket.once('open', () => resolve(socket));
            socket.once('error', reject);
          }),
      ),
    );
    const warmupEnds = performance.now() + warmupSeconds * 1000;
    const ends = warmupEnds + seconds * 1000;
    let counted = 0;
    let cpu: { client: number; server: number } | undefined;
    let cpuEnd: { client: number; server: number } | undefined;
    let id = 0;
    const request = () =>
      encodeMessage({ type: 'acquire', id: ++id & 0xffff, resource: `transport/${id}`, epoch: 1n, ttlMs: 1000 });
    await Promise.all(
      sockets.map(
        (socket) =>
          new Promise<void>((resolve) => {
            socket.on('message', (data: Buffer) => {
              decodeServerMessage(new Uint8Array(data));
              const now = performance.now();
              if (now >= warmupEnds && !cpu) cpu = { client: ownCpuMs(), server: processCpuMs(child.pid!) };
              if (now >= ends) {
                cpuEnd ??= { client: ownCpuMs(), server: processCpuMs(child.pid!) };
                return resolve();
              }
              if (cpu) counted++;
              socket.send(request());
            });
            socket.send(request());
          }),
      ),
    );
    for (const socket of sockets) socket.terminate();
    const client = (cpuEnd!.client - cpu!.client) / counted;
    const server = (cpuEnd!.server - cpu!.server) / counted;
    return {
      connections,
      roundTrips: counted,
      perSecond: counted / seconds,
      clientCpuMs: client,
      serverCpuMs: server,
      totalCpuMs: client + server,
    };
  } finally {
    child.removeAllListeners();
    child.kill();
  }
}
