/**
 * Benchmark section `ceremony`: how long the dealerless key ceremony takes
 * for N = 4 and N = 7, every member in this one process (so one thread does
 * all N members' crypto: a pessimistic figure) over real WebSocket
 * connections on loopback, from the first accept to the last member done.
 */
import { createServer, type Server } from 'node:net';
import { generateNodeKey } from '../ceremony/node-key.js';
import { makeProposal } from '../ceremony/proposal.js';
import { runCeremony } from '../ceremony/runner.js';
import { openWebSocketTransport, type CeremonyTransport } from '../ceremony/transport.js';
import { QuorumFenceError } from '../common/errors.js';
import { table } from './report.js';
import { summarise, type BenchSize, type Timing } from './measure.js';

export interface CeremonyBenchFigures {
  readonly sizes: { n: number; durationMs: Timing; targetMs: number }[];
}

/** The targets: under 2 s for N = 4 and 5 s for N = 7. */
const TARGETS: Record<number, number> = { 4: 2000, 7: 5000 };

async function freeLoopbackPorts(count: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from(
      { length: count },
      () =>
        new Promise<Server>((resolve) => {
          const server = createServer();
          server.listen(0, '127.0.0.1', () => resolve(server));
        }),
    ),
  );
  const ports = servers.map((s) => (s.address() as { port: number }).port);
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  return ports;
}

async function oneCeremony(n: number): Promise<number> {
  const keys = Array.from({ length: n }, () => generateNodeKey());
  const ports = await freeLoopbackPorts(n);
  const proposal = makeProposal(
    keys.map((k, i) => ({
      nodeKey: k.nodeKey,
      encryptionKey: k.encryptionKey,
      endpoint: `ws://127.0.0.1:${7101 + i}`,
      ceremonyEndpoint: `ws://127.0.0.1:${ports[i]}`,
    })),
    (n - 1) / 3,
  );
  const transports: CeremonyTransport[] = [];
  try {
    for (let i = 1; i <= n; i++)
      transports.push(await openWebSocketTransport({ proposal, self: i, nodeKey: keys[i - 1]! }));
    const outcomes = await Promise.all(
      keys.map((nodeKey, k) => runCeremony({ proposal, nodeKey, self: k + 1, transport: transports[k]! })),
    );
    // Each run lingers until its packets are out; the duration is to the last member done.
    const elapsed = Math.max(...outcomes.map((o) => o.elapsedMs));
    const failed = outcomes.find((o) => !o.ok);
    if (failed && !failed.ok)
      throw new QuorumFenceError('CEREMONY_ABORTED', `bench ceremony aborted: ${failed.reason}`);
    return elapsed;
  } finally {
    await Promise.all(transports.map((t) => t.close()));
  }
}

/** Runs the section, stores its figures in `report.ceremony`, and returns its table. */
export async function benchCeremony(options: {
  size: BenchSize;
  progress: (line: string) => void;
  report: Record<string, unknown>;
}): Promise<string> {
  const sizes: CeremonyBenchFigures['sizes'] = [];
  for (const n of [4, 7]) {
    const samples: number[] = [];
    for (let run = 0; run < (options.size === 'full' ? 3 : 1); run++) {
      options.progress(`ceremony: N = ${n}, run ${run + 1} ...`);
      samples.push(await oneCeremony(n));
    }
    sizes.push({ n, durationMs: summarise(samples), targetMs: TARGETS[n]! });
  }
  const figures: CeremonyBenchFigures = { sizes };
  options.report.ceremony = figures;
  const rows = [
    ['key ceremony on loopback (all members in one process)', 'median', 'worst', 'target'],
    ...sizes.map((s) => [
      `N = ${s.n}`,
      `${s.durationMs.median.toFixed(0)} ms`,
      `${Math.max(s.durationMs.median, s.durationMs.p99).toFixed(0)} ms`,
      `< ${s.targetMs} ms (${(s.durationMs.median / s.targetMs).toFixed(2)}x)`,
    ]),
  ];
  return table(rows);
}
