/**
 * Ports free right now on loopback, for a process a test starts later: single ones, and a run of consecutive
 * ones (for a command line that counts up from a base port, as `keygen --base-port` does).
 *
 * They are drawn below the kernel's ephemeral range (Linux: 32768-60999), not asked of the OS with port 0. A port
 * the OS hands out that way comes from the ephemeral range, and between our check and the later bind, another
 * test's server on port 0, or any outgoing connection, may take the same one: the docs-example test once reached
 * another test's replica (HTTP 426) on the port its console should have had. Below the range, only another
 * test's draw could collide, one in thousands per pair of draws at the same moment.
 */
import { randomInt } from 'node:crypto';
import { createServer, type Server } from 'node:net';

/** Attempts at a consecutive run before giving up: a busy box rarely needs more than a few. */
const RANGE_ATTEMPTS = 50;
/** Where ports are drawn: registered ports below the ephemeral range, clear of the well-known ones. */
const DRAW_FROM = 20_000;
const DRAW_BELOW = 32_768;

function listenOn(port: number): Promise<Server | undefined> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(undefined));
    server.listen(port, '127.0.0.1', () => resolve(server));
  });
}

const closeAll = (servers: readonly Server[]) => Promise.all(servers.map((s) => new Promise((r) => s.close(r))));

/** `count` distinct ports, each free when this returns. @throws Error when too few are found */
export async function freePorts(count: number): Promise<number[]> {
  const held: Server[] = [];
  const ports: number[] = [];
  for (let attempt = 0; ports.length < count && attempt < count * RANGE_ATTEMPTS; attempt++) {
    const port = randomInt(DRAW_FROM, DRAW_BELOW);
    if (ports.includes(port)) continue;
    const server = await listenOn(port);
    if (!server) continue;
    held.push(server);
    ports.push(port);
  }
  await closeAll(held);
  if (ports.length < count) throw new Error(`only ${ports.length} of ${count} free ports found`);
  return ports;
}

/** `count` consecutive free ports; returns the first. @throws Error after RANGE_ATTEMPTS tries */
export async function freePortRange(count: number): Promise<number> {
  for (let attempt = 0; attempt < RANGE_ATTEMPTS; attempt++) {
    const [base] = await freePorts(1);
    if (base! + count > DRAW_BELOW) continue;
    const held: Server[] = [];
    for (let k = 0; k < count; k++) {
      const server = await listenOn(base! + k);
      if (!server) break;
      held.push(server);
    }
    await closeAll(held);
    if (held.length === count) return base!;
  }
  throw new Error(`no run of ${count} free ports found in ${RANGE_ATTEMPTS} attempts`);
}
