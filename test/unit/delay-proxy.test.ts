/**
 * The delay proxy over real sockets: bytes arrive intact and in order, each chunk one delay after it
 * arrived (never early, never queued behind the delays of the chunks before it), a reader that stops
 * reading stops its writer within the proxy's bound, and ends, resets and unreachable targets end the link
 * without harming the next one. An extra delay (a gray fault's slow link) applies to the whole route or to
 * the connections dialed from one place, changes at once on open connections, never reorders a link, and
 * bad values are refused. A server behind the proxy stands in for a real one (the proxy is under test).
 */
import { randomBytes } from 'node:crypto';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { isQuorumFenceError } from '../../src/common/errors.js';
import { startDelayProxy, type DelayProxy, type ExtraDelay } from '../../src/testing/delay-proxy.js';
import { codeOf } from '../support/error-code.js';

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

async function proxyTo(
  port: number,
  oneWayMs: number,
  maxHeldBytes?: number,
  extraOneWayMs?: ExtraDelay,
): Promise<DelayProxy> {
  const proxy = await startDelayProxy({
    target: { host: '127.0.0.1', port },
    oneWayMs,
    ...(maxHeldBytes ? { maxHeldBytes } : {}),
    ...(extraOneWayMs === undefined ? {} : { extraOneWayMs }),
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

/** One byte to an echo server and back through `socket`: the round trip, ms. */
async function roundTrip(socket: Socket): Promise<number> {
  const t0 = performance.now();
  await new Promise<void>((resolve) => {
    socket.once('data', () => resolve());
    socket.write('x');
  });
  return performance.now() - t0;
}

describe('delay proxy: extra delay (a slow link)', () => {
  // Far apart, so that neither a loaded machine's timers (tens of ms late) nor a missing extra can pass for the other.
  const oneWayMs = 20;
  const extraMs = 300;

  it('adds to every connection of the route, and a change applies at once to the connections already open', async () => {
    const echo = await server((socket) => socket.pipe(socket));
    const proxy = await proxyTo(echo.port, oneWayMs, undefined, extraMs);
    const client = await dial(proxy.port);
    expect(await roundTrip(client)).toBeGreaterThanOrEqual(2 * (oneWayMs + extraMs));
    proxy.setExtraOneWayMs(0);
    const healed = await roundTrip(client);
    expect(healed).toBeGreaterThanOrEqual(2 * oneWayMs);
    expect(healed).toBeLessThan(2 * (oneWayMs + extraMs));
    proxy.setExtraOneWayMs(extraMs);
    expect(await roundTrip(client)).toBeGreaterThanOrEqual(2 * (oneWayMs + extraMs));
  });

  it('without one, the route keeps its one delay (the option is backward compatible)', async () => {
    const echo = await server((socket) => socket.pipe(socket));
    const proxy = await proxyTo(echo.port, oneWayMs);
    const client = await dial(proxy.port);
    const rtt = await roundTrip(client);
    expect(rtt).toBeGreaterThanOrEqual(2 * oneWayMs);
    expect(rtt).toBeLessThan(2 * (oneWayMs + extraMs));
  });

  it('per connection: only the connections dialed from where the function says are slowed, told where each came from', async () => {
    const echo = await server((socket) => socket.pipe(socket));
    const seen: { remoteAddress: string; remotePort: number; localPort: number }[] = [];
    let slowPort = -1;
    const proxy = await proxyTo(echo.port, oneWayMs, undefined, (source) => {
      seen.push(source);
      return source.remotePort === slowPort ? extraMs : 0;
    });
    const slow = await dial(proxy.port);
    const fast = await dial(proxy.port);
    slowPort = slow.localPort!;
    expect(await roundTrip(slow)).toBeGreaterThanOrEqual(2 * (oneWayMs + extraMs));
    const unslowed = await roundTrip(fast);
    expect(unslowed).toBeGreaterThanOrEqual(2 * oneWayMs);
    expect(unslowed).toBeLessThan(2 * (oneWayMs + extraMs));
    // Asked for each chunk, both ways, with the dialing socket's address and port and the proxy's own port.
    expect(new Set(seen.map((s) => s.remotePort))).toEqual(new Set([slow.localPort, fast.localPort]));
    for (const source of seen) expect(source).toMatchObject({ remoteAddress: '127.0.0.1', localPort: proxy.port });
  });

  it('a negative or non-numeric result of the function counts as no extra delay', async () => {
    const echo = await server((socket) => socket.pipe(socket));
    const proxy = await proxyTo(echo.port, oneWayMs, undefined, () => -extraMs);
    const client = await dial(proxy.port);
    expect(await roundTrip(client)).toBeGreaterThanOrEqual(2 * oneWayMs);
    proxy.setExtraOneWayMs(() => Number.NaN);
    expect(await roundTrip(client)).toBeGreaterThanOrEqual(2 * oneWayMs);
  });

  it('when the extra delay falls, a later chunk still leaves after the earlier ones: the link is never reordered', async () => {
    const received: Buffer[] = [];
    const arrivals: number[] = [];
    const receiver = await server((socket) =>
      socket.on('data', (chunk: Buffer) => {
        received.push(chunk);
        arrivals.push(performance.now());
      }),
    );
    const proxy = await proxyTo(receiver.port, oneWayMs, undefined, extraMs);
    const client = await dial(proxy.port);
    const sentAt = performance.now();
    client.write('first;');
    await sleep(50);
    proxy.setExtraOneWayMs(0);
    client.write('second;');
    await until(() => Buffer.concat(received).length === 'first;second;'.length);
    expect(Buffer.concat(received).toString()).toBe('first;second;');
    // The second chunk's own delay was 20 ms, but it waited for the first (320 ms after it was sent).
    expect(arrivals.at(-1)! - sentAt).toBeGreaterThanOrEqual(oneWayMs + extraMs);
  });

  it('refuses an extra delay that is negative, not finite or not a number, at start and when changed (INVALID_ARGUMENT)', async () => {
    const echo = await server((socket) => socket.pipe(socket));
    for (const bad of [-1, Number.NaN, Number.POSITIVE_INFINITY, '5' as unknown as number]) {
      const refused = await startDelayProxy({
        target: { host: '127.0.0.1', port: echo.port },
        oneWayMs,
        extraOneWayMs: bad,
      }).then(
        (proxy) => proxy.close().then(() => 'started'),
        (error: unknown) => (isQuorumFenceError(error) ? error.code : String(error)),
      );
      expect(refused, String(bad)).toBe('INVALID_ARGUMENT');
    }
    const proxy = await proxyTo(echo.port, oneWayMs, undefined, extraMs);
    expect(codeOf(() => proxy.setExtraOneWayMs(-5))).toBe('INVALID_ARGUMENT');
    // The refused change changed nothing: the route is still slow.
    const client = await dial(proxy.port);
    expect(await roundTrip(client)).toBeGreaterThanOrEqual(2 * (oneWayMs + extraMs));
  });
});
