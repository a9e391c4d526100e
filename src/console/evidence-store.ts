/**
 * The evidence the console keeps: the newest items for the page, and, apart from them, the first item that
 * convicts each replica, so a conviction and its download stay however much evidence arrives after it
 * (bounded by the number of replicas, not by recency).
 */
import { verifyEquivocation, type Evidence } from '../client/evidence.js';
import { toHex } from '../common/bytes.js';
import type { Cluster } from '../cluster/description.js';
import type { FaultKind } from './view.js';

/** Evidence items listed on the page, newest kept. */
const MAX_LISTED_EVIDENCE = 64;

interface Kept {
  readonly id: number;
  readonly item: Evidence;
  /** Equivocation that verifies against the cluster: anyone can check it, so it is offered for download. */
  readonly verified: boolean;
}

export interface EvidenceRow {
  readonly id: number;
  readonly kind: string;
  readonly replica: number;
  readonly resource: string;
  readonly epoch: string;
  readonly observedAt: string;
  readonly downloadable: boolean;
}

/** What a piece of evidence proves against its replica, or undefined when it proves nothing. */
export interface EvidenceConviction {
  readonly replica: number;
  readonly kind: FaultKind;
  readonly reason: string;
  readonly at: string;
}

export class EvidenceStore {
  readonly #cluster: Cluster;
  readonly #listed: Kept[] = [];
  /** Replica → the first item that convicts it. */
  readonly #convicting = new Map<number, Kept>();
  #nextId = 1;

  constructor(cluster: Cluster) {
    this.#cluster = cluster;
  }

  /**
   * Keeps an item; returns what it proves. An equivocation proves a fault when both signatures verify; an
   * invalid or undecodable partial is the console's own client's observation (it never asks for signatures, so
   * in practice there are none), which convinces the console though not a third party.
   */
  note(item: Evidence): { id: number; conviction: EvidenceConviction | undefined } {
    const verified = item.kind === 'equivocation' && verifyEquivocation(item, this.#cluster);
    const kept = { id: this.#nextId++, item, verified };
    this.#listed.push(kept);
    if (this.#listed.length > MAX_LISTED_EVIDENCE) this.#listed.shift();
    const conviction: EvidenceConviction | undefined = verified
      ? {
          replica: item.replica,
          kind: 'equivocation',
          reason: 'convicted: verified equivocation evidence (two holders signed at one resource and epoch)',
          at: item.observedAt,
        }
      : item.kind !== 'equivocation'
        ? {
            replica: item.replica,
            kind: 'invalid_partial',
            reason: 'sent the console a partial signature that does not verify under its key share',
            at: item.observedAt,
          }
        : undefined;
    if (conviction && !this.#convicting.has(item.replica)) this.#convicting.set(item.replica, kept);
    return { id: kept.id, conviction };
  }

  /** The id of a verified item with the same replica, (resource, epoch) and pair of holders, if one is kept. */
  findSame(evidence: Evidence): number | undefined {
    return this.#all().find((e) => e.verified && sameEquivocation(e.item, evidence))?.id;
  }

  /** The verified equivocation with `id`, listed or convicting. */
  downloadable(id: number): Evidence | undefined {
    const kept = this.#all().find((e) => e.id === id);
    return kept?.verified ? kept.item : undefined;
  }

  /** The convicting items no longer among the newest, then the newest; oldest first. */
  rows(): EvidenceRow[] {
    return this.#all().map((e) => ({
      id: e.id,
      kind: e.item.kind,
      replica: e.item.replica,
      resource: e.item.grant.resource,
      epoch: e.item.grant.epoch.toString(),
      observedAt: e.item.observedAt,
      downloadable: e.verified,
    }));
  }

  #all(): Kept[] {
    const listedIds = new Set(this.#listed.map((e) => e.id));
    const older = [...this.#convicting.values()].filter((e) => !listedIds.has(e.id));
    return [...older, ...this.#listed].sort((a, b) => a.id - b.id);
  }
}

/** One replica, one (resource, epoch), the same two holders in either order. */
function sameEquivocation(a: Evidence, b: Evidence): boolean {
  const holders = (e: Evidence) =>
    [toHex(e.grant.holder), toHex(e.conflicting?.grant.holder ?? new Uint8Array())].sort().join();
  return (
    a.replica === b.replica &&
    a.grant.resource === b.grant.resource &&
    a.grant.epoch === b.grant.epoch &&
    holders(a) === holders(b)
  );
}
