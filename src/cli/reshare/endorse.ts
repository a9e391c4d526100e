/**
 * `quorumfence reshare endorse`: t_new new members sign the new membership with their new shares (each on
 * its own machine, writing a public partial), and anyone combines t_new partials into the description's
 * endorsement by the group key. Each member's signing step is at most once per membership version: it
 * records the description's digest beside its key file before its partial leaves, signs the same
 * description again on request (the same partial), and refuses another description at that version.
 */
import { resolve } from 'node:path';
import { isQuorumFenceError, QuorumFenceError } from '../../common/errors.js';
import { fromHex, toHex } from '../../common/bytes.js';
import { readJsonFile, refuseIrregularFile, writeFileDurably } from '../../common/files.js';
import { parseCluster, type Cluster } from '../../cluster/description.js';
import {
  combineEndorsement,
  membershipDigest,
  signMembership,
  type MembershipPartial,
} from '../../cluster/membership.js';
import { loadReplicaKeyFile } from '../../cluster/replica-key.js';
import { parseFlags, required } from '../../command/args.js';

export const MEMBERSHIP_PARTIAL_FORMAT = 'quorumfence/membership-partial/v1';

/** Writes `text` to --out (durably), or to stdout without one. */
function output(out: string | undefined, text: string): void {
  if (out) writeFileDurably(resolve(out), text);
  else process.stdout.write(text);
}

function readPartial(path: string, cluster: Cluster): MembershipPartial {
  const json = readJsonFile(path, 'membership partial', 'BAD_CLUSTER') as Record<string, unknown>;
  if (typeof json !== 'object' || json === null || json.format !== MEMBERSHIP_PARTIAL_FORMAT)
    throw new QuorumFenceError('UNKNOWN_VERSION', `${path}: expected a "${MEMBERSHIP_PARTIAL_FORMAT}" file`);
  if (json.clusterId !== cluster.idHex || json.digest !== toHex(membershipDigest(cluster)))
    throw new QuorumFenceError(
      'MEMBERSHIP_NOT_ENDORSED',
      `${path}: signs another membership (membership ${String(json.membershipVersion)}, digest ${String(json.digest).slice(0, 16)}…), not this cluster.json's`,
    );
  if (typeof json.index !== 'number')
    throw new QuorumFenceError('BAD_CLUSTER', `${path}: "index" expected a member index`);
  let signature;
  try {
    signature = cluster.backend.decodeSignature(fromHex(json.signature, 96, 'signature'), 'signature');
  } catch (error) {
    throw new QuorumFenceError('BAD_CLUSTER', `${path}: ${(error as Error).message}`, undefined, { cause: error });
  }
  return { index: json.index, signature };
}

export async function endorse(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, {
    cluster: { type: 'string' },
    key: { type: 'string' },
    partial: { type: 'string', multiple: true },
    out: { type: 'string' },
  });
  const clusterPath = resolve(required(values.cluster, 'cluster'));
  const raw = readJsonFile(clusterPath, 'cluster description', 'BAD_CLUSTER') as Record<string, unknown>;
  const cluster = parseCluster(raw);
  const partials = values.partial ?? [];
  if ((values.key === undefined) === (partials.length === 0))
    throw new QuorumFenceError('INVALID_OPTION', 'endorse: give either --key (sign) or --partial (combine), not both');
  // Before anything is signed or recorded: a link as --out (to the key file, say) is refused.
  if (values.out !== undefined) refuseIrregularFile(resolve(values.out));
  if (values.key !== undefined) {
    const keyPath = resolve(values.key);
    const key = loadReplicaKeyFile(keyPath, cluster);
    // Durably, before the partial leaves: this share endorses one description per membership version.
    const recorded = recordEndorsement(keyPath, cluster, key.index);
    const partial = signMembership(cluster, key.index, key.secretKey);
    const json = {
      format: MEMBERSHIP_PARTIAL_FORMAT,
      clusterId: cluster.idHex,
      membershipVersion: cluster.membershipVersion,
      digest: toHex(membershipDigest(cluster)),
      index: partial.index,
      signature: toHex(partial.signature.bytes),
    };
    output(values.out, JSON.stringify(json, null, 2) + '\n');
    process.stderr.write(
      `reshare: member ${key.index} signed membership ${cluster.membershipVersion} of cluster ${cluster.idHex.slice(0, 16)}…` +
        (recorded === 'again' ? ' (again: the same description it endorsed before)' : '') +
        ` (recorded in ${endorsementRecordPath(keyPath, cluster.membershipVersion)})\n`,
    );
    return 0;
  }
  const signature = combineEndorsement(
    cluster,
    partials.map((path) => readPartial(resolve(path), cluster)),
  );
  // The file as given (a ceremony's cluster.json keeps its ceremony block), with the endorsement added.
  output(values.out, JSON.stringify({ ...raw, endorsement: toHex(signature.bytes) }, null, 2) + '\n');
  process.stderr.write(
    `reshare: membership ${cluster.membershipVersion} of cluster ${cluster.idHex.slice(0, 16)}… endorsed by the group key\n`,
  );
  return 0;
}

export const ENDORSEMENT_RECORD_FORMAT = 'quorumfence/endorsement-record/v1';

/** Beside the key file, one record per membership version this share endorsed. */
export function endorsementRecordPath(keyPath: string, membershipVersion: number): string {
  return `${keyPath}.endorsed-v${membershipVersion}.json`;
}

/**
 * Records that the share in `keyPath` endorses this description at its membership version, unless it already
 * endorsed one there: the same digest is allowed again ('again'), another is refused. The record is written
 * exclusively (writeFileDurably: a flushed temporary file linked into place, which fails if the record
 * exists, so two endorse processes at once cannot both record; then the directory is flushed).
 * @throws QuorumFenceError MEMBERSHIP_ALREADY_ENDORSED (another description at this version), BAD_KEY_FILE (an
 *   unreadable record: nothing is signed until an operator looks at it), NOT_A_REGULAR_FILE, IO_ERROR
 */
export function recordEndorsement(keyPath: string, cluster: Cluster, index: number): 'recorded' | 'again' {
  const path = endorsementRecordPath(keyPath, cluster.membershipVersion);
  const digest = toHex(membershipDigest(cluster));
  const entry = {
    format: ENDORSEMENT_RECORD_FORMAT,
    clusterId: cluster.idHex,
    index,
    membershipVersion: cluster.membershipVersion,
    digest,
  };
  try {
    // Exclusive: linked into place only if no record is there, so two endorse processes cannot both record.
    writeFileDurably(path, JSON.stringify(entry, null, 2) + '\n', { mode: 0o600, exclusive: true });
    return 'recorded';
  } catch (error) {
    if (!isQuorumFenceError(error, 'FILE_EXISTS')) throw error;
  }
  const held = readJsonFile(path, 'endorsement record', 'BAD_KEY_FILE') as Record<string, unknown> | null;
  if (
    typeof held !== 'object' ||
    held === null ||
    held.format !== ENDORSEMENT_RECORD_FORMAT ||
    held.membershipVersion !== cluster.membershipVersion ||
    typeof held.digest !== 'string'
  )
    throw new QuorumFenceError('BAD_KEY_FILE', `${path}: not an endorsement record; nothing signed`, { path });
  if (held.digest !== digest || held.clusterId !== cluster.idHex)
    throw new QuorumFenceError(
      'MEMBERSHIP_ALREADY_ENDORSED',
      `this share already endorsed another description at membership ${cluster.membershipVersion} ` +
        `(digest ${held.digest.slice(0, 16)}…, this one ${digest.slice(0, 16)}…; recorded in ${path}); nothing signed`,
      { path },
    );
  return 'again';
}
