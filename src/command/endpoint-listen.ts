/**
 * Where a replica listens when it is given no --listen: the host and port its own entry in cluster.json names,
 * so clients find it where the description says. The host must be an address of this machine, and exactly
 * that address is bound, not every interface (0.0.0.0): a replica is reachable where the description says and
 * nowhere else unless the operator asks. Behind a published port or a proxy (the endpoint is not an address
 * of this machine), --listen says where to bind.
 */
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import { QuorumFenceError } from '../common/errors.js';

export interface ListenAddress {
  readonly host: string;
  readonly port: number;
}

/** The port an endpoint URL names, its scheme's default when it names none. */
export function endpointPort(url: URL): number {
  if (url.port !== '') return Number(url.port);
  return url.protocol === 'wss:' ? 443 : 80;
}

/** Every 127.x.y.z is this machine's (the whole 127/8 reaches the loopback interface), as is ::1. */
export function isLoopback(address: string): boolean {
  return address === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(address);
}

/**
 * Picks the address to bind for `endpoint`, given what its host resolves to and this machine's addresses:
 * the first resolved address that is local. Pure.
 * @throws QuorumFenceError INVALID_OPTION naming the endpoint when none is local
 */
export function chooseEndpointListen(
  endpoint: string,
  resolved: readonly string[],
  localAddresses: ReadonlySet<string>,
): ListenAddress {
  const url = new URL(endpoint);
  const port = endpointPort(url);
  const local = resolved.find((address) => isLoopback(address) || localAddresses.has(address));
  if (local === undefined) {
    const host = url.hostname;
    const seen = resolved.length === 0 ? 'resolves to no address' : `resolves to ${resolved.join(', ')}`;
    throw new QuorumFenceError(
      'INVALID_OPTION',
      `this replica's endpoint in the cluster description, ${endpoint}, names ${host}, which ${seen}: not an address of this machine. ` +
        `Pass --listen HOST:PORT (e.g. --listen 0.0.0.0:${port} for every interface, behind a published port or a proxy)`,
    );
  }
  return { host: local, port };
}

/** This machine's interface addresses. */
function localInterfaceAddresses(): Set<string> {
  const addresses = new Set<string>();
  for (const list of Object.values(networkInterfaces())) for (const entry of list ?? []) addresses.add(entry.address);
  return addresses;
}

/**
 * The address a replica without --listen binds: its endpoint's host (resolved) and port.
 * @throws QuorumFenceError INVALID_OPTION when the host is not an address of this machine or does not resolve
 */
export async function endpointListenAddress(endpoint: string): Promise<ListenAddress> {
  const hostname = new URL(endpoint).hostname.replace(/^\[(.*)\]$/, '$1');
  let resolved: string[];
  if (isIP(hostname) !== 0) resolved = [hostname];
  else {
    try {
      resolved = (await lookup(hostname, { all: true })).map((entry) => entry.address);
    } catch {
      resolved = [];
    }
  }
  return chooseEndpointListen(endpoint, resolved, localInterfaceAddresses());
}
