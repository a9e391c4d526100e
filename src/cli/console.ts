/** `quorumfence console`: the operator console, a live web page of the cluster (src/console, docs/console.md). */
import { resolve } from 'node:path';
import { QuorumFenceClient } from '../client/client.js';
import { EvidenceLog } from '../client/evidence.js';
import { loadIdentityFile } from '../client/identity.js';
import { QuorumFenceError } from '../common/errors.js';
import { createLogger } from '../common/log.js';
import { parseDuration, parseFlags, parseListen, resourceArgument, type Command } from '../command/args.js';
import { watchForStop } from '../command/lifecycle.js';
import { ConsoleStore } from '../console/console-store.js';
import { loadHolderNames } from '../console/holders.js';
import { ConsoleMetrics } from '../console/metrics.js';
import { ConsoleServer } from '../console/server.js';
import { ConsoleWatcher } from '../console/watcher.js';
import { CLIENT_FLAGS, clusterPathOf, identityPathOf, loadClusterForCommand } from './client-flags.js';

/** The console's default address: loopback, a port of its own beside the replicas' and the resource's. */
export const DEFAULT_CONSOLE_LISTEN = { host: '127.0.0.1', port: 7460 };
/** Resources --watch may name. */
const MAX_WATCHED = 32;

const usage = `usage: quorumfence console [--cluster FILE] [--identity FILE] [--listen HOST:PORT] [--allow-remote]
                          [--allowed-host HOST:PORT ...] [--interval 1s] [--timeout 2s]
                          [--watch RESOURCE ...] [--holders FILE] [--data DIR]

Serves a live web page of the cluster. At the top, a status line: healthy,
degraded (acquires work, but a replica is down, hung or faulty, or leases are at
risk) or unavailable (acquires fail), why, since when, and what to do next with
its runbook. Below: each replica, worst first (down, hung or faulty since when,
version, uptime, grants/s, refusals/s by reason, fsync mean and p99, signing
records, epoch floor, last error), the quorum margin (how many more replicas may
fail before acquires stop), the last 15 minutes of margin, grants/s and
refusals/s, which shipped alert rules would fire now, the running leases that
f+1 replicas list (holder, epoch, time left), recent grants, and evidence of
misbehaving replicas (equivocation proofs as JSON downloads). All times UTC.
A lease is shown only when f+1 replicas list it, and a replica is shown faulty
only on proof (a claim no honest replica can make, answers that break the
protocol, evidence); one that does not answer is unreachable, never faulty.
Logs replicas lost, back or faulty, margin changes and alerts (JSON, stderr).
Signs nothing. See docs/console.md.

Also serves GET /api/state (the page's JSON), GET /api/evidence/<id>.json,
POST /api/evidence (equivocation evidence a client found; kept only if it
verifies) and GET /metrics. Stops on SIGTERM or Ctrl-C.

options:
  --cluster FILE      the cluster description (cluster.json); default $QUORUMFENCE_CLUSTER
  --identity FILE     the client identity the console authenticates with; default $QUORUMFENCE_IDENTITY
  --listen HOST:PORT  where to serve the page     (default ${DEFAULT_CONSOLE_LISTEN.host}:${DEFAULT_CONSOLE_LISTEN.port}; port 0 picks one)
  --allow-remote      serve a non-loopback address (the page has no login: put it behind one)
  --allowed-host H:P  also answer under this Host name (repeat it for each name: a port-forward's
                      localhost:7460, a proxy's, a scraper's); every path, /metrics included, answers
                      only the console's loopback names, these, and IP addresses
  --interval DURATION how often to poll the replicas                         (default 1s)
  --timeout DURATION  how long each request of a poll may take               (default 2s)
  --watch RESOURCE    also ask the status of RESOURCE at every poll (repeatable, at most ${MAX_WATCHED})
  --holders FILE      names for holder keys on the page ({"format": "quorumfence/console-holders/v1",
                      "holders": {"<holder hex>": "name"}})
  --data DIR          keep the history, alert timers, convictions and evidence in DIR (created if
                      missing; one console per folder), so a restart keeps them; without it they
                      live in memory only
`;

export const command: Command = {
  summary: 'serve a live web page of the cluster (replicas, quorum margin, leases, evidence)',
  usage,
  async run(argv) {
    const { values } = parseFlags(argv, {
      ...CLIENT_FLAGS,
      listen: { type: 'string' },
      'allow-remote': { type: 'boolean' },
      'allowed-host': { type: 'string', multiple: true },
      interval: { type: 'string' },
      timeout: { type: 'string' },
      watch: { type: 'string', multiple: true },
      holders: { type: 'string' },
      data: { type: 'string' },
    });
    const listen = parseListen(values.listen, 'listen', DEFAULT_CONSOLE_LISTEN);
    const intervalMs = parseDuration(values.interval, 'interval', 1_000);
    const timeoutMs = parseDuration(values.timeout, 'timeout', 2_000);
    if (intervalMs < 100 || intervalMs > 3_600_000)
      throw new QuorumFenceError('INVALID_OPTION', `--interval expects 100ms .. 1h, got "${values.interval}"`);
    if (timeoutMs < 100 || timeoutMs > 60_000)
      throw new QuorumFenceError('INVALID_OPTION', `--timeout expects 100ms .. 60s, got "${values.timeout}"`);
    const watch = values.watch ?? [];
    if (watch.length > MAX_WATCHED)
      throw new QuorumFenceError('INVALID_OPTION', `--watch may be given at most ${MAX_WATCHED} times`);
    for (const resource of watch) {
      try {
        resourceArgument(resource, '--watch');
      } catch (error) {
        throw new QuorumFenceError(
          'INVALID_OPTION',
          `--watch ${JSON.stringify(resource)}: ${(error as Error).message}`,
        );
      }
    }
    for (const name of values['allowed-host'] ?? [])
      if (!/^(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/.test(name))
        throw new QuorumFenceError(
          'INVALID_OPTION',
          `--allowed-host expects HOST:PORT as a browser or scraper sends it in Host (e.g. localhost:7460), got ${JSON.stringify(name.slice(0, 80))}`,
        );
    const cluster = loadClusterForCommand(clusterPathOf(values));
    const identity = loadIdentityFile(identityPathOf(values));
    const holderNames = values.holders === undefined ? undefined : loadHolderNames(values.holders);
    const logger = createLogger('console', { level: 'info', destination: 2 });
    const evidence = new EvidenceLog();
    // Not connect(): the console starts (and shows them unreachable) even when no replica answers yet.
    const client = new QuorumFenceClient(cluster, identity, {
      evidenceLog: evidence,
      logger: createLogger('client', { level: 'warn', destination: 2 }),
    });
    const metrics = new ConsoleMetrics(cluster.idHex);
    let store: ConsoleStore | undefined;
    try {
      store = values.data === undefined ? undefined : await ConsoleStore.open(resolve(values.data), cluster);
    } catch (error) {
      await client.close();
      throw error;
    }
    const watcher = new ConsoleWatcher({
      store,
      client,
      evidence,
      metrics,
      intervalMs,
      timeoutMs,
      watch,
      holderNames,
      logger,
      onPollError: (error) => logger.error({ err: error }, 'a poll failed; the next one runs at the interval'),
    });
    let server: ConsoleServer;
    try {
      server = await ConsoleServer.start({
        watcher,
        metrics,
        host: listen.host,
        port: listen.port,
        allowRemote: values['allow-remote'] === true,
        allowedHosts: values['allowed-host'] ?? [],
      });
    } catch (error) {
      await client.close();
      await store?.close();
      throw error;
    }
    watcher.start();
    const stop = watchForStop(logger);
    process.stdout.write(`quorumfence console: serving ${server.url}/\n`);
    logger.info({ url: server.url, replicas: cluster.n }, 'listening');
    await stop.stopped;
    await watcher.stop();
    await server.close();
    await client.close();
    await store?.close();
    stop.dispose();
    return 0;
  },
};
