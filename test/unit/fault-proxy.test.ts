/**
 * The fault proxy does what each fault says, message by message, over real
 * sockets: an echo server behind it stands in for a replica (the proxy, not
 * the server, is under test here), and a plain HTTP server for its /healthz.
 */
import { createServer } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { startFaultProxy, type FaultProxy } from '../../src/testing/fault-proxy.js';

let echo: WebSocketServer;
let echoUrl: string;
const proxies: FaultProxy[] = [];

beforeAll(async () => {
  echo = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise((resolve) => echo.once('listening', resolve));
  echo.on('connection', (socket) => socket.on('message', (data, binary) => socket.send(data, { binary })));
  const address = echo.address();
  echoUrl = `ws://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
});

afterAll(async () => {
  await Promise.all(proxies.map((p) => p.close()));
  echo.close();
});

async function proxy(faults: Parameters<typeof startFaultProxy>[0]['faults'] = {}): Promise<FaultProxy> {
  const p = await startFaultProxy({ target: echoUrl, faults, seed: 7 });
  proxies.push(p);
  return p;
}

async function connect(url: string): Promise<{ socket: WebSocket; received: string[]; closed: Promise<number> }> {
  const socket = new WebSocket(url);
  const received: string[] = [];
  socket.on('message', (data) => received.push(data.toString()));
  const closed = new Promise<number>((resolve) => socket.on('close', (code) => resolve(code)));
  await new Promise((resolve, reject) => {
    socket.once('open', resolve);
    socket.once('error', reject);
  });
  return { socket, received, closed };
}

const settle = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(condition: () => boolean, timeoutMs = 2000): Promise<void> {
  const start = Date.now();
  while (!condition()) {
    if (Date.now() - start > timeoutMs) throw new Error('condition not met in time');
    await settle(10);
  }
}

describe('fault proxy', () => {
  it('forwards in order with no faults, and keeps order under delay', async () => {
    const p = await proxy({ delayMs: [5, 30] });
    const { socket, received } = await connect(p.url);
    for (let i = 0; i < 20; i++) socket.send(String(i));
    await until(() => received.length === 20);
    expect(received).toEqual(Array.from({ length: 20 }, (_, i) => String(i)));
    socket.close();
  });

  it('drops every message at drop rate 1 and duplicates every one at duplicate rate 1', async () => {
    const dropping = await proxy({ dropRate: 1 });
    const a = await connect(dropping.url);
    a.socket.send('lost');
    await settle(100);
    expect(a.received).toEqual([]);
    expect(dropping.stats.dropped).toBe(1);
    a.socket.close();

    const duplicating = await proxy({ duplicateRate: 1 });
    const b = await connect(duplicating.url);
    b.socket.send('twice');
    // Duplicated on the way up (echoed twice) and again on the way down.
    await until(() => b.received.length === 4);
    expect(b.received).toEqual(['twice', 'twice', 'twice', 'twice']);
    b.socket.close();
  });

  it('reorders: a held message arrives after the next one', async () => {
    const p = await proxy();
    const { socket, received } = await connect(p.url);
    p.setFaults({ reorderRate: 1 });
    socket.send('first');
    // Wait for the proxy to hold 'first' (a fixed pause lost the race on a loaded machine: 'first' then
    // reached the proxy after the faults were cleared and went straight through).
    await until(() => p.stats.reordered === 1);
    p.setFaults({});
    socket.send('second');
    await until(() => received.length === 2);
    expect(received).toEqual(['second', 'first']);
    expect(p.stats.reordered).toBeGreaterThanOrEqual(1);
    socket.close();
  });

  it('partitions as a black hole and resets the connections that lived through it', async () => {
    const p = await proxy();
    const { socket, received, closed } = await connect(p.url);
    p.partition(true);
    socket.send('into the void');
    await settle(100);
    expect(received).toEqual([]);
    p.partition(false);
    await closed;
    const fresh = await connect(p.url);
    fresh.socket.send('after');
    await until(() => fresh.received.length === 1);
    fresh.socket.close();
  });

  it('resets every connection on demand', async () => {
    const p = await proxy();
    const { closed } = await connect(p.url);
    p.resetConnections();
    expect(await closed).toBe(1006);
    expect(p.stats.resets).toBe(1);
  });
});

describe('fault proxy: plain HTTP on the same port (a replica’s /healthz and /metrics)', () => {
  it('passes requests through, holds them unanswered during a partition, and cuts them off when it heals', async () => {
    const target = createServer((req, res) => {
      res.writeHead(req.url === '/healthz' ? 200 : 404, { 'content-type': 'text/plain' });
      res.end(`${req.method} ${req.url}`);
    });
    await new Promise<void>((resolve) => target.listen(0, '127.0.0.1', resolve));
    const { port } = target.address() as { port: number };
    const p = await startFaultProxy({ target: `ws://127.0.0.1:${port}` });
    proxies.push(p);
    const base = p.url.replace(/^ws/, 'http');
    try {
      const answer = await fetch(`${base}/healthz`);
      expect([answer.status, await answer.text()]).toEqual([200, 'GET /healthz']);
      expect((await fetch(`${base}/elsewhere`)).status).toBe(404);
      p.partition(true);
      const held = fetch(`${base}/healthz`);
      const outcome = await Promise.race([
        held.then(
          () => 'answered',
          () => 'failed',
        ),
        settle(300).then(() => 'held'),
      ]);
      expect(outcome).toBe('held');
      p.partition(false);
      await expect(held).rejects.toThrow();
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
    } finally {
      target.closeAllConnections();
      await new Promise((resolve) => target.close(resolve));
    }
  });
});
