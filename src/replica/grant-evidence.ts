/**
 * Catch-up evidence (docs/protocol.md, "Epoch steps"): an acquire (or a renew that joins a lease) may carry other replicas' partial signatures on
 * grants of its resource to the same holder, at epochs at least the one it asks for. This module turns that
 * evidence into the verified `EpochSupport` the pure policy counts. It checks each partial under its replica's
 * public key share (a pairing each, batched with the process's other evidence checks), remembers the ones that
 * verified (a bounded cache: a catch-up in steps reuses the same evidence), and refuses to spend more pairings on a
 * connection than its budget allows. Evidence that does not verify, repeats a replica, names this replica or sits
 * below the requested epoch is left out: it can only leave the request with less support, never more.
 */
import { BoundedMap } from '../common/bounded-map.js';
import { concatBytes, toHex, u16be } from '../common/bytes.js';
import type { BlsBackend, PublicKey, Signature } from '../crypto/backend.js';
import { VerifyBatcher } from '../crypto/verify-batch.js';
import type { GrantEvidence } from '../protocol/messages.js';
import { grantDigest, grantMessage } from '../token/grant.js';
import type { EpochSupport } from './policy.js';

/** What the checker needs of the cluster description. */
export interface EvidenceCluster {
  readonly id: Uint8Array;
  readonly backend: BlsBackend;
  readonly replicas: readonly { readonly index: number; readonly publicKeyShare: PublicKey }[];
}

/** Spends one pairing check of a connection's allowance; false when it has none left. */
export type EvidenceBudget = () => boolean;

/** Verified evidence remembered: enough for a few thousand catch-ups in flight, a few hundred KiB. */
const VERIFIED_CACHE_ENTRIES = 4_096;

export class EvidenceChecker {
  readonly #cluster: EvidenceCluster;
  readonly #self: number;
  readonly #batcher: VerifyBatcher;
  readonly #verified = new BoundedMap<string, true>(VERIFIED_CACHE_ENTRIES);

  /**
   * @param self this replica's index: its own partials are no evidence of anyone else's record.
   * @param batcher where its pairing checks are batched (default: its own, deferred after the I/O waiting).
   */
  constructor(cluster: EvidenceCluster, self: number, batcher = new VerifyBatcher(cluster.backend)) {
    this.#cluster = cluster;
    this.#self = self;
    this.#batcher = batcher;
  }

  /**
   * The distinct other replicas whose evidence verifies for `request` from `holder`. Never throws for anything a
   * peer sent; each partial not already verified costs one call to `budget`, and is skipped when that says no.
   */
  async support(
    request: { readonly resource: string; readonly epoch: bigint; readonly evidence?: readonly GrantEvidence[] },
    holder: Uint8Array,
    budget: EvidenceBudget,
  ): Promise<EpochSupport[]> {
    const seen = new Set<number>();
    const checks: Promise<EpochSupport | undefined>[] = [];
    for (const entry of request.evidence ?? []) {
      const share = this.#cluster.replicas[entry.replica - 1]?.publicKeyShare;
      if (!share || entry.replica === this.#self || entry.epoch < request.epoch || seen.has(entry.replica)) continue;
      seen.add(entry.replica);
      const grant = { clusterId: this.#cluster.id, resource: request.resource, epoch: entry.epoch, holder };
      const key = toHex(concatBytes(u16be(entry.replica), grantDigest(grant), entry.partial));
      const supported = { replica: entry.replica, epoch: entry.epoch };
      if (this.#verified.has(key)) {
        checks.push(Promise.resolve(supported));
        continue;
      }
      if (!budget()) continue;
      const signature = this.#decode(entry.partial);
      if (!signature) continue;
      checks.push(
        this.#batcher.verify(share, grantMessage(grant), signature).then((valid) => {
          if (!valid) return undefined;
          this.#verified.set(key, true);
          return supported;
        }),
      );
    }
    return (await Promise.all(checks)).filter((entry): entry is EpochSupport => entry !== undefined);
  }

  #decode(partial: Uint8Array): Signature | undefined {
    try {
      return this.#cluster.backend.decodeSignature(partial, 'evidence partial');
    } catch {
      return undefined; // Not a point a replica could have signed: no support, nothing else.
    }
  }
}
