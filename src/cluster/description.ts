/**
 * The public cluster description: format, sizes, group key, commitments,
 * scaled key shares, endpoints, and the cluster id that binds them.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { QuorumFenceError } from '../common/errors.js';
import { concatBytes, fromHex, toHex, u16be } from '../common/bytes.js';
import { describe } from '../common/check.js';
import { readJsonFile } from '../common/files.js';
import { MAX_MEMBERSHIP_VERSION, MAX_REPLICAS, MIN_REPLICAS } from '../common/limits.js';
import {
  PUBLIC_KEY_BYTES,
  SIGNATURE_BYTES,
  type BlsBackend,
  type PublicKey,
  type Signature,
} from '../crypto/backend.js';
import { loadBackend } from '../crypto/load.js';
import { sharesNotMatchingCommitments, type DealtKey } from '../crypto/threshold.js';

import { checkCeremonyRecord } from './ceremony-record.js';
import { CLUSTER_FORMAT, clusterIdOfKey } from './cluster-id.js';

export { CLUSTER_FORMAT, clusterIdOfKey };
/** v1 descriptions (id over n, t, key, shares and commitments) are still read, with their v1 id. */
export const CLUSTER_FORMAT_V1 = 'quorumfence/cluster/v1';
export type ClusterFormat = typeof CLUSTER_FORMAT | typeof CLUSTER_FORMAT_V1;

/** The JSON form, as written to `cluster.json`. */
export interface ClusterDescriptionJson {
  format: ClusterFormat;
  n: number;
  f: number;
  t: number;
  groupPublicKey: string;
  commitments: string[];
  replicas: { index: number; publicKeyShare: string; endpoint: string }[];
  clusterId: string;
  /** Which membership of the cluster this is; absent means 0. A reshare writes the old one's plus 1. */
  membershipVersion?: number;
  /** The group key's signature over this membership (src/cluster/membership.ts); absent until endorsed. */
  endorsement?: string;
}

export interface ReplicaInfo {
  /** 1..n */
  readonly index: number;
  readonly publicKeyShare: PublicKey;
  /** ws:// or wss:// URL; not part of the cluster id. */
  readonly endpoint: string;
}

export interface Cluster {
  readonly n: number;
  readonly f: number;
  readonly t: number;
  /** SHA-256 of the canonical description without endpoints. */
  readonly id: Uint8Array;
  readonly idHex: string;
  readonly groupPublicKey: PublicKey;
  /** Compressed G1 Feldman commitments; commitments[0] is the group key. */
  readonly commitments: readonly Uint8Array[];
  /** In index order: replicas[i - 1].index === i. */
  readonly replicas: readonly ReplicaInfo[];
  /** The description format, which decides how the id is computed. */
  readonly format: ClusterFormat;
  /** The backend that decoded the points, used for every operation on this cluster. */
  readonly backend: BlsBackend;
  /** Which membership this is (0 when the file has none); not part of the id. */
  readonly membershipVersion: number;
  /**
   * The group key's signature over this membership, as the file carries it; checked only by
   * followMembership (src/cluster/membership.ts), since the replicas and guards do not need it.
   */
  readonly endorsement: Signature | undefined;
}

/**
 * The v1 cluster id (read-only format):
 * SHA-256("quorumfence/cluster/v1" ‖ u16 n ‖ u16 t ‖ groupPublicKey ‖ shares… ‖ commitments…).
 */
export function computeClusterIdV1(
  n: number,
  t: number,
  groupPublicKey: Uint8Array,
  publicKeyShares: readonly Uint8Array[],
  commitments: readonly Uint8Array[],
): Uint8Array {
  return sha256(
    concatBytes(
      new TextEncoder().encode(CLUSTER_FORMAT_V1),
      u16be(n),
      u16be(t),
      groupPublicKey,
      ...publicKeyShares,
      ...commitments,
    ),
  );
}

function bad(field: string, message: string): never {
  throw new QuorumFenceError('BAD_CLUSTER', `cluster description: "${field}" ${message}`, { field });
}

/**
 * Checks an endpoint URL: ws or wss, with a host.
 * @throws QuorumFenceError BAD_CLUSTER naming the field.
 */
export function checkEndpoint(value: unknown, field: string): string {
  if (typeof value !== 'string') bad(field, `expected a ws:// or wss:// URL, got ${describe(value)}`);
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    bad(field, `is not a URL: ${JSON.stringify(value.slice(0, 100))}`);
  }
  if (url.protocol !== 'ws:' && url.protocol !== 'wss:') bad(field, `must use ws:// or wss://, got ${url.protocol}`);
  if (!url.hostname) bad(field, 'has no host');
  return value;
}

function decodeEndorsement(backend: BlsBackend, hex: unknown): Signature | undefined {
  if (hex === undefined) return undefined;
  try {
    return backend.decodeSignature(fromHex(hex, SIGNATURE_BYTES, 'endorsement'), 'endorsement');
  } catch (error) {
    if (error instanceof QuorumFenceError)
      bad('endorsement', `${error.message.replace('"endorsement" ', '')} (${error.code})`);
    throw error;
  }
}

function decodePoint(backend: BlsBackend, hex: unknown, field: string): PublicKey {
  try {
    return backend.decodePublicKey(fromHex(hex, PUBLIC_KEY_BYTES, field), field);
  } catch (error) {
    if (error instanceof QuorumFenceError) bad(field, `${error.message.replace(`"${field}" `, '')} (${error.code})`);
    throw error;
  }
}

/**
 * Parses and checks a cluster description: format, n = 3f+1, t = 2f+1, every
 * point, commitments[0] = group key, every share against the commitments,
 * endpoints, the recomputed cluster id, and a key ceremony's `ceremony` block
 * when there is one (src/cluster/ceremony-record.ts).
 * @throws QuorumFenceError BAD_CLUSTER (message names the field), UNKNOWN_VERSION, CLUSTER_MISMATCH
 */
export function parseCluster(json: unknown, options: { backend?: BlsBackend } = {}): Cluster {
  const backend = options.backend ?? loadBackend();
  if (typeof json !== 'object' || json === null || Array.isArray(json)) bad('(root)', 'expected a JSON object');
  const d = json as Record<string, unknown>;
  if (d.format !== CLUSTER_FORMAT && d.format !== CLUSTER_FORMAT_V1) {
    throw new QuorumFenceError(
      'UNKNOWN_VERSION',
      `cluster description: "format" expected "${CLUSTER_FORMAT}" (or "${CLUSTER_FORMAT_V1}"), got ${JSON.stringify(d.format)}`,
      {
        field: 'format',
      },
    );
  }
  const { n, f, t } = d;
  if (typeof f !== 'number' || !Number.isInteger(f) || f < 1)
    bad('f', `expected an integer >= 1, got ${JSON.stringify(f)}`);
  if (n !== 3 * f + 1) bad('n', `expected 3f+1 = ${3 * f + 1}, got ${JSON.stringify(n)}`);
  if (n < MIN_REPLICAS || n > MAX_REPLICAS) bad('n', `expected ${MIN_REPLICAS}..${MAX_REPLICAS}, got ${n}`);
  if (t !== 2 * f + 1) bad('t', `expected 2f+1 = ${2 * f + 1}, got ${JSON.stringify(t)}`);

  const groupPublicKey = decodePoint(backend, d.groupPublicKey, 'groupPublicKey');
  if (!Array.isArray(d.commitments)) bad('commitments', 'expected an array of hex G1 points');
  if (d.commitments.length !== t) bad('commitments', `expected t = ${t} entries, got ${d.commitments.length}`);
  const commitments = d.commitments.map((c, k) => decodePoint(backend, c, `commitments[${k}]`).bytes);
  if (d.commitments[0] !== d.groupPublicKey) bad('commitments[0]', 'must equal groupPublicKey');

  if (!Array.isArray(d.replicas)) bad('replicas', 'expected an array');
  if (d.replicas.length !== n) bad('replicas', `expected n = ${n} entries, got ${d.replicas.length}`);
  const replicas: ReplicaInfo[] = d.replicas.map((entry: unknown, position) => {
    const field = `replicas[${position}]`;
    if (typeof entry !== 'object' || entry === null) bad(field, 'expected an object');
    const r = entry as Record<string, unknown>;
    if (r.index !== position + 1)
      bad(`${field}.index`, `expected ${position + 1} (replicas in index order), got ${JSON.stringify(r.index)}`);
    return {
      index: position + 1,
      publicKeyShare: decodePoint(backend, r.publicKeyShare, `${field}.publicKeyShare`),
      endpoint: checkEndpoint(r.endpoint, `${field}.endpoint`),
    };
  });

  const mismatched = sharesNotMatchingCommitments(
    n,
    replicas.map((r) => r.publicKeyShare.bytes),
    commitments,
  );
  if (mismatched.length > 0) {
    bad(
      `replicas[${mismatched[0]! - 1}].publicKeyShare`,
      `does not match the commitments (replicas ${mismatched.join(', ')})`,
    );
  }

  const membershipVersion = d.membershipVersion ?? 0;
  if (
    typeof membershipVersion !== 'number' ||
    !Number.isInteger(membershipVersion) ||
    membershipVersion < 0 ||
    membershipVersion > MAX_MEMBERSHIP_VERSION
  )
    bad(
      'membershipVersion',
      `expected an integer in 0..${MAX_MEMBERSHIP_VERSION}, got ${JSON.stringify(d.membershipVersion)}`,
    );
  const endorsement = decodeEndorsement(backend, d.endorsement);

  const format: ClusterFormat = d.format;
  const id =
    format === CLUSTER_FORMAT
      ? clusterIdOfKey(groupPublicKey.bytes)
      : computeClusterIdV1(
          n,
          t,
          groupPublicKey.bytes,
          replicas.map((r) => r.publicKeyShare.bytes),
          commitments,
        );
  const idHex = toHex(id);
  if (d.clusterId !== idHex) {
    throw new QuorumFenceError(
      'CLUSTER_MISMATCH',
      `cluster description: "clusterId" does not match its contents (computed ${idHex})`,
      {
        field: 'clusterId',
      },
    );
  }
  // A key ceremony's (or reshare's) record, when the file carries one: its confirmations must hold.
  if (d.ceremony !== undefined) checkCeremonyRecord(d.ceremony, { id, n, t });
  return {
    n,
    f,
    t,
    id,
    idHex,
    groupPublicKey,
    commitments,
    replicas,
    format,
    backend,
    membershipVersion,
    endorsement,
  };
}

/**
 * Reads and parses a cluster.json.
 * @throws QuorumFenceError IO_ERROR when unreadable, BAD_CLUSTER when not JSON, and everything parseCluster throws.
 */
export function loadClusterFile(path: string, options: { backend?: BlsBackend } = {}): Cluster {
  return parseCluster(readJsonFile(path, 'cluster description', 'BAD_CLUSTER'), options);
}

/** The JSON form of a cluster, canonical field order. */
export function clusterToJson(cluster: Cluster): ClusterDescriptionJson {
  return {
    format: cluster.format,
    n: cluster.n,
    f: cluster.f,
    t: cluster.t,
    groupPublicKey: toHex(cluster.groupPublicKey.bytes),
    commitments: cluster.commitments.map(toHex),
    replicas: cluster.replicas.map((r) => ({
      index: r.index,
      publicKeyShare: toHex(r.publicKeyShare.bytes),
      endpoint: r.endpoint,
    })),
    clusterId: cluster.idHex,
    // Written only when there is one, so a description of membership 0 reads as before this field existed.
    ...(cluster.membershipVersion > 0 ? { membershipVersion: cluster.membershipVersion } : {}),
    ...(cluster.endorsement ? { endorsement: toHex(cluster.endorsement.bytes) } : {}),
  };
}

/** The description of a freshly dealt key (no secrets in it). */
export function describeDealtKey(key: DealtKey, endpoints: readonly string[]): ClusterDescriptionJson {
  if (endpoints.length !== key.n) {
    throw new QuorumFenceError('INVALID_ARGUMENT', `expected ${key.n} endpoints, got ${endpoints.length}`);
  }
  return {
    format: CLUSTER_FORMAT,
    n: key.n,
    f: (key.n - 1) / 3,
    t: key.t,
    groupPublicKey: toHex(key.commitments[0]!),
    commitments: key.commitments.map(toHex),
    replicas: key.shares.map((s, k) => ({
      index: s.index,
      publicKeyShare: toHex(s.publicKeyShare),
      endpoint: endpoints[k]!,
    })),
    clusterId: toHex(clusterIdOfKey(key.commitments[0]!)),
  };
}

/**
 * The same cluster with replicas at other endpoints; the id, and so every token, is unchanged. The
 * endorsement is dropped: it signed the old endpoints.
 */
export function withEndpoints(cluster: Cluster, endpoints: readonly string[]): Cluster {
  if (endpoints.length !== cluster.n) {
    throw new QuorumFenceError('INVALID_ARGUMENT', `expected ${cluster.n} endpoints, got ${endpoints.length}`);
  }
  return {
    ...cluster,
    replicas: cluster.replicas.map((r, k) => ({ ...r, endpoint: checkEndpoint(endpoints[k], `endpoints[${k}]`) })),
    endorsement: undefined,
  };
}

/** Default endpoints for a local cluster: ws://127.0.0.1:<basePort + i - 1>. */
export function localEndpoints(n: number, basePort = 7101, host = '127.0.0.1'): string[] {
  return Array.from({ length: n }, (_, k) => `ws://${host}:${basePort + k}`);
}
