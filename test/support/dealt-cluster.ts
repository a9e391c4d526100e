/**
 * A dealt cluster for tests that need keys but no processes: the public
 * Cluster plus every replica's secret key, made with the real dealer.
 */
import { parseCluster, describeDealtKey, localEndpoints, type Cluster } from '../../src/cluster/description.js';
import type { BlsBackend, SecretKey, Signature } from '../../src/crypto/backend.js';
import { seededRandom, systemRandom } from '../../src/crypto/random.js';
import { dealKey, type DealtKey } from '../../src/crypto/threshold.js';
import { OPEN_ACCESS } from '../../src/replica/access.js';
import type { PolicyConfig } from '../../src/replica/policy.js';
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

/**
 * The replica rules' parameters for a test over `cluster`: f = 1, open access, ttls from 10 ms to a minute, a free
 * epoch step of 8 and a largest of 100; `changes` replaces any of them.
 */
export function testPolicy(cluster: Cluster, changes: Partial<PolicyConfig> = {}): PolicyConfig {
  return {
    clusterId: cluster.id,
    minTtlMs: 10,
    maxTtlMs: 60_000,
    freeEpochStep: 8n,
    maxEpochStep: 100n,
    faultTolerance: 1,
    access: OPEN_ACCESS,
    ...changes,
  };
}
