/**
 * Which connections a ceremony listener keeps while they have not said who
 * they are (transport.ts): a small pool, apart from the members' places,
 * bounded in total and per remote address. A newcomer is always let in, so
 * no one can shut members out by holding the pool: when the pool (or the
 * newcomer's address) is full, the oldest waiting connection of the address
 * holding the most goes. An honest member says who it is one round trip
 * after connecting, so to push it out an outsider must open more
 * connections than the bound in that time, and from the member's own
 * address, since an address with fewer waiting never loses one while
 * another has more. Pure: the transport applies what this decides.
 */

/** A connection that has not authenticated yet; `order` counts arrivals, so a lower one is older. */
export interface WaitingConnection {
  readonly order: number;
  readonly address: string;
}

export interface AdmissionLimits {
  /** Waiting connections in all. */
  readonly total: number;
  /** Waiting connections from one remote address. */
  readonly perAddress: number;
}

/**
 * The bounds for a ceremony of `participants`: every other participant may be dialling, and redialling after a
 * drop, from one address (all on one host, or behind one NAT): twice the participants per address; twice that in
 * all, so one address never holds more than half the pool.
 */
export function admissionLimits(participants: number): AdmissionLimits {
  return { total: 4 * participants, perAddress: 2 * participants };
}

function oldest(connections: readonly WaitingConnection[]): WaitingConnection | undefined {
  let found: WaitingConnection | undefined;
  for (const c of connections) if (!found || c.order < found.order) found = c;
  return found;
}

/**
 * The waiting connection a newcomer from `address` displaces, or undefined when there is room. Among addresses
 * holding equally many, the one with the oldest connection loses it.
 */
export function displacedBy(
  waiting: readonly WaitingConnection[],
  address: string,
  limits: AdmissionLimits,
): WaitingConnection | undefined {
  const byAddress = new Map<string, WaitingConnection[]>();
  for (const c of waiting) {
    const list = byAddress.get(c.address);
    if (list) list.push(c);
    else byAddress.set(c.address, [c]);
  }
  const mine = byAddress.get(address) ?? [];
  if (mine.length >= limits.perAddress) return oldest(mine);
  if (waiting.length < limits.total) return undefined;
  let most = 0;
  for (const list of byAddress.values()) most = Math.max(most, list.length);
  return oldest([...byAddress.values()].filter((list) => list.length === most).flat());
}
