/**
 * Signed frozen exports (docs/resharing.md, "Signed frozen exports"): what an old replica hands to
 * `reshare inherit`. Its signing record (the interchange document's fields) with the membership it belongs
 * to and its freeze marker, signed with the replica's BLS key share:
 *
 *   digest = SHA-256("quorumfence/frozen-export/v1" ‖ clusterId ‖ u64 membershipVersion ‖ u16 replica
 *                    ‖ u16 len ‖ frozen.at ‖ u16 len ‖ frozen.reason ‖ u64 floor ‖ u64 count
 *                    ‖ for each entry: u16 len ‖ resource ‖ u64 epoch ‖ holder)
 *   signed = "quorumfence/frozen-export/v1" ‖ digest
 *
 * The message begins with its own tag and a grant message with "quorumfence/grant/v1", and replicas sign
 * only grant messages they build themselves, so no export signature is a grant partial or the reverse.
 * signFrozenExport refuses a store without a freeze marker: an export taken before the freeze has no
 * signature, and readFrozenExport refuses an unsigned one. The signature is checked under that replica's
 * public share in the old description, so a record relabelled as another replica's, or changed in any
 * field, is refused. A Byzantine replica can still sign any lie with its own share: the inherit rule
 * (inherit.ts) bounds what such a lie can do.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { QuorumFenceError } from '../common/errors.js';
import { bytesEqual, concatBytes, fromHex, lengthPrefixed, toHex, u16be, u64be } from '../common/bytes.js';
import { describe } from '../common/check.js';
import { MAX_MEMBERSHIP_VERSION } from '../common/limits.js';
import { SIGNATURE_BYTES } from '../crypto/backend.js';
import type { Cluster } from '../cluster/description.js';
import type { ReplicaKey } from '../cluster/replica-key.js';
import type { FrozenState } from './freeze-marker.js';
import type { OldRecordReport } from './inherit.js';
import {
  exportInterchange,
  INTERCHANGE_FORMAT,
  INTERCHANGE_FORMAT_SIGNED,
  INTERCHANGE_FORMAT_V1,
  parseInterchange,
  type InterchangeJson,
} from './interchange.js';
import type { RecordEntry, SigningRecord } from './signing-record.js';

export const FROZEN_EXPORT_DOMAIN_TAG = 'quorumfence/frozen-export/v1';
const tagBytes = new TextEncoder().encode(FROZEN_EXPORT_DOMAIN_TAG);
const utf8 = new TextEncoder();
/** A freeze marker's fields: an ISO time, and a reason the freeze cuts to 200 characters (4 bytes each at most). */
const MAX_MARKER_FIELD_BYTES = 1024;

export interface FrozenExportJson extends Omit<InterchangeJson, 'format'> {
  format: typeof INTERCHANGE_FORMAT_SIGNED;
  /** The membership (cluster.json's membershipVersion) whose share signed. */
  membershipVersion: number;
  /** The store's freeze marker when it was exported. */
  frozen: { at: string; reason: string };
  /** Hex, 96 bytes: the replica's share over frozenExportMessage. */
  signature: string;
}

interface SignedFields {
  readonly clusterId: Uint8Array;
  readonly membershipVersion: number;
  readonly replica: number;
  readonly frozen: FrozenState;
  readonly floor: bigint;
  readonly entries: readonly RecordEntry[];
}

/** What a replica's share signs for its frozen export: the tag, then the digest of every field. */
export function frozenExportMessage(fields: SignedFields): Uint8Array {
  const digest = sha256(
    concatBytes(
      tagBytes,
      fields.clusterId,
      u64be(BigInt(fields.membershipVersion)),
      u16be(fields.replica),
      lengthPrefixed(utf8.encode(fields.frozen.at)),
      lengthPrefixed(utf8.encode(fields.frozen.reason)),
      u64be(fields.floor),
      u64be(BigInt(fields.entries.length)),
      ...fields.entries.flatMap(({ resource, record }) => [
        lengthPrefixed(utf8.encode(resource)),
        u64be(record.epoch),
        record.holder,
      ]),
    ),
  );
  return concatBytes(tagBytes, digest);
}

/**
 * The frozen store's record, signed with `key` (the share of replica `key.index` of `cluster`).
 * @throws QuorumFenceError EXPORT_NOT_FROZEN (nothing signed), CLUSTER_MISMATCH (the store is another
 *   cluster's), RESHARE_REFUSED (the store is another replica's)
 */
export function signFrozenExport(store: SigningRecord, cluster: Cluster, key: ReplicaKey): FrozenExportJson {
  const frozen = store.frozen;
  if (!frozen)
    throw new QuorumFenceError(
      'EXPORT_NOT_FROZEN',
      `replica ${store.identity.replicaIndex}'s signing record is not frozen: an export taken now could miss grants ` +
        'signed after it, so it is not signed (run "quorumfence reshare freeze" first)',
    );
  if (!bytesEqual(store.identity.clusterId, cluster.id))
    throw new QuorumFenceError(
      'CLUSTER_MISMATCH',
      'the signing record is another cluster’s than --cluster; nothing signed',
    );
  if (store.identity.replicaIndex !== key.index)
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      `the signing record is replica ${store.identity.replicaIndex}'s, the key replica ${key.index}'s; nothing signed`,
    );
  const document = exportInterchange(store);
  // Signed as a reader will parse it, so what is signed and what is checked are one encoding.
  const { floor, entries } = parseInterchange(document, cluster.id);
  const fields = { clusterId: cluster.id, membershipVersion: cluster.membershipVersion, replica: key.index, frozen };
  const signature = cluster.backend.sign(key.secretKey, frozenExportMessage({ ...fields, floor, entries }));
  return {
    ...document,
    format: INTERCHANGE_FORMAT_SIGNED,
    membershipVersion: cluster.membershipVersion,
    frozen: { at: frozen.at, reason: frozen.reason },
    signature: toHex(signature.bytes),
  };
}

/** A frozen export as inherit uses it: the report, and the freeze it was taken under. */
export interface FrozenReport extends OldRecordReport {
  readonly frozen: FrozenState;
}

function markerField(value: unknown, field: string, source: string): string {
  if (typeof value !== 'string' || utf8.encode(value).length > MAX_MARKER_FIELD_BYTES)
    throw new QuorumFenceError(
      'BAD_INTERCHANGE',
      `${source}: "${field}" expected a string of at most ${MAX_MARKER_FIELD_BYTES} bytes, got ${describe(value)}`,
    );
  return value;
}

/**
 * Checks a frozen export against the old description: a signed (v3) document of this cluster and
 * membership, from one of its replicas, signed by that replica's share over every field.
 * @param source names the file in errors
 * @throws QuorumFenceError EXPORT_UNSIGNED (a v1 or v2 export), EXPORT_SIGNATURE_INVALID, BAD_INTERCHANGE,
 *   UNKNOWN_VERSION, CLUSTER_MISMATCH, RESHARE_REFUSED (another membership)
 */
export function readFrozenExport(json: unknown, old: Cluster, source: string): FrozenReport {
  const format = (json as { format?: unknown } | null)?.format;
  if (format === INTERCHANGE_FORMAT || format === INTERCHANGE_FORMAT_V1)
    throw new QuorumFenceError(
      'EXPORT_UNSIGNED',
      `${source}: an unsigned export (${String(format)}) proves neither who wrote it nor that its record was frozen; ` +
        'inherit takes only signed frozen exports ("reshare freeze --data DIR --key KEY --cluster OLD", or ' +
        '"replica export --key KEY --cluster OLD" after a live freeze)',
      { source },
    );
  const parsed = parseNamingSource(json, old, source);
  const d = json as Record<string, unknown>;
  const replica = old.replicas[parsed.replica - 1];
  if (!replica)
    throw new QuorumFenceError('BAD_INTERCHANGE', `${source}: replica ${parsed.replica} is not in the old cluster`, {
      source,
    });
  const version = membershipOf(d.membershipVersion, old, source);
  const marker = typeof d.frozen === 'object' && d.frozen !== null ? (d.frozen as Record<string, unknown>) : {};
  const frozen = {
    at: markerField(marker.at, 'frozen.at', source),
    reason: markerField(marker.reason, 'frozen.reason', source),
  };
  const message = frozenExportMessage({
    clusterId: old.id,
    membershipVersion: version,
    replica: parsed.replica,
    frozen,
    floor: parsed.floor,
    entries: parsed.entries,
  });
  if (!old.backend.verify(replica.publicKeyShare, message, signatureOf(d.signature, old, source)))
    throw new QuorumFenceError(
      'EXPORT_SIGNATURE_INVALID',
      `${source}: the signature does not verify under old replica ${parsed.replica}'s public share over this ` +
        'record (relabelled from another replica, or changed after it was signed)',
      { source },
    );
  return { replica: parsed.replica, floor: parsed.floor, entries: parsed.entries, frozen, source };
}

/** parseInterchange, its errors naming the file. */
function parseNamingSource(json: unknown, old: Cluster, source: string) {
  try {
    return parseInterchange(json, old.id);
  } catch (error) {
    if (error instanceof QuorumFenceError)
      throw new QuorumFenceError(error.code, `${source}: ${error.message}`, { ...error.details, source });
    throw error;
  }
}

/** The export's membership version, which must be the old cluster's. @throws BAD_INTERCHANGE, RESHARE_REFUSED */
function membershipOf(version: unknown, old: Cluster, source: string): number {
  if (typeof version !== 'number' || !Number.isInteger(version) || version < 0 || version > MAX_MEMBERSHIP_VERSION)
    throw new QuorumFenceError('BAD_INTERCHANGE', `${source}: "membershipVersion" expected 0..2^32-1`, { source });
  if (version !== old.membershipVersion)
    throw new QuorumFenceError(
      'RESHARE_REFUSED',
      `${source}: exported under membership ${version}, but the old cluster is membership ${old.membershipVersion}`,
      { source },
    );
  return version;
}

/** @throws QuorumFenceError EXPORT_SIGNATURE_INVALID for anything but a canonical G2 point */
function signatureOf(field: unknown, old: Cluster, source: string) {
  try {
    return old.backend.decodeSignature(fromHex(field, SIGNATURE_BYTES, 'signature'), 'signature');
  } catch (error) {
    throw new QuorumFenceError('EXPORT_SIGNATURE_INVALID', `${source}: ${(error as Error).message}`, { source });
  }
}
