/**
 * The delay proxy over real sockets: bytes arrive intact and in order, each chunk one delay after it
 * arrived (never early, never queued behind the delays of the chunks before it), a reader that stops
 * reading stops its writer within the proxy's bound, and ends, resets and unreachable targets end the link
 * without harming the next one. A server behind the proxy stands in for a real one (the proxy is under test).
 */
import { randomBytes } from 'node:crypto';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { startDelayProxy, type DelayProxy } from '../../src/testing/delay-proxy.js';

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step();
});

/** A server on a free loopback port; `onConnection` gets each accepted socket. */
async function server(onConnection: (socket: Socket) => void): Promise<{ server: Server; port: number }> {
  const listening = createServer({ allowHalfOpen: true }, onConnection);
  await new Promise<void>((resolve) => listening.listen(0, '127.0.0.1', resolve));
  const sockets = new Set<Socket>();
  listening.on('connection', (socket) => {
    sockets.add(socket);
    // A reset is expected where a test resets: the test reads it from 'close'; nothing may throw.
    socket.on('error', () => undefined);
  });
  cleanup.push(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => listening.close(resolve));
  });
  const address = listening.address();
  return { server: listening, port: typeof address === 'object' && address ? address.port : 0 };
}

async function proxyTo(port: number, oneWayMs: number, maxHeldBytes?: number): Promise<DelayProxy> {
  const proxy = await startDelayProxy({
    target: { host: '127.0.0.1', port },
    oneWayMs,
    ...(maxHeldBytes ? { maxHeldBytes } : {}),
  });
  cleanup.push(() => proxy.close());
  return proxy;
}

/** A client of the proxy; `errors` collects the codes of the errors it sees (a reset: ECONNRESET). */
async function dial(port: number): Promise<Socket & { errors: string[] }> {
  const socket = Object.assign(connect({ host: '127.0.0.1', port, allowHalfOpen: true }), { errors: [] as string[] });
  socket.setNoDelay(true);
  socket.on('error', (error: NodeJS.ErrnoException) => socket.errors.push(error.code ?? error.message));
  cleanup.push(() => void socket.destroy());
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  return socket;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(condition: () => boolean, timeoutMs = 10_000): Promise<void> {
  const start = Date.now();
  while (!condition()) {
    if (Date.now() - start > timeoutMs) throw new Error('condition not met in time');
    await sleep(10);
  }
}

describe('delay proxy', () => {
  it('carries 4 MiB each way intact and in order', async () => {
    const echo = await server((socket) => socket.pipe(socket));
    const proxy = await proxyTo(echo.port, 5);
    const client = await dial(proxy.port);
    const sent = randomBytes(4 * 1024 * 1024);
    const received: Buffer[] = [];
    let length = 0;
    client.on('data', (chunk: Buffer) => {
      received.push(chunk);
      length += chunk.length;
    });
    // In pieces of odd sizes, so chunk boundaries fall anywhere.
    for (let offset = 0; offset < sent.length; offset += 65_537) client.write(sent.subarray(offset, offset + 65_537));
    await until(() => length >= sent.length, 30_000);
    expect(Buffer.concat(received).equals(sent)).toBe(true);
    expect(proxy.stats.bytes).toBe(2 * sent.length);
  });

  it('delays each chunk from its own arrival: never early, never behind the delays of the chunks before it', async () => {
    const oneWayMs = 200;
    const arrivals: number[] = [];
    const receiver = await server((socket) => socket.on('data', () => arrivals.push(performance.now())));
    const proxy = await proxyTo(receiver.port, oneWayMs);
    const client = await dial(proxy.port);
    // Ten writes 40 ms apart, far enough that each is its own chunk: with delays summed (each chunk waiting
    // for the one before it to leave, then its own delay) the tenth would arrive after 2 s, 1.6 s after it
    // was sent.
    const sentAt: number[] = [];
    for (let i = 0; i < 10; i++) {
      sentAt.push(performance.now());
      client.write(`m${i}`);
      await sleep(40);
    }
    await until(() => arrivals.length === 10);
    const delays = arrivals.map((at, i) => at - sentAt[i]!);
    for (const delay of delays) {
      expect(delay).toBeGreaterThanOrEqual(oneWayMs);
      // One delay plus the slack of a loaded machine's timers; summed delays would be 360 ms and more.
      expect(delay).toBeLessThan(2 * oneWayMs);
    }
    expect(proxy.stats.chunks).toBe(10);
  });

  it('a reader that stops reading stops its writer: the proxy holds at most its bound, then resumes', async () => {
    const maxHeld = 256 * 1024;
    let upstream: Socket | undefined;
    let receivedBytes = 0;
    const receiver = await server((socket) => {
      upstream = socket;
      socket.pause();
      socket.on('data', (chunk: Buffer) => (receivedBytes += chunk.length));
    });
    const proxy = await proxyTo(receiver.port, 1, maxHeld);
    const client = await dial(proxy.port);
    const total = 32 * 1024 * 1024;
    const piece = Buffer.alloc(64 * 1024, 7);
    let written = 0;
    // Write while the socket takes it; stop when it pushes back.
    const writeSome = () => {
      while (written < total) {
        written += piece.length;
        if (!client.write(piece)) return;
      }
    };
    client.on('drain', writeSome);
    writeSome();
    await until(() => upstream !== undefined && proxy.stats.pauses > 0);
    await sleep(300);
    // Stuck: the reader reads nothing, so the kernel's buffers and the proxy's bound hold what was written.
    expect(written).toBeLessThan(total);
    expect(receivedBytes).toBe(0);
    // The bound, plus the chunk that crossed it.
    expect(proxy.stats.maxHeldBytes).toBeLessThanOrEqual(maxHeld + 64 * 1024);
    upstream!.resume();
    await until(() => receivedBytes === total, 60_000);
    expect(written).toBe(total);
  });

  it('carries a half-close one delay late and keeps the other direction open; a reset resets the other side', async () => {
    const oneWayMs = 50;
    let ended = 0;
    /** Per accepted connection: whether it closed with an error (a reset) or cleanly. */
    const closed: Promise<boolean>[] = [];
    const receiver = await server((socket) => {
      closed.push(new Promise((resolve) => socket.once('close', (hadError) => resolve(hadError))));
      socket.once('end', () => {
        ended = performance.now();
        // Half-open: the server answers after the client finished sending.
        socket.end('answer');
      });
      socket.resume();
    });
    const proxy = await proxyTo(receiver.port, oneWayMs);
    const client = await dial(proxy.port);
    const answer: Buffer[] = [];
    client.on('data', (chunk: Buffer) => answer.push(chunk));
    const endedAt = performance.now();
    client.end('last words');
    await new Promise((resolve) => client.once('end', resolve));
    expect(ended - endedAt).toBeGreaterThanOrEqual(oneWayMs);
    expect(Buffer.concat(answer).toString()).toBe('answer');
    expect(await closed[0]).toBe(false);

    const reset = await dial(proxy.port);
    await until(() => closed.length === 2);
    reset.resetAndDestroy();
    expect(await closed[1]).toBe(true);
  });

  it('ends a connection whose target refuses it, and serves the next one', async () => {
    const gone = await server(() => undefined);
    gone.server.close();
    await sleep(50);
    const proxy = await proxyTo(gone.port, 5);
    const client = await dial(proxy.port);
    await new Promise((resolve) => client.once('close', resolve));
    expect(client.errors).toEqual(['ECONNRESET']);
    // The proxy still listens: a second client is accepted (and reset the same way).
    const second = await dial(proxy.port);
    await new Promise((resolve) => second.once('close', resolve));
    expect(second.errors).toEqual(['ECONNRESET']);
    expect(proxy.stats.connections).toBe(2);
  });
});
