/**
 * The crypto floor: per-operation medians for both backends. Everything else
 * the benchmark reports is compared against these figures from the same run.
 */
import type { BackendName, BlsBackend } from '../crypto/backend.js';
import { loadBackend } from '../crypto/load.js';
import { seededRandom } from '../crypto/random.js';
import { combinePartials, dealKey } from '../crypto/threshold.js';
import { describeDealtKey, localEndpoints, parseCluster } from '../cluster/description.js';
import { checkToken, encodeToken } from '../token/admission-token.js';
import { grantMessage, makeGrant } from '../token/grant.js';
import { timeSync, type BenchSize, type Timing } from './measure.js';

export interface CryptoFigures {
  backend: BackendName;
  signMs: Timing;
  verifyPartialMs: Timing;
  /** Decode (with subgroup check) + one pairing check, as a guard does on first use. */
  verifyTokenMs: Timing;
  /** Keyed by t. */
  combineMs: Record<string, Timing>;
  /**
   * Per token, keyed by batch size k: one `verifyAll` of k tokens (distinct grants) divided by k, the pairings
   * alone (tokens decoded beforehand). What a client or guard pays per token when k checks arrive together.
   */
  verifyTokenBatchMs: Record<string, Timing>;
}

/** The batch sizes `bench crypto` times; MAX_VERIFY_BATCH (src/crypto/verify-batch.ts) is the largest used. */
export const VERIFY_BATCH_SIZES = [1, 2, 4, 8, 16] as const;

/**
 * Times each operation with `backendName`; `thresholds` are the t to combine for (the first one's cluster also
 * times sign and verify), `batchSizes` the batches of tokens to verify at once.
 */
export function benchCrypto(
  backendName: BackendName,
  options: { size?: BenchSize; thresholds?: readonly number[]; batchSizes?: readonly number[] } = {},
): CryptoFigures {
  const backend: BlsBackend = loadBackend(backendName);
  const slow = backendName === 'noble';
  const size = options.size ?? 'full';
  // A smoke run times each operation twice after one warm-up call: enough to run every step.
  const budget =
    size === 'smoke'
      ? { minIterations: 2, maxIterations: 2, warmup: 1 }
      : {
          budgetMs: (size === 'quick' ? 300 : 1500) * (slow ? 2 : 1),
          minIterations: slow ? 3 : 20,
          warmup: slow ? 1 : 10,
        };
  const batchSizes = options.batchSizes ?? VERIFY_BATCH_SIZES;
  const combineMs: Record<string, Timing> = {};
  let first: Omit<CryptoFigures, 'combineMs' | 'backend' | 'verifyTokenBatchMs'> | undefined;
  const verifyTokenBatchMs: Record<string, Timing> = {};

  for (const t of options.thresholds ?? [3, 7, 21]) {
    const n = (3 * t - 1) / 2; // t = 2f+1, n = 3f+1
    const key = dealKey(n, t, seededRandom(new Uint8Array([n])));
    const cluster = parseCluster(describeDealtKey(key, localEndpoints(n)), { backend });
    const grant = makeGrant({
      clusterId: cluster.id,
      resource: 'bench/resource',
      epoch: 42n,
      holder: new Uint8Array(32).fill(7),
    });
    const message = grantMessage(grant);
    const secretKeys = key.shares.map((s) => backend.secretKeyFromBytes(s.scaledSecretShare));
    const partials = secretKeys.map((sk, k) => ({ index: k + 1, signature: backend.sign(sk, message) }));
    // Rotate through different signer sets so the coefficient cache is exercised as a client would.
    const sets = Array.from({ length: Math.min(n, 8) }, (_, r) =>
      partials.slice(r).concat(partials.slice(0, r)).slice(0, t),
    );
    let round = 0;
    combineMs[t] = timeSync(() => combinePartials(backend, n, sets[round++ % sets.length]!), budget);

    if (!first) {
      const signature = combinePartials(backend, n, partials.slice(0, t))!;
      const token = encodeToken(grant, signature);
      first = {
        signMs: timeSync(() => backend.sign(secretKeys[0]!, message), budget),
        verifyPartialMs: timeSync(
          () => backend.verify(cluster.replicas[0]!.publicKeyShare, message, partials[0]!.signature),
          budget,
        ),
        verifyTokenMs: timeSync(() => checkToken(token.bytes, cluster), budget),
      };
      const groupKey = cluster.groupPublicKey;
      const tokenSets = Array.from({ length: Math.max(...batchSizes) }, (_, k) => {
        const other = makeGrant({ ...grant, epoch: BigInt(100 + k) });
        const otherMessage = grantMessage(other);
        const shares = partials
          .slice(0, t)
          .map((p, i) => ({ index: p.index, signature: backend.sign(secretKeys[i]!, otherMessage) }));
        return { publicKey: groupKey, message: otherMessage, signature: combinePartials(backend, n, shares)! };
      });
      for (const k of batchSizes) {
        const batch = tokenSets.slice(0, k);
        const whole = timeSync(() => {
          if (!backend.verifyAll(batch)) throw new Error('bench: a batch of valid tokens did not verify');
        }, budget);
        verifyTokenBatchMs[k] = {
          ...whole,
          median: whole.median / k,
          p99: whole.p99 / k,
          mean: whole.mean / k,
          ...(whole.cpuMean === undefined ? {} : { cpuMean: whole.cpuMean / k }),
        };
      }
    }
  }
  return { backend: backendName, ...first!, combineMs, verifyTokenBatchMs };
}
