/**
 * What the run saw of the replicas' lines (docs/protocol.md, "Lines (hot handoffs)"): every acquire that arrived
 * saying it may wait (`waitMs`), in arrival order per replica and resource, and when it was answered and how. The
 * check: among those answered `granted`, none was answered before one that arrived earlier and was still waiting;
 * a line that serves in arrival order never does that, since a later arrival is decided only after everyone ahead
 * of it has been (granted, or gone with another answer). One exception, the line's rule for requests at a fixed
 * epoch (those a leader told their turn, sent to the other signers): such a request goes before every waiter that
 * will take a higher epoch, so it may overtake a `nextEpoch` waiter, or a fixed one at a higher epoch; never a
 * `nextEpoch` waiter another `nextEpoch` one. Only new grants count: the same grant again (a resend, which renews
 * the holder's own lease) overtakes nobody.
 */
import { toHex } from '../common/bytes.js';
import type { Outcome } from '../protocol/messages.js';

interface Arrival {
  readonly key: string;
  readonly arrivedAt: number;
  /** The epoch asked for, for a request at a fixed epoch; undefined for a `nextEpoch` one. */
  readonly fixedEpoch: bigint | undefined;
  answeredAt?: number;
  granted?: boolean;
}

export class LineLog {
  /** `replica \0 resource` → arrivals in order. */
  readonly #lines = new Map<string, Arrival[]>();
  readonly #byKey = new Map<string, Arrival>();
  /** `replica \0 resource \0 epoch \0 holder` of every grant seen. */
  readonly #grants = new Set<string>();

  waiting(replica: string, resource: string, key: string, fixedEpoch: bigint | undefined, at: number): void {
    const slot = `${replica}\u0000${resource}`;
    const line = this.#lines.get(slot) ?? [];
    this.#lines.set(slot, line);
    const arrival: Arrival = { key, arrivedAt: at, fixedEpoch };
    line.push(arrival);
    this.#byKey.set(`${replica}\u0000${key}`, arrival);
  }

  answered(
    replica: string,
    resource: string,
    key: string | undefined,
    outcome: Outcome,
    grant: { readonly epoch: bigint; readonly holder: Uint8Array } | undefined,
    at: number,
  ): void {
    let fresh = false;
    if (grant) {
      const signed = `${replica}\u0000${resource}\u0000${grant.epoch}\u0000${toHex(grant.holder)}`;
      fresh = !this.#grants.has(signed);
      this.#grants.add(signed);
    }
    const arrival = key === undefined ? undefined : this.#byKey.get(`${replica}\u0000${key}`);
    if (!arrival || arrival.answeredAt !== undefined) return;
    arrival.answeredAt = at;
    arrival.granted = outcome.status === 'granted' && fresh;
  }

  /** Grants that overtook an earlier arrival still waiting for its own grant. */
  violations(): string[] {
    const found: string[] = [];
    for (const [slot, line] of this.#lines) {
      const granted = line.filter((arrival) => arrival.granted);
      for (let later = 0; later < granted.length; later++) {
        const b = granted[later]!;
        const overtaken = granted.slice(0, later).find((a) => a.answeredAt! > b.answeredAt! && !mayOvertake(b, a));
        if (overtaken) {
          const [replica, resource] = slot.split('\u0000');
          found.push(
            `line of ${resource} at ${replica}: ${b.key} (arrived ${b.arrivedAt}) was granted at ${b.answeredAt} before ${overtaken.key} (arrived ${overtaken.arrivedAt}, granted ${overtaken.answeredAt})`,
          );
        }
      }
    }
    return found;
  }
}

/** A request at a fixed epoch goes before waiters that will take a higher epoch (handoff-queue.ts, placeOf). */
function mayOvertake(later: Arrival, earlier: Arrival): boolean {
  if (later.fixedEpoch === undefined) return false;
  return earlier.fixedEpoch === undefined || later.fixedEpoch < earlier.fixedEpoch;
}
