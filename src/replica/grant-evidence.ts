/**
 * Catch-up evidence (docs/protocol.md, "Epoch steps"): an acquire (or a renew that joins a lease) may carry other replicas' partial signatures on
 * grants of its resource to the same holder, at epochs at least the one it asks for. This module turns that
 * evidence into the verified `EpochSupport` the pure policy counts. It checks each partial under its replica's
 * public key share (a pairing each, batched with the process's other evidence checks), remembers the ones that
 * verified (a bounded cache: a catch-up in steps reuses the same evidence), and spends pairings cheapest first and
 * only within budget: none when even all of the evidence, verified, would not change the decision; then only as
 * many as the decision still needs; each paid for by the asking identity's allowance, the process's, and its
 * connection's (EvidenceAllowance), and none while a second's worth is already waiting to be checked, or while the
 * identity has MAX_PENDING_PER_IDENTITY waiting (so another identity's check waits behind at most that many). Evidence
 * that does not verify, repeats a replica, names this replica or sits below the requested epoch is left out: it
 * can only leave the request with less support, never more.
 */
import { BoundedMap } from '../common/bounded-map.js';
import { concatBytes, toHex, u16be } from '../common/bytes.js';
import { takeFromAll, TokenBucket } from '../common/token-bucket.js';
import type { BlsBackend, PublicKey, Signature } from '../crypto/backend.js';
import { VerifyBatcher } from '../crypto/verify-batch.js';
import type { GrantEvidence } from '../protocol/messages.js';
import { grantDigest, grantMessage } from '../token/grant.js';
import type { EpochSupport } from './policy.js';

/** What evidence travels with: an acquire, or a renew that may join a lease (docs/protocol.md). */
export interface EvidenceRequest {
  readonly resource: string;
  readonly epoch: bigint;
  readonly evidence?: readonly GrantEvidence[];
}

/** What the checker needs of the cluster description. */
export interface EvidenceCluster {
  readonly id: Uint8Array;
  readonly backend: BlsBackend;
  readonly replicas: readonly { readonly index: number; readonly publicKeyShare: PublicKey }[];
}

/** Spends one pairing check of the asker's allowance; false when it has none left. */
export type EvidenceBudget = () => boolean;

/** Whether verified support is enough for the request's decision (the policy's epoch-step rule, given the record). */
export type EnoughSupport = (support: readonly EpochSupport[]) => boolean;

/** Verified evidence remembered: enough for a few thousand catch-ups in flight, a few hundred KiB. */
const VERIFIED_CACHE_ENTRIES = 4_096;
/** Identities whose evidence allowance is remembered (the longest unused forgotten first): a few MiB at most. */
const IDENTITIES_REMEMBERED = 10_000;
/**
 * Checks one identity may have waiting at once: f+1 for the largest cluster (11) with room to spare. So a flood
 * from one identity holds at most this many places in the queue, and another identity's catch-up waits behind
 * at most these, whatever the machine's speed.
 */
export const MAX_PENDING_PER_IDENTITY = 16;

export interface EvidenceAllowanceLimits {
  /** Pairing checks per second (and in one burst) for one holder key, over all its connections. */
  readonly perIdentity: number;
  /** Pairing checks per second (and in one burst) for the whole process, over every identity. */
  readonly total: number;
}

/**
 * Who pays for evidence pairings. Each identity (holder key) has its own allowance, shared by all its connections,
 * so opening more connections buys no more checks; all identities together draw on the process's, so no number of
 * identities can make the replica verify more than `total` a second. A check is paid only when every allowance it
 * draws on has a token (takeFromAll), so a refused check costs none of them.
 */
export class EvidenceAllowance {
  readonly #limits: EvidenceAllowanceLimits;
  readonly #now: () => number;
  readonly #total: TokenBucket;
  readonly #byIdentity = new BoundedMap<string, TokenBucket>(IDENTITIES_REMEMBERED);

  constructor(limits: EvidenceAllowanceLimits, now: () => number) {
    this.#limits = limits;
    this.#now = now;
    this.#total = new TokenBucket(limits.total, limits.total, now());
  }

  /** The budget of a request from `holder`, drawing also on `connection`'s own allowance when given. */
  budgetFor(holder: Uint8Array, connection?: TokenBucket): EvidenceBudget {
    const key = toHex(holder);
    return () => {
      const now = this.#now();
      let identity = this.#byIdentity.get(key);
      identity ??= new TokenBucket(this.#limits.perIdentity, this.#limits.perIdentity, now);
      this.#byIdentity.set(key, identity); // the newest: an identity in use is the last forgotten
      return takeFromAll(connection ? [identity, this.#total, connection] : [identity, this.#total], now);
    };
  }
}

/** A piece of evidence worth checking: another replica's, at or above the requested epoch, not yet seen here. */
interface Candidate {
  readonly supported: EpochSupport;
  readonly share: PublicKey;
  readonly grant: { clusterId: Uint8Array; resource: string; epoch: bigint; holder: Uint8Array };
  readonly key: string;
  readonly partial: Uint8Array;
}

export class EvidenceChecker {
  readonly #cluster: EvidenceCluster;
  readonly #self: number;
  readonly #batcher: VerifyBatcher;
  readonly #verified = new BoundedMap<string, true>(VERIFIED_CACHE_ENTRIES);
  readonly #maxPending: number;
  /** Pairing checks asked of the batcher and not answered yet, in all and per identity (hex holder key). */
  #pending = 0;
  readonly #pendingBy = new Map<string, number>();

  /**
   * @param self this replica's index: its own partials are no evidence of anyone else's record.
   * @param batcher where its pairing checks are batched (default: its own, deferred after the I/O waiting).
   * @param options.maxPending checks waiting at most (default: no bound): past it, evidence counts for nothing
   *   until the queue drains, so a machine slower than the budget assumes never builds a backlog that outlives
   *   a flood. One identity may have MAX_PENDING_PER_IDENTITY waiting, whatever this says.
   */
  constructor(
    cluster: EvidenceCluster,
    self: number,
    batcher = new VerifyBatcher(cluster.backend),
    options: { readonly maxPending?: number } = {},
  ) {
    this.#cluster = cluster;
    this.#self = self;
    this.#batcher = batcher;
    this.#maxPending = options.maxPending ?? Infinity;
  }

  /** Pairing checks waiting to be answered now (for tests and metrics). */
  get pending(): number {
    return this.#pending;
  }

  /**
   * The distinct other replicas whose evidence verifies for `request` from `holder`. Never throws for anything a
   * peer sent; each partial not already verified costs one call to `budget`, and is skipped when that says no.
   * With `enough` (the policy's rule for this request), the cheapest checks come first: none at all when every
   * piece of evidence, verified, would still not be enough; otherwise only as many as are still needed, in rounds,
   * each after the one before left the decision short. Without it, every piece is checked.
   */
  async support(
    request: EvidenceRequest,
    holder: Uint8Array,
    budget: EvidenceBudget,
    enough?: EnoughSupport,
  ): Promise<EpochSupport[]> {
    const { supported, unchecked } = this.#candidates(request, holder);
    if (enough && !enough([...supported, ...unchecked.map((c) => c.supported)])) return supported;
    const identity = toHex(holder);
    let allowed = true;
    while (unchecked.length > 0 && allowed && !enough?.(supported)) {
      const round = unchecked.splice(0, enough ? fewestEnough(supported, unchecked, enough) : unchecked.length);
      const checks: Promise<EpochSupport | undefined>[] = [];
      for (const candidate of round) {
        // Cheapest refusals first: a full queue or an empty allowance costs nothing, a bad point only its decoding.
        allowed = this.#mayQueue(identity) && budget();
        if (!allowed) break;
        const signature = this.#decode(candidate.partial);
        if (signature) checks.push(this.#check(identity, candidate, signature));
      }
      for (const verified of await Promise.all(checks)) if (verified) supported.push(verified);
    }
    return supported;
  }

  /**
   * The evidence worth anything for `request` from `holder`: already verified (`supported`), or still to be checked
   * (`unchecked`, in the request's order). One entry per other replica, at or above the requested epoch.
   */
  #candidates(request: EvidenceRequest, holder: Uint8Array): { supported: EpochSupport[]; unchecked: Candidate[] } {
    const supported: EpochSupport[] = [];
    const unchecked: Candidate[] = [];
    const seen = new Set<number>();
    for (const entry of request.evidence ?? []) {
      const share = this.#cluster.replicas[entry.replica - 1]?.publicKeyShare;
      if (!share || entry.replica === this.#self || entry.epoch < request.epoch || seen.has(entry.replica)) continue;
      seen.add(entry.replica);
      const grant = { clusterId: this.#cluster.id, resource: request.resource, epoch: entry.epoch, holder };
      const key = toHex(concatBytes(u16be(entry.replica), grantDigest(grant), entry.partial));
      const claimed = { replica: entry.replica, epoch: entry.epoch };
      if (this.#verified.has(key)) supported.push(claimed);
      else unchecked.push({ supported: claimed, share, grant, key, partial: entry.partial });
    }
    return { supported, unchecked };
  }

  /** Whether the queue has room for one more check of `identity`: in all, and for it. */
  #mayQueue(identity: string): boolean {
    return this.#pending < this.#maxPending && (this.#pendingBy.get(identity) ?? 0) < MAX_PENDING_PER_IDENTITY;
  }

  async #check(identity: string, candidate: Candidate, signature: Signature): Promise<EpochSupport | undefined> {
    this.#pending++;
    this.#pendingBy.set(identity, (this.#pendingBy.get(identity) ?? 0) + 1);
    try {
      const valid = await this.#batcher.verify(candidate.share, grantMessage(candidate.grant), signature);
      if (!valid) return undefined;
      this.#verified.set(candidate.key, true);
      return candidate.supported;
    } finally {
      this.#pending--;
      const left = this.#pendingBy.get(identity)! - 1;
      if (left > 0) this.#pendingBy.set(identity, left);
      else this.#pendingBy.delete(identity);
    }
  }

  #decode(partial: Uint8Array): Signature | undefined {
    try {
      return this.#cluster.backend.decodeSignature(partial, 'evidence partial');
    } catch {
      return undefined; // Not a point a replica could have signed: no support, nothing else.
    }
  }
}

/** How many of `unchecked` (from the front) would, all verified, make `supported` enough; all of them at most. */
function fewestEnough(
  supported: readonly EpochSupport[],
  unchecked: readonly Candidate[],
  enough: EnoughSupport,
): number {
  for (let take = 1; take < unchecked.length; take++)
    if (enough([...supported, ...unchecked.slice(0, take).map((c) => c.supported)])) return take;
  return unchecked.length;
}
