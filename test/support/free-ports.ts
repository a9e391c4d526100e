/**
 * Ports the OS says are free right now, on loopback: single ones, and a run of consecutive ones (for a
 * command line that counts up from a base port, as `keygen --base-port` does).
 */
import { createServer, type Server } from 'node:net';

/** Attempts at a consecutive run before giving up: a busy box rarely needs more than a few. */
const RANGE_ATTEMPTS = 50;

function listenOn(port: number): Promise<Server | undefined> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(undefined));
    server.listen(port, '127.0.0.1', () => resolve(server));
  });
}

const closeAll = (servers: readonly Server[]) => Promise.all(servers.map((s) => new Promise((r) => s.close(r))));

/** `count` ports the OS picked, each free when this returns. */
export async function freePorts(count: number): Promise<number[]> {
  const servers = (await Promise.all(Array.from({ length: count }, () => listenOn(0)))) as Server[];
  const ports = servers.map((s) => (s.address() as { port: number }).port);
  await closeAll(servers);
  return ports;
}

/** `count` consecutive free ports; returns the first. @throws Error after RANGE_ATTEMPTS tries */
export async function freePortRange(count: number): Promise<number> {
  for (let attempt = 0; attempt < RANGE_ATTEMPTS; attempt++) {
    const [base] = await freePorts(1);
    if (base! + count > 65_536) continue;
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
