/**
 * Which connection that has not authenticated yet makes room for a newcomer: the rule a replica's listener
 * (src/replica/connections.ts) and a key ceremony's listener (src/ceremony/admission.ts) share. Such connections
 * are bounded per address prefix and in all, and a newcomer is always let in while there is anyone to make room:
 * at its prefix's bound the oldest of its own prefix goes, and with the pool full the oldest of the prefix holding
 * the most. So whoever holds the pool cannot shut out a host that holds less of it: to push out a connection whose
 * hello is in flight, an outsider must open more connections than the bound in that round trip, and from a prefix
 * that already holds at least as many. Pure: the listeners apply what this decides.
 *
 * A prefix is what one host can cheaply hold many of: one IPv4 address (an IPv4-mapped IPv6 address counts as
 * its IPv4 address), or an IPv6 /64, the block a single host or home network is routed.
 */
import { isIPv4, isIPv6 } from 'node:net';

/** A connection that has not authenticated yet; `order` counts arrivals, so a lower one is older. */
export interface WaitingConnection {
  readonly order: number;
  /** Its remote address's prefix (addressPrefix). */
  readonly prefix: string;
}

export interface AdmissionLimits {
  /** Waiting connections in all. */
  readonly total: number;
  /** Waiting connections from one address prefix. */
  readonly perPrefix: number;
}

/** The eight 16-bit groups of an IPv6 address (with `::` expanded and a dotted IPv4 tail converted), or undefined. */
function ipv6Groups(address: string): number[] | undefined {
  let text = address.replace(/%.*$/, '').toLowerCase(); // a zone index (fe80::1%eth0) names no other host
  if (!isIPv6(text)) return undefined;
  const tail = /:(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (tail) {
    const [a, b, c, d] = tail[1]!.split('.').map(Number) as [number, number, number, number];
    text = `${text.slice(0, tail.index)}:${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, rest] = text.split('::') as [string, string | undefined];
  const left = head === '' ? [] : head.split(':');
  const right = rest === undefined || rest === '' ? [] : rest.split(':');
  const zeros = rest === undefined ? 0 : 8 - left.length - right.length;
  return [...left, ...Array<string>(zeros).fill('0'), ...right].map((group) => parseInt(group, 16));
}

/**
 * The prefix a remote address is bounded by: the IPv4 address itself ("ipv4:a.b.c.d"), or the first 64 bits of
 * an IPv6 address ("ipv6:xxxx:xxxx:xxxx:xxxx::/64"). Anything else (a Unix socket, an unknown address) is its own
 * prefix, as given.
 */
export function addressPrefix(address: string): string {
  if (isIPv4(address)) return `ipv4:${address}`;
  const groups = ipv6Groups(address);
  if (!groups) return `other:${address}`;
  // ::ffff:a.b.c.d is an IPv4 peer on a dual-stack socket: the same host as a.b.c.d.
  if (groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff) {
    const v4 = [groups[6]! >> 8, groups[6]! & 0xff, groups[7]! >> 8, groups[7]! & 0xff].join('.');
    return `ipv4:${v4}`;
  }
  return `ipv6:${groups
    .slice(0, 4)
    .map((g) => g.toString(16))
    .join(':')}::/64`;
}

function oldest<C extends WaitingConnection>(connections: readonly C[]): C | undefined {
  let found: C | undefined;
  for (const c of connections) if (!found || c.order < found.order) found = c;
  return found;
}

/**
 * The waiting connection a newcomer from `prefix` displaces, or undefined when there is room. Among prefixes
 * holding equally many, the one with the oldest connection loses it. A `limits.total` at or below the number
 * waiting counts as full: a listener with no free slot at all asks who makes room this way (and, when nobody is
 * waiting, gets undefined with no room: it must tell the two apart itself).
 */
export function displacedBy<C extends WaitingConnection>(
  waiting: readonly C[],
  prefix: string,
  limits: AdmissionLimits,
): C | undefined {
  const byPrefix = new Map<string, C[]>();
  for (const c of waiting) {
    const list = byPrefix.get(c.prefix);
    if (list) list.push(c);
    else byPrefix.set(c.prefix, [c]);
  }
  const mine = byPrefix.get(prefix) ?? [];
  if (mine.length >= limits.perPrefix) return oldest(mine);
  if (waiting.length < limits.total) return undefined;
  let most = 0;
  for (const list of byPrefix.values()) most = Math.max(most, list.length);
  return oldest([...byPrefix.values()].filter((list) => list.length === most).flat());
}
