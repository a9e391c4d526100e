/**
 * A client core's environment for unit tests: the options a test call runs with (short waits, a fixed "random"),
 * over a cluster and backend the test dealt, with an evidence log of its own.
 */
import type { CoreEnv } from '../../src/client/core/env.js';
import { EvidenceLog } from '../../src/client/evidence.js';
import type { Cluster } from '../../src/cluster/description.js';
import type { BlsBackend } from '../../src/crypto/backend.js';

export function testCoreEnv(cluster: Cluster, backend: BlsBackend, holder: Uint8Array): CoreEnv {
  return {
    cluster,
    holder,
    options: {
      requestTimeoutMs: 1_000,
      stragglerMinMs: 20,
      maxEpochStep: 128n,
      retryBaseMs: 2,
      retryMaxMs: 250,
      busyPollMs: 50,
    },
    random: () => 0.5,
    grantLatency: undefined,
    partials: { cluster, backend, evidence: new EvidenceLog() },
  };
}
