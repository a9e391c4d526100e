/**
 * Turning replicas' partial signatures on one grant into a group signature,
 * without trusting any one of them. Cheapest first: decode each partial as it
 * arrives with every point check but the subgroup one (no pairing); at t
 * partials combine them (point additions), check the result for the subgroup
 * and verify it once against the group key (one pairing). One subgroup check
 * per grant instead of t: a partial outside the subgroup makes the combined
 * point fail its check or its pairing like any other bad partial. Only when
 * that fails, check and verify the partials one by one against each replica's
 * key share, drop and report the bad ones, and wait for others.
 * Pure apart from the evidence log it writes to: no sockets, no timers.
 */
import { isQuorumFenceError, QuorumFenceError } from '../common/errors.js';
import { bytesEqual } from '../common/bytes.js';
import type { BlsBackend, Signature, SignaturePoint } from '../crypto/backend.js';
import { combinePartialPoints } from '../crypto/threshold.js';
import { verifyBatcherFor } from '../crypto/verify-batch.js';
import type { Cluster } from '../cluster/description.js';
import type { GrantEvidence } from '../protocol/messages.js';
import { grantMessage, type Grant } from '../token/grant.js';
import type { EvidenceLog } from './evidence.js';

interface Held {
  readonly replica: number;
  readonly bytes: Uint8Array;
  /** Not checked for the subgroup until it is verified alone. */
  readonly point: SignaturePoint;
  /** True once checked and verified alone against the replica's key share. */
  verified: boolean;
}

export type AddOutcome =
  | { readonly ok: true }
  /**
   * undecodable, invalid: the replica sent bytes that are not a usable partial; it is faulty for this grant.
   * other_generation: a partial of another share generation than the client's cluster description (a replica
   * not yet, or no longer, on this membership): never combined, and no fault (docs/resharing.md).
   */
  | {
      readonly ok: false;
      readonly reason: 'undecodable' | 'invalid' | 'duplicate' | 'other_generation';
      readonly message: string;
    };

export type CombineOutcome =
  | {
      readonly ok: true;
      readonly signature: Signature;
      readonly signers: readonly number[];
      /** The partials combined, in `signers` order: evidence a joining replica may ask for (docs/protocol.md). */
      readonly partials: readonly GrantEvidence[];
    }
  /** Not enough valid partials (yet); `bad` names replicas whose partials just failed verification. */
  | { readonly ok: false; readonly bad: readonly number[] };

export class PartialCollector {
  readonly #cluster: Cluster;
  readonly #backend: BlsBackend;
  readonly #grant: Grant;
  readonly #message: Uint8Array;
  readonly #evidence: EvidenceLog;
  readonly #held: Held[] = [];
  readonly #rejected = new Set<number>();

  /**
   * @param message grantMessage(grant), passed in because the caller already computed it.
   */
  constructor(cluster: Cluster, backend: BlsBackend, grant: Grant, message: Uint8Array, evidence: EvidenceLog) {
    this.#cluster = cluster;
    this.#backend = backend;
    this.#grant = grant;
    this.#message = message;
    this.#evidence = evidence;
  }

  /** Partials held that are not known to be bad. */
  get count(): number {
    return this.#held.length;
  }

  /** Replicas whose partials are held. */
  get signers(): number[] {
    return this.#held.map((h) => h.replica);
  }

  /**
   * Takes a partial from `replica` (1..n), signed with share generation `generation` (0 when the replica
   * named none). Only partials of the cluster's own generation (its membershipVersion) are held: shares of
   * two generations are shares of different polynomials, and combining them would make no valid signature.
   * Decodes it with every point check; a replica that already gave a partial for this grant gets no second say.
   */
  add(replica: number, bytes: Uint8Array, generation = 0): AddOutcome {
    if (this.#rejected.has(replica) || this.#held.some((h) => h.replica === replica)) {
      return { ok: false, reason: 'duplicate', message: `replica ${replica} already answered this grant` };
    }
    if (generation !== this.#cluster.membershipVersion) {
      this.#rejected.add(replica);
      return {
        ok: false,
        reason: 'other_generation',
        message: `replica ${replica} signs with share generation ${generation}, this cluster description is ${this.#cluster.membershipVersion}`,
      };
    }
    let point: SignaturePoint;
    try {
      point = this.#backend.decodeSignaturePoint(bytes, `partial from replica ${replica}`);
    } catch (error) {
      if (!(error instanceof QuorumFenceError)) throw error;
      this.#rejected.add(replica);
      this.#evidence.record({
        kind: 'undecodable_partial',
        replica,
        grant: this.#grant,
        grantMessage: this.#message,
        partial: bytes.slice(),
      });
      return { ok: false, reason: 'undecodable', message: `${error.message} (${error.code})` };
    }
    const held: Held = { replica, bytes: point.bytes, point, verified: false };
    const remembered = this.#evidence.recall(replica, this.#grant);
    if (remembered && !bytesEqual(remembered.partial, held.bytes)) {
      // The same replica gave different bytes for this (resource, epoch) before. For the same holder one of
      // them is invalid (BLS signatures are unique); for another holder both may be valid: equivocation.
      if (!this.#verifyAlone(held)) {
        return {
          ok: false,
          reason: 'invalid',
          message: `partial from replica ${replica} does not verify under its key share`,
        };
      }
      if (!bytesEqual(remembered.grant.holder, this.#grant.holder)) this.#checkEquivocation(held, remembered);
    }
    this.#held.push(held);
    return { ok: true };
  }

  /**
   * With at least t partials held, tries to produce the group signature.
   * @throws QuorumFenceError INTERNAL if t individually valid partials do not combine (a backend bug).
   */
  async tryCombine(): Promise<CombineOutcome> {
    const t = this.#cluster.t;
    if (this.#held.length < t) return { ok: false, bad: [] };
    // Prefer partials already verified alone: after one failure, the known-good ones go first.
    const candidates = [...this.#held].sort((a, b) => Number(b.verified) - Number(a.verified)).slice(0, t);
    const combined = await this.#combineAndVerify(candidates);
    if (combined) return this.#succeed(candidates, combined);

    const bad: number[] = [];
    for (const held of candidates) {
      if (held.verified) continue;
      if (!this.#verifyAlone(held)) bad.push(held.replica);
    }
    if (bad.length === 0)
      throw new QuorumFenceError('INTERNAL', 'valid partial signatures did not combine to a valid signature');
    const valid = this.#held.filter((h) => h.verified);
    if (valid.length >= t) {
      const chosen = valid.slice(0, t);
      const again = await this.#combineAndVerify(chosen);
      if (!again)
        throw new QuorumFenceError('INTERNAL', 'valid partial signatures did not combine to a valid signature');
      return this.#succeed(chosen, again);
    }
    return { ok: false, bad };
  }

  /** The token's pairing check goes through the process's batcher: concurrent acquires share Miller loops. */
  async #combineAndVerify(candidates: readonly Held[]): Promise<Signature | null> {
    const point = combinePartialPoints(
      this.#backend,
      this.#cluster.n,
      candidates.map((h) => ({ index: h.replica, point: h.point })),
    );
    if (!point) return null;
    let signature: Signature;
    try {
      signature = this.#backend.checkSignature(point, 'combined signature');
    } catch (error) {
      if (isQuorumFenceError(error, 'POINT_NOT_IN_SUBGROUP')) return null; // a partial outside it: find which
      throw error;
    }
    const valid = await verifyBatcherFor(this.#backend).verify(this.#cluster.groupPublicKey, this.#message, signature);
    return valid ? signature : null;
  }

  #succeed(used: readonly Held[], signature: Signature): CombineOutcome {
    for (const held of used) this.#evidence.remember(held.replica, this.#grant, held.bytes);
    const sorted = [...used].sort((a, b) => a.replica - b.replica);
    return {
      ok: true,
      signature,
      signers: sorted.map((h) => h.replica),
      partials: sorted.map((h) => ({ replica: h.replica, epoch: this.#grant.epoch, partial: h.bytes })),
    };
  }

  /** Verifies one partial alone; a bad one is dropped, rejected and recorded. */
  #verifyAlone(held: Held): boolean {
    const share = this.#cluster.replicas[held.replica - 1]!.publicKeyShare;
    const signature = this.#checked(held);
    if (signature && this.#backend.verify(share, this.#message, signature)) {
      held.verified = true;
      return true;
    }
    const position = this.#held.indexOf(held);
    if (position >= 0) this.#held.splice(position, 1);
    this.#rejected.add(held.replica);
    this.#evidence.record({
      kind: 'invalid_partial',
      replica: held.replica,
      grant: this.#grant,
      grantMessage: this.#message,
      partial: held.bytes,
    });
    return false;
  }

  /** The held partial as a signature; undefined when it is outside the subgroup (then it is a bad partial). */
  #checked(held: Held): Signature | undefined {
    try {
      return this.#backend.checkSignature(held.point, `partial from replica ${held.replica}`);
    } catch (error) {
      if (isQuorumFenceError(error, 'POINT_NOT_IN_SUBGROUP')) return undefined;
      throw error;
    }
  }

  #checkEquivocation(held: Held, remembered: { grant: Grant; partial: Uint8Array }): void {
    const share = this.#cluster.replicas[held.replica - 1]!.publicKeyShare;
    let earlier: Signature;
    try {
      earlier = this.#backend.decodeSignature(remembered.partial);
    } catch {
      return;
    }
    const message = grantMessage(remembered.grant);
    if (!this.#backend.verify(share, message, earlier)) return;
    this.#evidence.record({
      kind: 'equivocation',
      replica: held.replica,
      grant: this.#grant,
      grantMessage: this.#message,
      partial: held.bytes,
      conflicting: { grant: remembered.grant, grantMessage: message, partial: remembered.partial },
    });
  }
}
