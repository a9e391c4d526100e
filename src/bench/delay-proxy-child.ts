/**
 * The bench's network: delay proxies (src/testing/delay-proxy.ts) in a
 * process of their own, so that the delays never wait on the event loops of
 * the processes being measured. argv[2] is the one-way delay in ms. Each IPC
 * message `{ id, target: { host, port } }` opens a route to that target and is
 * answered `{ id, port }` (or `{ id, error }`); `{ id, stats: true }` is
 * answered with every route's figures summed. Never a test, never a server
 * anyone else uses: it binds to loopback and the parent kills it.
 */
import {
  emptyDelayProxyStats,
  startDelayProxy,
  type DelayProxy,
  type DelayProxyStats,
} from '../testing/delay-proxy.js';

const oneWayMs = Number(process.argv[2]);
if (!process.send || !(oneWayMs >= 0)) {
  process.stderr.write('delay-proxy-child: run by bench --rtt through fork(), with a one-way delay in ms\n');
  process.exit(2);
}
const routes: DelayProxy[] = [];

function summed(): DelayProxyStats {
  const sum = emptyDelayProxyStats();
  for (const { stats } of routes) {
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

interface Request {
  readonly id: number;
  readonly target?: { readonly host: string; readonly port: number };
  readonly stats?: true;
}

process.on('message', (message: Request) => {
  if (message.stats) return void process.send!({ id: message.id, stats: summed() });
  if (!message.target) return void process.send!({ id: message.id, error: 'a request names a target or stats' });
  startDelayProxy({ target: message.target, oneWayMs }).then(
    (proxy) => {
      routes.push(proxy);
      process.send!({ id: message.id, port: proxy.port });
    },
    (error: unknown) => process.send!({ id: message.id, error: String(error) }),
  );
});
process.send('ready');
