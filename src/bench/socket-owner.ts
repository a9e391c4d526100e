/**
 * Which process dialed a TCP connection on this machine, from /proc (Linux):
 * the delay proxies see every connection come from 127.0.0.1, so a gray
 * fault that slows one etcd member's links, the peer links it dials too,
 * finds that member's sockets by their inodes. The dialing socket is the
 * entry of /proc/net/tcp (or tcp6) whose local port is the port the proxy
 * saw the connection come from and whose remote port is the proxy's; the
 * process owns it when one of /proc/<pid>/fd links to `socket:[inode]`.
 */
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';

/** One line of /proc/net/tcp or tcp6: the ports of both ends and the socket's inode. */
export interface TcpEntry {
  readonly localPort: number;
  readonly remotePort: number;
  readonly inode: number;
}

/** The entries of a /proc/net/tcp or tcp6 text (its header line and malformed lines skipped). Pure. */
export function parseProcNetTcp(text: string): TcpEntry[] {
  const entries: TcpEntry[] = [];
  for (const line of text.split('\n')) {
    // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
    const fields = line.trim().split(/\s+/);
    if (fields.length < 10 || !/^\d+:$/.test(fields[0]!)) continue;
    const port = (address: string) => Number.parseInt(address.slice(address.lastIndexOf(':') + 1), 16);
    const entry = { localPort: port(fields[1]!), remotePort: port(fields[2]!), inode: Number(fields[9]) };
    if (Number.isInteger(entry.localPort) && Number.isInteger(entry.remotePort) && Number.isInteger(entry.inode))
      entries.push(entry);
  }
  return entries;
}

/** The socket inodes a process holds open (empty when it is gone or cannot be read). */
export function socketInodesOf(pid: number): Set<number> {
  const inodes = new Set<number>();
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return inodes;
  }
  for (const fd of fds) {
    try {
      const match = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (match) inodes.add(Number(match[1]));
    } catch {
      // Closed between the listing and the read.
    }
  }
  return inodes;
}

function tcpEntries(): TcpEntry[] {
  return ['/proc/net/tcp', '/proc/net/tcp6'].flatMap((path) => {
    try {
      return parseProcNetTcp(readFileSync(path, 'utf8'));
    } catch {
      return [];
    }
  });
}

/**
 * Tells whether `pid` dialed the connection that came from `fromPort` to `toPort`. It reads /proc once, and
 * again only for a connection it has not seen (opened since), so asking for every chunk costs a map lookup.
 */
export interface DialedBy {
  dialed(fromPort: number, toPort: number): boolean;
  /** How many open connections the process has dialed to any of `toPorts` (as of the last read). */
  count(toPorts: ReadonlySet<number>): number;
}

export function dialedBy(pid: number): DialedBy {
  let owned = new Set<number>();
  let inodeOf = new Map<string, number>();
  /** Connections looked for after a fresh read and not found (closed since): not read for again. */
  const gone = new Set<string>();
  const refresh = () => {
    owned = socketInodesOf(pid);
    inodeOf = new Map(tcpEntries().map((e) => [`${e.localPort}:${e.remotePort}`, e.inode]));
  };
  refresh();
  return {
    dialed(fromPort, toPort) {
      const key = `${fromPort}:${toPort}`;
      if (!inodeOf.has(key) && !gone.has(key)) {
        refresh();
        if (!inodeOf.has(key)) gone.add(key);
      }
      const inode = inodeOf.get(key);
      return inode !== undefined && owned.has(inode);
    },
    count(toPorts) {
      let n = 0;
      for (const [key, inode] of inodeOf)
        if (owned.has(inode) && toPorts.has(Number(key.slice(key.indexOf(':') + 1)))) n++;
      return n;
    },
  };
}
