/**
 * The `ceremony` block of a cluster.json that the key ceremony (`dkg run`) or a reshare (`reshare run`)
 * wrote (docs/ceremony.md, "What is written where"): the proposal digest, the ceremony id, the members'
 * node keys, the qualified and excluded dealers, and the signatures of the members that confirmed the
 * cluster id, each over
 *
 *   "quorumfence/dkg/cluster/v1" ‖ proposal digest ‖ clusterId
 *
 * Loading a description checks the block whenever it is there: its shape, every node key usable, every
 * listed signature valid under the node key listed for its index over this description's cluster id (so
 * under its group key: the v2 id hashes it), and at least t of them, as the ceremony kept its result only
 * with t confirmations. A zeroed signature, a changed node key or a block moved onto another cluster is
 * refused. What the file alone cannot show is said in docs/ceremony.md: that the node keys are the
 * proposal's (the digest covers them, but the proposal is not in the file), and anything about the
 * commitments beyond the group key and the public shares (the members signed the id, which does not
 * cover them).
 */
import { QuorumFenceError } from '../common/errors.js';
import { concatBytes, fromHex, toHex } from '../common/bytes.js';
import { describe } from '../common/check.js';
import {
  ED25519_PUBLIC_KEY_BYTES,
  ED25519_SIGNATURE_BYTES,
  isUsableEd25519Key,
  verifyEd25519,
} from '../common/ed25519.js';
import { MAX_REPLICAS } from '../common/limits.js';

const CLUSTER_SIGNATURE_TAG = new TextEncoder().encode('quorumfence/dkg/cluster/v1');

/** A dealer's exclusion reason is one line of the ceremony's progress; far longer is not one of ours. */
const MAX_REASON_CHARS = 1024;

/** The message a member signs to confirm the resulting cluster (the confirm round). */
export function clusterSignatureMessage(proposalDigest: Uint8Array, clusterId: Uint8Array): Uint8Array {
  return concatBytes(CLUSTER_SIGNATURE_TAG, proposalDigest, clusterId);
}

export interface CeremonyRecordJson {
  proposal: string;
  ceremonyId: string;
  members: { index: number; nodeKey: string }[];
  qualified: number[];
  excluded: { dealer: number; reason: string }[];
  signatures: { index: number; signature: string }[];
}

function bad(field: string, message: string): never {
  throw new QuorumFenceError('BAD_CLUSTER', `cluster description: "${field}" ${message}`, { field });
}

function hex(value: unknown, bytes: number, field: string): Uint8Array {
  try {
    return fromHex(value, bytes, field);
  } catch {
    bad(field, `expected ${bytes} bytes of lowercase hex, got ${describe(value)}`);
  }
}

function list(value: unknown, field: string, max: number): unknown[] {
  if (!Array.isArray(value) || value.length > max) bad(field, `expected an array of at most ${max} entries`);
  return value;
}

function object(value: unknown, field: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) bad(field, 'expected an object');
  return value as Record<string, unknown>;
}

/** Dealer numbers: members' indices, or a reshare's old indices, 1 .. MAX_REPLICAS. */
function dealerNumber(value: unknown, field: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_REPLICAS)
    bad(field, `expected a dealer number 1..${MAX_REPLICAS}, got ${describe(value)}`);
  return value;
}

/**
 * Checks a description's `ceremony` block against the description (its id, n and t).
 * @returns the indices of the members whose confirmation it carries (all of them verified)
 * @throws QuorumFenceError BAD_CLUSTER naming the field (`ceremony.signatures[1]`, …)
 */
export function checkCeremonyRecord(value: unknown, cluster: { id: Uint8Array; n: number; t: number }): number[] {
  const block = object(value, 'ceremony');
  const proposal = hex(block.proposal, 32, 'ceremony.proposal');
  hex(block.ceremonyId, 32, 'ceremony.ceremonyId');

  const members = list(block.members, 'ceremony.members', MAX_REPLICAS);
  if (members.length !== cluster.n) bad('ceremony.members', `expected n = ${cluster.n} members, got ${members.length}`);
  const nodeKeys = members.map((raw, k) => {
    const field = `ceremony.members[${k}]`;
    const member = object(raw, field);
    if (member.index !== k + 1) bad(`${field}.index`, `expected ${k + 1} (members in index order)`);
    const nodeKey = hex(member.nodeKey, ED25519_PUBLIC_KEY_BYTES, `${field}.nodeKey`);
    if (!isUsableEd25519Key(nodeKey))
      bad(`${field}.nodeKey`, 'is not a usable Ed25519 key (small order or non-canonical)');
    return nodeKey;
  });
  if (new Set(nodeKeys.map(toHex)).size !== nodeKeys.length) bad('ceremony.members', 'repeats a node key');

  const qualified = list(block.qualified, 'ceremony.qualified', MAX_REPLICAS).map((d, k) =>
    dealerNumber(d, `ceremony.qualified[${k}]`),
  );
  if (qualified.some((d, k) => k > 0 && d <= qualified[k - 1]!))
    bad('ceremony.qualified', 'expected ascending distinct dealer numbers');
  list(block.excluded, 'ceremony.excluded', MAX_REPLICAS).forEach((raw, k) => {
    const field = `ceremony.excluded[${k}]`;
    const entry = object(raw, field);
    if (qualified.includes(dealerNumber(entry.dealer, `${field}.dealer`)))
      bad(`${field}.dealer`, 'is also listed as qualified');
    if (typeof entry.reason !== 'string' || entry.reason.length > MAX_REASON_CHARS)
      bad(`${field}.reason`, `expected a string of at most ${MAX_REASON_CHARS} characters`);
  });

  // Every listed confirmation must verify, not just t of them: a block is the ceremony's record or it is refused.
  const message = clusterSignatureMessage(proposal, cluster.id);
  const signers = list(block.signatures, 'ceremony.signatures', MAX_REPLICAS).map((raw, k) => {
    const field = `ceremony.signatures[${k}]`;
    const entry = object(raw, field);
    const index = entry.index;
    if (typeof index !== 'number' || !Number.isInteger(index) || index < 1 || index > cluster.n)
      bad(`${field}.index`, `expected a member index 1..${cluster.n}, got ${describe(index)}`);
    const signature = hex(entry.signature, ED25519_SIGNATURE_BYTES, `${field}.signature`);
    if (!verifyEd25519(nodeKeys[index - 1]!, message, signature))
      bad(
        `${field}.signature`,
        `does not verify under member ${index}'s node key over the proposal digest and this cluster's id`,
      );
    return index;
  });
  if (signers.some((index, k) => k > 0 && index <= signers[k - 1]!))
    bad('ceremony.signatures', 'expected ascending distinct member indices');
  if (signers.length < cluster.t)
    bad(
      'ceremony.signatures',
      `expected the confirmations of at least t = ${cluster.t} members, got ${signers.length}`,
    );
  return signers;
}
