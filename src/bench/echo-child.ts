/**
 * A WebSocket server that does nothing but the wire, for the system bench's
 * transport floor: it decodes each frame as a client request with the
 * project's codec and answers it with a granted reply of a real partial's
 * size, as a replica's connection layer would, with no rules, storage or
 * signing behind it. It tells the parent its port over IPC. Never a test,
 * never a server anyone else uses: it binds to loopback and the parent kills it.
 */
import { WebSocketServer, type WebSocket } from 'ws';
import { decodeClientMessage, encodeMessage } from '../protocol/codec.js';

if (!process.send) {
  process.stderr.write('echo-child: run by bench system through fork()\n');
  process.exit(2);
}
const PARTIAL = new Uint8Array(96).fill(7);
const server = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
server.on('connection', (socket: WebSocket) => {
  socket.on('message', (data: Buffer) => {
    const request = decodeClientMessage(new Uint8Array(data));
    socket.send(encodeMessage({ type: 'reply', id: request.id, outcome: { status: 'granted', partial: PARTIAL } }));
  });
});
server.on('listening', () => {
  const address = server.address();
  process.send!(typeof address === 'object' && address ? address.port : 0);
});
