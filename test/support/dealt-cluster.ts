/**
 * A dealt cluster for tests that need keys but no processes: the public
 * Cluster plus every replica's secret key, made with the real dealer.
 */
import { parseCluster, describeDealtKey, localEndpoints, type Cluster } from '../../src/cluster/description.js';
import type { BlsBackend, SecretKey, Signature } from '../../src/crypto/backend.js';
import { seededRandom, systemRandom } from '../../src/crypto/random.js';
import { dealKey, type DealtKey } from '../../src/crypto/threshold.js';
import { grantMessage, type Grant } from '../../src/token/grant.js';

export interface DealtCluster {
  readonly cluster: Cluster;
  readonly key: DealtKey;
  /** secretKeys[i - 1] is replica i's scaled share. */
  readonly secretKeys: readonly SecretKey[];
  /** Replica i's partial signature on a grant. */
  partial(index: number, grant: Grant): Signature;
}

export function dealCluster(n: number, backend: BlsBackend, seed?: Uint8Array): DealtCluster {
  const key = dealKey(n, 2 * ((n - 1) / 3) + 1, seed ? seededRandom(seed) : systemRandom);
  const cluster = parseCluster(describeDealtKey(key, localEndpoints(n)), { backend });
  const secretKeys = key.shares.map((s) => backend.secretKeyFromBytes(s.scaledSecretShare));
  return {
    cluster,
    key,
    secretKeys,
    partial: (index, grant) => backend.sign(secretKeys[index - 1]!, grantMessage(grant)),
  };
}
