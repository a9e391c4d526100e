/**
 * The signing-record interchange: a versioned JSON file holding, for every
 * resource, the highest epoch this replica signed, the holder, and the grant
 * digest. For audits, backups and moving a replica (the idea of EIP-3076's
 * slashing-protection interchange). The format is documented in README.md.
 *
 * Import only ever raises watermarks and the floor: see SigningRecord.raiseFrom.
 *
 * Format v3 is the same record signed by the replica's key share once it is
 * frozen, for `reshare inherit` (src/replica/frozen-export.ts); this module
 * reads its record part like v2's, for `replica import`.
 */
import { QuorumFenceError } from '../common/errors.js';
import { bytesEqual, fromHex, toHex } from '../common/bytes.js';
import { describe, expectResource } from '../common/check.js';
import { MAX_EPOCH, MAX_REPLICAS, MIN_EPOCH } from '../common/limits.js';
import { grantDigest } from '../token/grant.js';
import type { RecordEntry, SigningRecord } from './signing-record.js';

export const INTERCHANGE_FORMAT = 'quorumfence/signing-record/v2';
/** Files written before compaction existed: no floor (read as 0). */
export const INTERCHANGE_FORMAT_V1 = 'quorumfence/signing-record/v1';
/** A frozen record signed by its replica's share (frozen-export.ts): v2's fields and its signature. */
export const INTERCHANGE_FORMAT_SIGNED = 'quorumfence/signing-record/v3';
const FORMATS: readonly unknown[] = [INTERCHANGE_FORMAT_V1, INTERCHANGE_FORMAT, INTERCHANGE_FORMAT_SIGNED];

export interface InterchangeEntryJson {
  resource: string;
  /** Decimal string: JSON numbers cannot hold every u63. */
  epoch: string;
  holder: string;
  grantDigest: string;
}

export interface InterchangeJson {
  format: typeof INTERCHANGE_FORMAT;
  clusterId: string;
  replica: number;
  /** The store's epoch floor (decimal string): every resource without an entry counts as signed up to it. */
  floor: string;
  entries: InterchangeEntryJson[];
}

/** The whole record as an interchange document (resource order, UTF-8 byte order). */
export function exportInterchange(store: SigningRecord): InterchangeJson {
  const entries: InterchangeEntryJson[] = [];
  for (const { resource, record } of store.entries()) {
    entries.push({
      resource,
      epoch: record.epoch.toString(),
      holder: toHex(record.holder),
      grantDigest: toHex(record.grantDigest),
    });
  }
  return {
    format: INTERCHANGE_FORMAT,
    clusterId: toHex(store.identity.clusterId),
    replica: store.identity.replicaIndex,
    floor: store.floor.toString(),
    entries,
  };
}

function bad(field: string, message: string): never {
  throw new QuorumFenceError('BAD_INTERCHANGE', `interchange: "${field}" ${message}`, { field });
}

/**
 * Checks an interchange document against the cluster it is imported into:
 * format, cluster id, every entry's fields, each digest recomputed from its
 * grant, and strictly increasing resource order (no duplicates). A v3 file's
 * signature is not checked here (readFrozenExport does that).
 * @throws QuorumFenceError BAD_INTERCHANGE (naming the field), UNKNOWN_VERSION, CLUSTER_MISMATCH
 */
export function parseInterchange(
  json: unknown,
  clusterId: Uint8Array,
): { replica: number; floor: bigint; entries: RecordEntry[] } {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) bad('(root)', 'expected a JSON object');
  const d = json as Record<string, unknown>;
  if (!FORMATS.includes(d.format)) {
    throw new QuorumFenceError(
      'UNKNOWN_VERSION',
      `interchange: "format" expected "${INTERCHANGE_FORMAT}" (or v1, v3), got ${JSON.stringify(d.format)?.slice(0, 60)}`,
    );
  }
  expectSameCluster(d.clusterId, clusterId);
  if (typeof d.replica !== 'number' || !Number.isInteger(d.replica) || d.replica < 1 || d.replica > MAX_REPLICAS)
    bad('replica', `expected a replica index 1..${MAX_REPLICAS}, got ${describe(d.replica)}`);
  // v1 predates compaction: its floor is 0.
  const floor = d.format === INTERCHANGE_FORMAT_V1 ? 0n : parseFloor(d.floor);
  if (!Array.isArray(d.entries)) bad('entries', `expected an array, got ${describe(d.entries)}`);
  const entries: RecordEntry[] = [];
  let previousKey: Buffer | undefined;
  d.entries.forEach((raw: unknown, k) => {
    const entry = parseEntry(raw, `entries[${k}]`, clusterId);
    const key = Buffer.from(entry.resource, 'utf8');
    if (previousKey && Buffer.compare(previousKey, key) >= 0)
      bad(`entries[${k}].resource`, 'entries must be in strictly increasing resource order, without duplicates');
    previousKey = key;
    entries.push(entry);
  });
  return { replica: d.replica, floor, entries };
}

/** @throws QuorumFenceError BAD_INTERCHANGE (not 32 bytes of hex), CLUSTER_MISMATCH (another cluster's file) */
function expectSameCluster(field: unknown, clusterId: Uint8Array): void {
  let fileCluster: Uint8Array;
  try {
    fileCluster = fromHex(field, 32, 'clusterId');
  } catch {
    bad('clusterId', 'expected 32 bytes of lowercase hex');
  }
  if (!bytesEqual(fileCluster, clusterId)) {
    throw new QuorumFenceError(
      'CLUSTER_MISMATCH',
      `interchange file is from cluster ${toHex(fileCluster).slice(0, 16)}…, not this cluster ${toHex(clusterId).slice(0, 16)}…; nothing was imported`,
    );
  }
}

function parseFloor(field: unknown): bigint {
  if (typeof field !== 'string' || !/^(0|[1-9][0-9]{0,18})$/.test(field))
    bad('floor', 'expected a decimal string without leading zeros');
  const floor = BigInt(field);
  if (floor > MAX_EPOCH) bad('floor', 'expected 0 .. 2^63-1');
  return floor;
}

/** One entry, its digest recomputed from its grant. @throws QuorumFenceError BAD_INTERCHANGE naming `field` */
function parseEntry(raw: unknown, field: string, clusterId: Uint8Array): RecordEntry {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) bad(field, 'expected an object');
  const e = raw as Record<string, unknown>;
  try {
    expectResource(e.resource, `${field}.resource`);
  } catch (error) {
    bad(`${field}.resource`, `is not a valid resource name (${(error as QuorumFenceError).code})`);
  }
  const resource = e.resource as string;
  if (typeof e.epoch !== 'string' || !/^[1-9][0-9]{0,18}$/.test(e.epoch))
    bad(`${field}.epoch`, 'expected a decimal string without leading zeros');
  const epoch = BigInt(e.epoch);
  if (epoch < MIN_EPOCH || epoch > MAX_EPOCH) bad(`${field}.epoch`, 'expected 1 .. 2^63-1');
  let holder: Uint8Array;
  let digest: Uint8Array;
  try {
    holder = fromHex(e.holder, 32, `${field}.holder`);
    digest = fromHex(e.grantDigest, 32, `${field}.grantDigest`);
  } catch (error) {
    bad(field, (error as Error).message);
  }
  if (!bytesEqual(digest, grantDigest({ clusterId, resource, epoch, holder })))
    bad(`${field}.grantDigest`, 'does not match the grant (cluster, resource, epoch, holder)');
  return { resource, record: { epoch, holder, grantDigest: digest } };
}
