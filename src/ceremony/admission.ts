/**
 * Which connections a ceremony listener keeps while they have not said who they are (transport.ts). Two pools,
 * apart from the members' places:
 *
 * - **Reserved**, per address prefix of an expected participant (the prefixes its ceremony endpoint's host
 *   resolves to): two waiting places for each other participant expected there. A connection from such a prefix
 *   waits only here, and only a newcomer from the same prefix ever displaces it (the oldest of that prefix, once
 *   its places are taken). So no number of idle connections from other addresses can push out a member whose
 *   hello is in flight, nor keep members from reaching each other.
 * - **General**, for every other prefix: bounded in all and per prefix, the newcomer always let in
 *   (src/common/address-admission.ts: the oldest of its own prefix at its bound, else of the prefix holding the
 *   most). A member that dials from an address its endpoint does not resolve to (behind a NAT, say) waits here,
 *   where to push it out an outsider must open more connections than the bound within its round trip, from
 *   prefixes that each hold at least as many.
 *
 * A prefix is one IPv4 address or an IPv6 /64 (addressPrefix). Pure: the transport applies what this decides.
 */
import { displacedBy, type AdmissionLimits, type WaitingConnection } from '../common/address-admission.js';

export { addressPrefix } from '../common/address-admission.js';

/** A connection that has not authenticated yet, and the pool it waits in. */
export interface CeremonyWaiting extends WaitingConnection {
  readonly reserved: boolean;
}

export interface CeremonyAdmissionLimits extends AdmissionLimits {
  /** Reserved waiting places per address prefix of the expected participants. */
  readonly reserved: ReadonlyMap<string, number>;
}

/**
 * The bounds for a ceremony of `participants`. General pool: every other participant may be dialling, and
 * redialling after a drop, from one address (all on one host, or behind one NAT): twice the participants per
 * prefix, twice that in all, so one prefix never holds more than half of it. Reserved: two places (a dial and a
 * redial) per other participant at each prefix its endpoint resolves to (`expected`: prefix → participants).
 */
export function admissionLimits(
  participants: number,
  expected: ReadonlyMap<string, number> = new Map(),
): CeremonyAdmissionLimits {
  const reserved = new Map([...expected].map(([prefix, count]) => [prefix, 2 * count]));
  return { total: 4 * participants, perPrefix: 2 * participants, reserved };
}

/**
 * Where a newcomer from `prefix` waits (reserved or general) and which waiting connection it displaces (undefined:
 * there is room).
 */
export function admit<C extends CeremonyWaiting>(
  waiting: readonly C[],
  prefix: string,
  limits: CeremonyAdmissionLimits,
): { readonly reserved: boolean; readonly displaced: C | undefined } {
  const places = limits.reserved.get(prefix);
  if (places !== undefined) {
    const mine = waiting.filter((c) => c.reserved && c.prefix === prefix);
    return { reserved: true, displaced: displacedBy(mine, prefix, { perPrefix: places, total: Infinity }) };
  }
  const general = waiting.filter((c) => !c.reserved);
  return { reserved: false, displaced: displacedBy(general, prefix, limits) };
}
