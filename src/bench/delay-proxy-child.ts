/**
 * The bench's network: delay proxies (src/testing/delay-proxy.ts) in a
 * process of their own, so that the delays never wait on the event loops of
 * the processes being measured. argv[2] is the one-way delay in ms. Each IPC
 * message `{ id, target: { host, port } }` opens a route to that target and is
 * answered `{ id, port }` (or `{ id, error }`); `{ id, stats: true }` is
 * answered with every route's figures summed.
 *
 * `{ id, slow: { targets, fromPid?, extraOneWayMs } }` is a gray fault's slow
 * node (bench --gray): every connection through a route to one of `targets`,
 * and every connection process `fromPid` dialed through any route (an etcd
 * member's peer links to the others), gets `extraOneWayMs` more each way,
 * from now on; 0 ends it. Answered `{ id, dialedByPid }`: how many open
 * connections that process had dialed through the routes (found in /proc,
 * socket-owner.ts). Never a test, never a server anyone else uses: it binds
 * to loopback and the parent kills it.
 */
import {
  emptyDelayProxyStats,
  startDelayProxy,
  type ConnectionSource,
  type DelayProxy,
  type DelayProxyStats,
} from '../testing/delay-proxy.js';
import { dialedBy, type DialedBy } from './socket-owner.js';

const oneWayMs = Number(process.argv[2]);
if (!process.send || !(oneWayMs >= 0)) {
  process.stderr.write('delay-proxy-child: run by bench --rtt through fork(), with a one-way delay in ms\n');
  process.exit(2);
}

interface Route {
  readonly target: string;
  readonly proxy: DelayProxy;
}
const routes: Route[] = [];

function summed(): DelayProxyStats {
  const sum = emptyDelayProxyStats();
  for (const { stats } of routes.map((route) => route.proxy)) {
    sum.connections += stats.connections;
    sum.chunks += stats.chunks;
    sum.bytes += stats.bytes;
    sum.pauses += stats.pauses;
    sum.lateMsSum += stats.lateMsSum;
    sum.maxHeldBytes = Math.max(sum.maxHeldBytes, stats.maxHeldBytes);
    sum.lateMsMax = Math.max(sum.lateMsMax, stats.lateMsMax);
  }
  return sum;
}

interface Target {
  readonly host: string;
  readonly port: number;
}

interface SlowNode {
  readonly targets: readonly Target[];
  readonly fromPid?: number;
  readonly extraOneWayMs: number;
}

interface Request {
  readonly id: number;
  readonly target?: Target;
  readonly stats?: true;
  readonly slow?: SlowNode;
}

const keyOf = (target: Target) => `${target.host}:${target.port}`;

/** The gray fault now in force (none: every route at its one delay). */
let slowNode: { targets: ReadonlySet<string>; dialed?: DialedBy; extraOneWayMs: number } | undefined;

/** A route's extra delay under `slowNode`: all of it to a slowed target, else per connection by who dialed it. */
function applySlowNode(route: Route): void {
  if (!slowNode || slowNode.extraOneWayMs === 0) return route.proxy.setExtraOneWayMs(0);
  if (slowNode.targets.has(route.target)) return route.proxy.setExtraOneWayMs(slowNode.extraOneWayMs);
  const { dialed, extraOneWayMs } = slowNode;
  route.proxy.setExtraOneWayMs(
    dialed ? (source: ConnectionSource) => (dialed.dialed(source.remotePort, source.localPort) ? extraOneWayMs : 0) : 0,
  );
}

process.on('message', (message: Request) => {
  if (message.stats) return void process.send!({ id: message.id, stats: summed() });
  if (message.slow) {
    const { targets, fromPid, extraOneWayMs } = message.slow;
    try {
      slowNode = {
        targets: new Set(targets.map(keyOf)),
        ...(fromPid === undefined || extraOneWayMs === 0 ? {} : { dialed: dialedBy(fromPid) }),
        extraOneWayMs,
      };
      for (const route of routes) applySlowNode(route);
    } catch (error) {
      slowNode = undefined;
      for (const route of routes) applySlowNode(route);
      return void process.send!({ id: message.id, error: String(error) });
    }
    const ports = new Set(routes.map((route) => route.proxy.port));
    return void process.send!({ id: message.id, dialedByPid: slowNode.dialed?.count(ports) ?? 0 });
  }
  const target = message.target;
  if (!target) return void process.send!({ id: message.id, error: 'a request names a target, stats or slow' });
  startDelayProxy({ target, oneWayMs }).then(
    (proxy) => {
      const route = { target: keyOf(target), proxy };
      routes.push(route);
      applySlowNode(route);
      process.send!({ id: message.id, port: proxy.port });
    },
    (error: unknown) => process.send!({ id: message.id, error: String(error) }),
  );
});
process.send('ready');
