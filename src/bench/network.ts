/**
 * The network the bench's `--rtt` runs put between every pair of processes
 * that talk: a process of delay proxies (delay-proxy-child.ts) with a fixed
 * one-way delay of half the round trip on every link, and the routes
 * through it. A side reaches a server through `links.route(url)`: the same
 * URL with the port of a proxy route to it (on loopback, the URL itself).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { connect, createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { QuorumFenceError } from '../common/errors.js';
import { parseDuration } from '../command/args.js';
import type { DelayProxyStats } from '../testing/delay-proxy.js';
import { processCpuMs } from './counters.js';
import { summarise, type Timing } from './measure.js';

/** How a bench side reaches its servers. */
export interface Links {
  /** The URL to dial for `url` (http:// or ws://, a host and a port): through the network, or `url` itself. */
  route(url: string): Promise<string>;
}

/** Loopback: every process dials every other one directly. */
export const LOOPBACK: Links = { route: async (url) => url };

/**
 * A round trip above this is not a network a lock service runs across, and the bench's warm-up waits (10 s
 * for 16 clients' first handoffs on a hot resource, a few round trips each) would run out.
 */
export const MAX_RTT_MS = 1000;

/**
 * `--rtt 0,2ms,20ms`: round-trip times in ms, ascending; 0 is loopback (no proxy).
 * @throws QuorumFenceError INVALID_OPTION for an empty list, a bad duration, one above MAX_RTT_MS, or a repeat
 */
export function parseRtts(value: string): number[] {
  const items = value.split(',').map((item) => item.trim());
  if (items.some((item) => item === ''))
    throw new QuorumFenceError('INVALID_OPTION', `--rtt expects a list like 0,2ms,20ms, got "${value}"`);
  const rtts = items.map((item) => parseDuration(item, 'rtt', 0));
  for (const rtt of rtts)
    if (rtt > MAX_RTT_MS)
      throw new QuorumFenceError('INVALID_OPTION', `--rtt: ${rtt} ms is above ${MAX_RTT_MS} ms, the most it measures`);
  if (new Set(rtts).size !== rtts.length)
    throw new QuorumFenceError('INVALID_OPTION', `--rtt names a round-trip time twice: "${value}"`);
  return rtts.sort((a, b) => a - b);
}

/** The delay proxies' process, with the routes opened through it so far. */
export interface DelayedNetwork extends Links {
  readonly rttMs: number;
  /** The proxies' process (for its CPU time). */
  readonly pid: number;
  /** Every route's figures, summed. */
  stats(): Promise<DelayProxyStats>;
  /**
   * One node's links `extraOneWayMs` slower each way, from now on (bench --gray's slow-link; 0 ends it): every
   * connection through a route to one of `urls` (routes opened later too), and every connection process
   * `fromPid` dialed through any route (an etcd member's peer links to the others). Resolves to how many open
   * connections that process had dialed through the routes.
   * @throws QuorumFenceError INVALID_ARGUMENT for an extra delay that is not a number >= 0
   */
  slowNode(fault: SlowNode): Promise<{ dialedByPid: number }>;
  close(): Promise<void>;
}

/** What DelayedNetwork.slowNode slows. */
export interface SlowNode {
  /** The node's own addresses (as given to `route`): every connection to them is slowed. */
  readonly urls: readonly string[];
  /** The node's process: the connections it dialed to others are slowed too. */
  readonly fromPid?: number;
  readonly extraOneWayMs: number;
}

/** Starts the proxies' process with a one-way delay of rttMs / 2 on every link. */
export async function startDelayedNetwork(rttMs: number): Promise<DelayedNetwork> {
  const child: ChildProcess = fork(
    fileURLToPath(new URL('./delay-proxy-child.js', import.meta.url)),
    [String(rttMs / 2)],
    {
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    },
  );
  const exited = new Promise<never>((_, reject) =>
    child.once('exit', (code, signal) =>
      reject(new QuorumFenceError('INTERNAL', `the delay proxies' process exited (${code ?? signal})`)),
    ),
  );
  exited.catch(() => undefined);
  await Promise.race([new Promise((resolve) => child.once('message', resolve)), exited]);
  let nextId = 0;
  const ask = <T>(request: object): Promise<T> => {
    const id = ++nextId;
    const answered = new Promise<T>((resolve, reject) => {
      const onMessage = (message: { id: number; error?: string } & T) => {
        if (message.id !== id) return;
        child.off('message', onMessage);
        if (message.error) reject(new QuorumFenceError('INTERNAL', `delay proxy: ${message.error}`));
        else resolve(message);
      };
      child.on('message', onMessage);
    });
    child.send({ id, ...request });
    return Promise.race([answered, exited]);
  };
  const routes = new Map<string, Promise<string>>();
  return {
    rttMs,
    pid: child.pid!,
    route(url) {
      const parsed = new URL(url);
      const key = `${parsed.hostname}:${parsed.port}`;
      let routed = routes.get(key);
      if (!routed) {
        routed = ask<{ port: number }>({ target: { host: parsed.hostname, port: Number(parsed.port) } }).then(
          ({ port }) => port.toString(),
        );
        routes.set(key, routed);
      }
      // The same URL with the route's port: only the authority changes, the scheme and any path stay.
      return routed.then((port) => url.replace(`//${parsed.host}`, `//${parsed.hostname}:${port}`));
    },
    stats: async () => (await ask<{ stats: DelayProxyStats }>({ stats: true })).stats,
    async slowNode(fault) {
      if (!(
        typeof fault.extraOneWayMs === 'number' &&
        fault.extraOneWayMs >= 0 &&
        Number.isFinite(fault.extraOneWayMs)
      ))
        throw new QuorumFenceError(
          'INVALID_ARGUMENT',
          `a slow node's extra delay must be ms >= 0, got ${fault.extraOneWayMs}`,
        );
      const targets = fault.urls.map((url) => {
        const parsed = new URL(url);
        return { host: parsed.hostname, port: Number(parsed.port) };
      });
      const { dialedByPid } = await ask<{ dialedByPid: number }>({
        slow: {
          targets,
          ...(fault.fromPid === undefined ? {} : { fromPid: fault.fromPid }),
          extraOneWayMs: fault.extraOneWayMs,
        },
      });
      return { dialedByPid };
    },
    async close() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const gone = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await gone;
    },
  };
}

/** CPU ms the proxies' process has used so far (0 on loopback, where there is none). */
export function networkCpuMs(network: DelayedNetwork | undefined): number {
  return network ? processCpuMs(network.pid) : 0;
}

/**
 * The round trip a link actually gives: `samples` one-byte pings through a route to an echo server in this
 * process, one at a time (the proxies' timers and scheduling add to the delay set; this says by how much).
 */
export async function measureRoundTrip(links: Links, samples: number): Promise<Timing> {
  const echo = createServer((socket) => socket.on('data', (data) => socket.write(data)));
  await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', () => resolve()));
  const address = echo.address();
  const url = new URL(
    await links.route(`http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`),
  );
  const socket = connect({ host: url.hostname, port: Number(url.port) });
  socket.setNoDelay(true);
  try {
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    const times: number[] = [];
    for (let i = 0; i < samples; i++) {
      const t0 = performance.now();
      await new Promise<void>((resolve, reject) => {
        socket.once('data', () => resolve());
        socket.once('error', reject);
        socket.write('x');
      });
      socket.removeAllListeners('error');
      times.push(performance.now() - t0);
    }
    return summarise(times);
  } finally {
    socket.destroy();
    await new Promise((resolve) => echo.close(resolve));
  }
}
