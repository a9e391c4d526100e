/**
 * What the client keeps when a replica misbehaves in a way its own bytes
 * show: a partial signature that does not verify under the replica's key
 * share, and (transferable) two partials from one replica that both verify
 * for two different holders at one (resource, epoch): an honest replica signs
 * at most one holder there (S1), so such a pair convicts its replica to anyone
 * holding the cluster description.
 *
 * Bounded: a lying replica chooses how much it lies, not how much we keep.
 */
import { BoundedMap } from '../common/bounded-map.js';
import { bytesEqual } from '../common/bytes.js';
import type { Cluster } from '../cluster/description.js';
import { grantMessage, type Grant } from '../token/grant.js';

export type EvidenceKind =
  /** Bytes that are not a G2 point (wrong length, not canonical, off curve, identity). */
  | 'undecodable_partial'
  /**
   * A curve point that does not verify under the replica's public key share for the grant, or is outside the
   * prime-order subgroup (a client checks that only once the partials fail to combine: partial-collector.ts).
   */
  | 'invalid_partial'
  /** Two partials from one replica, each valid, for different holders at the same (resource, epoch). */
  | 'equivocation';

export interface Evidence {
  readonly kind: EvidenceKind;
  /** Replica index, 1..n. */
  readonly replica: number;
  /** The grant the partial was sent for. */
  readonly grant: Grant;
  /** Exactly the bytes the replica was asked to sign (grantMessage(grant)). */
  readonly grantMessage: Uint8Array;
  /** The partial as received, 96 bytes (or whatever the replica sent). */
  readonly partial: Uint8Array;
  /** For `equivocation`: the other grant and the replica's valid partial on it. */
  readonly conflicting?: { readonly grant: Grant; readonly grantMessage: Uint8Array; readonly partial: Uint8Array };
  /** Wall-clock time of the observation, for humans reading a report; never used to decide anything. */
  readonly observedAt: string;
}

export interface EvidenceLogOptions {
  /** Evidence items kept, oldest dropped first. */
  maxEvidence: number;
  /** Valid partials remembered per (replica, resource, epoch). */
  partialMemorySize: number;
}

interface Remembered {
  readonly grant: Grant;
  readonly partial: Uint8Array;
}

type Listener = (evidence: Evidence) => void;

/**
 * A bounded log of evidence plus a bounded memory of the partials each
 * replica gave, so that a second, conflicting partial is noticed. One log
 * can be shared by several clients (with different identities) to catch a
 * replica that signs two of them at one epoch.
 */
export class EvidenceLog {
  readonly #options: EvidenceLogOptions;
  readonly #items: Evidence[] = [];
  // Map iteration order is insertion order; re-inserting on use makes it an LRU.
  readonly #memory: BoundedMap<string, Remembered>;
  readonly #listeners = new Set<Listener>();

  constructor(options: Partial<EvidenceLogOptions> = {}) {
    this.#options = { maxEvidence: options.maxEvidence ?? 64, partialMemorySize: options.partialMemorySize ?? 4096 };
    this.#memory = new BoundedMap(this.#options.partialMemorySize);
  }

  /** The evidence kept, oldest first. */
  list(): readonly Evidence[] {
    return [...this.#items];
  }

  /** Calls `listener` for every new item; returns a function that unsubscribes. */
  subscribe(listener: Listener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  record(item: Omit<Evidence, 'observedAt'>): Evidence {
    const evidence: Evidence = { ...item, observedAt: new Date().toISOString() };
    this.#items.push(evidence);
    if (this.#items.length > this.#options.maxEvidence) this.#items.shift();
    for (const listener of this.#listeners) {
      try {
        listener(evidence);
      } catch {
        // A failing observer must not stop the acquire that found the evidence.
      }
    }
    return evidence;
  }

  /** Remembers a partial believed valid (part of a verified combination, or verified alone). */
  remember(replica: number, grant: Grant, partial: Uint8Array): void {
    const key = memoryKey(replica, grant);
    this.#memory.set(key, { grant, partial });
  }

  /** The partial remembered from `replica` for the grant's (resource, epoch), whichever holder it was for. */
  recall(replica: number, grant: Grant): Remembered | undefined {
    return this.#memory.get(memoryKey(replica, grant));
  }
}

function memoryKey(replica: number, grant: Grant): string {
  return `${replica}\u0000${grant.epoch}\u0000${grant.resource}`;
}

/**
 * Checks a piece of equivocation evidence independently: same cluster, same
 * (resource, epoch), different holders, and both partials verify under the
 * replica's public key share. Needs only the public cluster description.
 */
export function verifyEquivocation(evidence: Evidence, cluster: Cluster): boolean {
  const other = evidence.conflicting;
  if (evidence.kind !== 'equivocation' || !other) return false;
  const share = cluster.replicas[evidence.replica - 1]?.publicKeyShare;
  if (!share) return false;
  const a = evidence.grant;
  const b = other.grant;
  if (!bytesEqual(a.clusterId, cluster.id) || !bytesEqual(b.clusterId, cluster.id)) return false;
  if (a.resource !== b.resource || a.epoch !== b.epoch || bytesEqual(a.holder, b.holder)) return false;
  try {
    const backend = cluster.backend;
    return (
      backend.verify(share, grantMessage(a), backend.decodeSignature(evidence.partial)) &&
      backend.verify(share, grantMessage(b), backend.decodeSignature(other.partial))
    );
  } catch {
    return false;
  }
}

/** How a replica misbehaved during a call, as reported in results (not transferable: see Evidence for that). */
export type FaultKind =
  /** A frame that fails decoding or validation, or a message out of order. */
  | 'protocol'
  /** A challenge naming another cluster or replica index. */
  | 'bad_challenge'
  /** A reply whose outcome does not fit the request (wrong status, fields, ranges). */
  | 'invalid_reply'
  /** A partial signature that is not a valid point. */
  | 'undecodable_partial'
  /** A partial signature that does not verify under the replica's key share. */
  | 'invalid_partial';

export interface ReplicaFault {
  /** Replica index, 1..n. */
  readonly replica: number;
  readonly kind: FaultKind;
  readonly message: string;
}
