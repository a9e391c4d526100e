/**
 * Memberships endorsed by the group key (docs/resharing.md, "Following a membership change"). A reshare
 * keeps the group key and the cluster id but changes who holds shares, where they listen, n and t.
 * The new members sign the new description with their new shares (a threshold BLS signature, the
 * same key every token is checked against), so anyone holding an older cluster.json can follow the
 * change by checking one signature under a key it already trusts, without trusting any one replica.
 *
 *   digest  = SHA-256("quorumfence/membership/v1" ‖ clusterId ‖ u64 membershipVersion ‖ u16 n ‖ u16 t
 *                     ‖ groupPublicKey ‖ commitments… ‖ for each replica: u16 index ‖ publicKeyShare
 *                     ‖ u16 len ‖ endpoint)
 *   signed  = "quorumfence/membership/v1" ‖ digest
 *
 * The signed message begins with its own tag, so it can never be a grant message (those begin with
 * "quorumfence/grant/v1", and replicas sign nothing else), nor a grant one of these.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { concatBytes, lengthPrefixed, toHex, u16be, u64be } from '../common/bytes.js';
import { QuorumFenceError, isQuorumFenceError, type ErrorCode } from '../common/errors.js';
import type { SecretKey, Signature } from '../crypto/backend.js';
import { combinePartials } from '../crypto/threshold.js';
import { parseCluster, type Cluster } from './description.js';

export const MEMBERSHIP_DOMAIN_TAG = 'quorumfence/membership/v1';
const tagBytes = new TextEncoder().encode(MEMBERSHIP_DOMAIN_TAG);
const utf8 = new TextEncoder();

/** The digest of a membership: everything of the description but the endorsement itself. */
export function membershipDigest(cluster: Cluster): Uint8Array {
  return sha256(
    concatBytes(
      tagBytes,
      cluster.id,
      u64be(BigInt(cluster.membershipVersion)),
      u16be(cluster.n),
      u16be(cluster.t),
      cluster.groupPublicKey.bytes,
      ...cluster.commitments,
      ...cluster.replicas.flatMap((r) => [
        u16be(r.index),
        r.publicKeyShare.bytes,
        lengthPrefixed(utf8.encode(r.endpoint)),
      ]),
    ),
  );
}

/** What the group key signs for a membership: the tag, then the digest. */
export function membershipMessage(cluster: Cluster): Uint8Array {
  return concatBytes(tagBytes, membershipDigest(cluster));
}

/** One member's share of an endorsement. */
export interface MembershipPartial {
  /** The signer's index in `cluster` (the membership being endorsed). */
  readonly index: number;
  readonly signature: Signature;
}

/** Member `index` of `cluster` signs its membership with its share of the group key (from its key file). */
export function signMembership(cluster: Cluster, index: number, secretKey: SecretKey): MembershipPartial {
  return { index, signature: cluster.backend.sign(secretKey, membershipMessage(cluster)) };
}

/**
 * Combines partials of the members of `cluster` into its endorsement: each partial is checked against
 * its signer's public share first, so one bad partial is named instead of spoiling the result.
 * @throws QuorumFenceError MEMBERSHIP_NOT_ENDORSED (fewer than t valid partials from distinct members;
 *   the message names the ones that failed), INVALID_ARGUMENT (an index outside 1..n)
 */
export function combineEndorsement(cluster: Cluster, partials: readonly MembershipPartial[]): Signature {
  const message = membershipMessage(cluster);
  const valid = new Map<number, MembershipPartial>();
  const failed: number[] = [];
  for (const partial of partials) {
    const replica = cluster.replicas[partial.index - 1];
    if (!Number.isInteger(partial.index) || !replica)
      throw new QuorumFenceError('INVALID_ARGUMENT', `partial of member ${partial.index}: expected 1..${cluster.n}`);
    if (valid.has(partial.index)) continue;
    if (cluster.backend.verify(replica.publicKeyShare, message, partial.signature)) valid.set(partial.index, partial);
    else failed.push(partial.index);
  }
  const chosen = [...valid.values()].slice(0, cluster.t);
  const refused = failed.length > 0 ? `; partials of ${failed.join(', ')} do not verify under their public shares` : '';
  if (chosen.length < cluster.t)
    throw new QuorumFenceError(
      'MEMBERSHIP_NOT_ENDORSED',
      `an endorsement needs t = ${cluster.t} valid partials of distinct members, got ${chosen.length}${refused}`,
      { failed },
    );
  const signature = combinePartials(cluster.backend, cluster.n, chosen);
  if (!signature || !cluster.backend.verify(cluster.groupPublicKey, message, signature))
    throw new QuorumFenceError('INTERNAL', 'valid partials combined into a signature that does not verify');
  return signature;
}

/** Whether `cluster` carries an endorsement that verifies under its group key over its contents. */
export function endorsementVerifies(cluster: Cluster): boolean {
  return (
    cluster.endorsement !== undefined &&
    cluster.backend.verify(cluster.groupPublicKey, membershipMessage(cluster), cluster.endorsement)
  );
}

/** Why a candidate membership was not followed. */
export type MembershipRefusal = Extract<
  ErrorCode,
  'BAD_CLUSTER' | 'UNKNOWN_VERSION' | 'CLUSTER_MISMATCH' | 'MEMBERSHIP_NOT_NEWER' | 'MEMBERSHIP_NOT_ENDORSED'
>;

export type FollowOutcome =
  | { readonly ok: true; readonly cluster: Cluster }
  | { readonly ok: false; readonly code: MembershipRefusal; readonly message: string };

/**
 * Whether to move from the membership held (`current`) to `candidate` (a parsed Cluster, or the JSON of a
 * cluster.json): only when the candidate is a well-formed description of the same cluster (same id, so
 * the same group key), of a higher membershipVersion, endorsed by the group key over its contents. It
 * trusts nothing else in the candidate: no replica, and not whoever handed it over.
 */
export function followMembership(current: Cluster, candidate: unknown): FollowOutcome {
  let next: Cluster;
  try {
    next = isCluster(candidate) ? candidate : parseCluster(candidate, { backend: current.backend });
  } catch (error) {
    if (!isQuorumFenceError(error)) throw error;
    const code: MembershipRefusal =
      error.code === 'UNKNOWN_VERSION' || error.code === 'CLUSTER_MISMATCH' ? error.code : 'BAD_CLUSTER';
    return { ok: false, code, message: `the candidate is not a valid cluster description: ${error.message}` };
  }
  if (toHex(next.id) !== current.idHex)
    return {
      ok: false,
      code: 'CLUSTER_MISMATCH',
      message: `the candidate is cluster ${next.idHex.slice(0, 16)}…, not ${current.idHex.slice(0, 16)}…`,
    };
  if (next.membershipVersion <= current.membershipVersion)
    return {
      ok: false,
      code: 'MEMBERSHIP_NOT_NEWER',
      message: `the candidate is membership ${next.membershipVersion}, not above the one held (${current.membershipVersion})`,
    };
  if (!next.endorsement)
    return { ok: false, code: 'MEMBERSHIP_NOT_ENDORSED', message: 'the candidate carries no endorsement' };
  if (!endorsementVerifies(next))
    return {
      ok: false,
      code: 'MEMBERSHIP_NOT_ENDORSED',
      message: 'the candidate’s endorsement does not verify under the group key over its contents',
    };
  return { ok: true, cluster: next };
}

function isCluster(value: unknown): value is Cluster {
  return typeof value === 'object' && value !== null && 'idHex' in value && 'backend' in value;
}
