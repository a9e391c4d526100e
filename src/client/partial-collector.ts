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
 *
 * One grant's partials are plain data (PartialSet: each partial's bytes and whether it was verified alone, the
 * replicas rejected), so an acquire core's state holds them as it holds everything else (src/client/core); the
 * functions here change a set with the cryptography of PartialChecks. A decoded point is not part of the set:
 * combining looks it up by the bytes object it was decoded from (`decodedPoints`, a cache the set does not need:
 * a copy of the set made with structuredClone has new bytes objects, and its partials are decoded again).
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

/** One partial held: its canonical bytes, and whether it was checked and verified alone against its replica's share. */
export interface HeldPartialBytes {
  readonly replica: number;
  readonly bytes: Uint8Array;
  verified: boolean;
}

/** One grant's partials (plain data): those held, not known to be bad, and the replicas that get no second say. */
export interface PartialSet {
  readonly grant: Grant;
  readonly held: HeldPartialBytes[];
  readonly rejected: number[];
}

/** What checking partials needs: the cluster's keys, the backend, and the evidence log that remembers and records. */
export interface PartialChecks {
  readonly cluster: Pick<Cluster, 'n' | 't' | 'membershipVersion' | 'replicas' | 'groupPublicKey'>;
  readonly backend: BlsBackend;
  readonly evidence: EvidenceLog;
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

export function newPartialSet(grant: Grant): PartialSet {
  return { grant, held: [], rejected: [] };
}

/**
 * Takes a partial from `replica` (1..n), signed with share generation `generation` (0 when the replica
 * named none). Only partials of the cluster's own generation (its membershipVersion) are held: shares of
 * two generations are shares of different polynomials, and combining them would make no valid signature.
 * Decodes it with every point check; a replica that already gave a partial for this grant gets no second say.
 */
export function addPartial(
  set: PartialSet,
  checks: PartialChecks,
  replica: number,
  bytes: Uint8Array,
  generation = 0,
): AddOutcome {
  if (set.rejected.includes(replica) || set.held.some((h) => h.replica === replica)) {
    return { ok: false, reason: 'duplicate', message: `replica ${replica} already answered this grant` };
  }
  const { cluster, backend, evidence } = checks;
  if (generation !== cluster.membershipVersion) {
    set.rejected.push(replica);
    return {
      ok: false,
      reason: 'other_generation',
      message: `replica ${replica} signs with share generation ${generation}, this cluster description is ${cluster.membershipVersion}`,
    };
  }
  const message = grantMessage(set.grant);
  let point: SignaturePoint;
  try {
    point = backend.decodeSignaturePoint(bytes, `partial from replica ${replica}`);
  } catch (error) {
    if (!(error instanceof QuorumFenceError)) throw error;
    set.rejected.push(replica);
    evidence.record({
      kind: 'undecodable_partial',
      replica,
      grant: set.grant,
      grantMessage: message,
      partial: bytes.slice(),
    });
    return { ok: false, reason: 'undecodable', message: `${error.message} (${error.code})` };
  }
  const held: HeldPartialBytes = { replica, bytes: point.bytes, verified: false };
  decodedPoints.set(point.bytes, { backend, point });
  const remembered = evidence.recall(replica, set.grant);
  if (remembered && !bytesEqual(remembered.partial, held.bytes)) {
    // The same replica gave different bytes for this (resource, epoch) before. For the same holder one of
    // them is invalid (BLS signatures are unique); for another holder both may be valid: equivocation.
    if (!verifyAlone(set, checks, held, point)) {
      return {
        ok: false,
        reason: 'invalid',
        message: `partial from replica ${replica} does not verify under its key share`,
      };
    }
    if (!bytesEqual(remembered.grant.holder, set.grant.holder)) checkEquivocation(set, checks, held, remembered);
  }
  set.held.push(held);
  return { ok: true };
}

/** The t partials a combine uses: those already verified alone first (after one failure the known-good go first). */
function candidatesOf(set: PartialSet, t: number): HeldPartialBytes[] {
  return [...set.held].sort((a, b) => Number(b.verified) - Number(a.verified)).slice(0, t);
}

/**
 * With at least t partials held, tries to produce the group signature. Changes `set` as `combinedInto` does (the
 * bad ones dropped and rejected, the others of the attempt marked verified); a core that hands a copy away applies
 * the outcome to its own with `combinedInto`.
 * @throws QuorumFenceError INTERNAL if t individually valid partials do not combine (a backend bug).
 */
export async function combinePartials(set: PartialSet, checks: PartialChecks): Promise<CombineOutcome> {
  const t = checks.cluster.t;
  if (set.held.length < t) return { ok: false, bad: [] };
  const candidates = candidatesOf(set, t);
  const combined = await combineAndVerify(set, checks, candidates);
  if (combined) return succeed(set, checks, candidates, combined);

  const bad: number[] = [];
  for (const held of candidates) {
    if (held.verified) continue;
    if (!verifyAlone(set, checks, held)) bad.push(held.replica);
  }
  if (bad.length === 0)
    throw new QuorumFenceError('INTERNAL', 'valid partial signatures did not combine to a valid signature');
  const valid = set.held.filter((h) => h.verified);
  if (valid.length >= t) {
    const chosen = valid.slice(0, t);
    const again = await combineAndVerify(set, checks, chosen);
    if (!again) throw new QuorumFenceError('INTERNAL', 'valid partial signatures did not combine to a valid signature');
    return succeed(set, checks, chosen, again);
  }
  return { ok: false, bad };
}

/**
 * Applies a failed combine's outcome to the set it was made from (combinePartials ran on a copy): the partials it
 * tried that are not bad were verified alone, the bad ones are dropped, and their replicas get no second say. The
 * set must not have changed in between (an attempt takes no answer while its partials are being combined).
 */
export function combinedInto(set: PartialSet, t: number, outcome: CombineOutcome): void {
  if (outcome.ok) return;
  for (const held of candidatesOf(set, t)) {
    if (!outcome.bad.includes(held.replica)) held.verified = true;
    else dropBad(set, held);
  }
}

/** The token's pairing check goes through the process's batcher: concurrent acquires share Miller loops. */
async function combineAndVerify(
  set: PartialSet,
  checks: PartialChecks,
  candidates: readonly HeldPartialBytes[],
): Promise<Signature | null> {
  const { backend, cluster } = checks;
  const point = combinePartialPoints(
    backend,
    cluster.n,
    candidates.map((h) => ({ index: h.replica, point: decodeHeld(backend, h) })),
  );
  if (!point) return null;
  let signature: Signature;
  try {
    signature = backend.checkSignature(point, 'combined signature');
  } catch (error) {
    if (isQuorumFenceError(error, 'POINT_NOT_IN_SUBGROUP')) return null; // a partial outside it: find which
    throw error;
  }
  const valid = await verifyBatcherFor(backend).verify(cluster.groupPublicKey, grantMessage(set.grant), signature);
  return valid ? signature : null;
}

/**
 * Points decoded when their partials were added, by the canonical bytes object each is held as: a G2 decoding
 * costs about 0.1-0.3 ms here (blst), t of them per grant. Weak, so it holds nothing a set no longer holds.
 */
const decodedPoints = new WeakMap<Uint8Array, { readonly backend: BlsBackend; readonly point: SignaturePoint }>();

/** A held partial's point: as it was decoded when added, or decoded again (it decoded then, so it decodes now). */
function decodeHeld(backend: BlsBackend, held: HeldPartialBytes): SignaturePoint {
  const known = decodedPoints.get(held.bytes);
  if (known?.backend === backend) return known.point;
  return backend.decodeSignaturePoint(held.bytes, `partial from replica ${held.replica}`);
}

function succeed(
  set: PartialSet,
  checks: PartialChecks,
  used: readonly HeldPartialBytes[],
  signature: Signature,
): CombineOutcome {
  for (const held of used) checks.evidence.remember(held.replica, set.grant, held.bytes);
  const sorted = [...used].sort((a, b) => a.replica - b.replica);
  return {
    ok: true,
    signature,
    signers: sorted.map((h) => h.replica),
    partials: sorted.map((h) => ({ replica: h.replica, epoch: set.grant.epoch, partial: h.bytes })),
  };
}

/** Verifies one partial alone; a bad one is dropped, rejected and recorded. */
function verifyAlone(set: PartialSet, checks: PartialChecks, held: HeldPartialBytes, point?: SignaturePoint): boolean {
  const { backend, cluster } = checks;
  const share = cluster.replicas[held.replica - 1]!.publicKeyShare;
  const message = grantMessage(set.grant);
  const signature = checked(backend, held, point ?? decodeHeld(backend, held));
  if (signature && backend.verify(share, message, signature)) {
    held.verified = true;
    return true;
  }
  dropBad(set, held);
  checks.evidence.record({
    kind: 'invalid_partial',
    replica: held.replica,
    grant: set.grant,
    grantMessage: message,
    partial: held.bytes,
  });
  return false;
}

function dropBad(set: PartialSet, held: HeldPartialBytes): void {
  const position = set.held.indexOf(held);
  if (position >= 0) set.held.splice(position, 1);
  if (!set.rejected.includes(held.replica)) set.rejected.push(held.replica);
}

/** The held partial as a signature; undefined when it is outside the subgroup (then it is a bad partial). */
function checked(backend: BlsBackend, held: HeldPartialBytes, point: SignaturePoint): Signature | undefined {
  try {
    return backend.checkSignature(point, `partial from replica ${held.replica}`);
  } catch (error) {
    if (isQuorumFenceError(error, 'POINT_NOT_IN_SUBGROUP')) return undefined;
    throw error;
  }
}

function checkEquivocation(
  set: PartialSet,
  checks: PartialChecks,
  held: HeldPartialBytes,
  remembered: { grant: Grant; partial: Uint8Array },
): void {
  const { backend, cluster } = checks;
  const share = cluster.replicas[held.replica - 1]!.publicKeyShare;
  let earlier: Signature;
  try {
    earlier = backend.decodeSignature(remembered.partial);
  } catch {
    return;
  }
  const message = grantMessage(remembered.grant);
  if (!backend.verify(share, message, earlier)) return;
  checks.evidence.record({
    kind: 'equivocation',
    replica: held.replica,
    grant: set.grant,
    grantMessage: grantMessage(set.grant),
    partial: held.bytes,
    conflicting: { grant: remembered.grant, grantMessage: message, partial: remembered.partial },
  });
}
