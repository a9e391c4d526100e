/**
 * Admission tokens without replicas: deal a cluster key, sign a grant with t
 * shares, combine, encode. For tests of anything that consumes tokens
 * (guards, the resource, the checker). Also holder identities (Ed25519) and
 * the cluster.json a spawned process needs.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { ed25519 } from '@noble/curves/ed25519.js';
import { writeFileDurably } from '../../src/common/files.js';
import { toHex } from '../../src/common/bytes.js';
import { clusterToJson, type Cluster, type ClusterDescriptionJson } from '../../src/cluster/description.js';
import type { BlsBackend } from '../../src/crypto/backend.js';
import { loadBackend } from '../../src/crypto/load.js';
import { combinePartials } from '../../src/crypto/threshold.js';
import { encodeToken, tokenToText, type AdmissionToken } from '../../src/token/admission-token.js';
import type { Grant } from '../../src/token/grant.js';
import { dealCluster, type DealtCluster } from './dealt-cluster.js';

/** An Ed25519 key pair standing in for a client identity. */
export interface TestHolder {
  readonly publicKey: Uint8Array;
  readonly secretKey: Uint8Array;
  sign(message: Uint8Array): Uint8Array;
}

export function makeHolder(secretKey: Uint8Array = ed25519.utils.randomSecretKey()): TestHolder {
  const secret = secretKey.slice();
  return {
    publicKey: ed25519.getPublicKey(secret),
    secretKey: secret,
    sign: (message) => ed25519.sign(message, secret),
  };
}

export interface TokenFields {
  readonly resource: string;
  readonly epoch: bigint | number;
  /** Default: the factory's default holder. */
  readonly holder?: TestHolder | Uint8Array;
}

export interface TokenFactory {
  readonly cluster: Cluster;
  readonly dealt: DealtCluster;
  readonly clusterJson: ClusterDescriptionJson;
  /** The holder used when a token names none. */
  readonly holder: TestHolder;
  /** A valid token: the grant signed by replicas 1..t and combined. Memoised (BLS is deterministic anyway). */
  issue(fields: TokenFields): AdmissionToken;
  /** The same, as text. */
  issueText(fields: TokenFields): string;
  /** A token signed by the given replica indices only (fewer than t makes an invalid one). */
  issueWithSigners(fields: TokenFields, signers: readonly number[]): AdmissionToken;
  /** Writes `cluster.json` into `dir` (created if missing) and returns its path. */
  writeClusterFile(dir: string): string;
}

export interface TokenFactoryOptions {
  /** Replicas, 3f+1. Default 4. */
  readonly n?: number;
  readonly backend?: BlsBackend;
  /** Deterministic keys from this seed; default fresh random keys. */
  readonly seed?: Uint8Array;
}

function grantOf(cluster: Cluster, fields: TokenFields, fallback: TestHolder): Grant {
  const holder =
    fields.holder === undefined
      ? fallback.publicKey
      : fields.holder instanceof Uint8Array
        ? fields.holder
        : fields.holder.publicKey;
  return { clusterId: cluster.id, resource: fields.resource, epoch: BigInt(fields.epoch), holder };
}

export function makeTokenFactory(options: TokenFactoryOptions = {}): TokenFactory {
  const backend = options.backend ?? loadBackend();
  const n = options.n ?? 4;
  const dealt = dealCluster(n, backend, options.seed);
  const { cluster } = dealt;
  const holder = makeHolder();
  const memo = new Map<string, AdmissionToken>();

  const issueWithSigners = (fields: TokenFields, signers: readonly number[]): AdmissionToken => {
    const grant = grantOf(cluster, fields, holder);
    const partials = signers.map((index) => ({ index, signature: dealt.partial(index, grant) }));
    const signature = combinePartials(backend, n, partials);
    if (!signature) throw new Error('combined signature is the identity');
    return encodeToken(grant, signature);
  };

  const issue = (fields: TokenFields): AdmissionToken => {
    const grant = grantOf(cluster, fields, holder);
    const id = `${grant.resource}\u0000${grant.epoch}\u0000${toHex(grant.holder)}`;
    let token = memo.get(id);
    if (!token) {
      token = issueWithSigners(
        fields,
        Array.from({ length: cluster.t }, (_, k) => k + 1),
      );
      memo.set(id, token);
    }
    return token;
  };

  return {
    cluster,
    dealt,
    clusterJson: clusterToJson(cluster),
    holder,
    issue,
    issueText: (fields) => tokenToText(issue(fields)),
    issueWithSigners,
    writeClusterFile(dir) {
      mkdirSync(dir, { recursive: true });
      const path = join(dir, 'cluster.json');
      writeFileDurably(path, JSON.stringify(clusterToJson(cluster), null, 2) + '\n');
      return path;
    },
  };
}
