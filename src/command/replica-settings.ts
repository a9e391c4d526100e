/**
 * The replica's run flags and what they load, shared by the operator's `quorumfence replica` and the
 * development tools' Byzantine replica, so both start from one reading of the same flags.
 */
import { resolve } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { DEFAULT_MAX_EPOCH_STEP } from '../common/limits.js';
import { readJsonFile } from '../common/files.js';
import { readOperatorSecret } from '../common/operator-secret.js';
import { parseCluster } from '../cluster/description.js';
import { parseReplicaKey } from '../cluster/replica-key.js';
import { loadAccessRules } from '../replica/access.js';
import { DEFAULT_REPLICA_LIMITS } from '../replica/options.js';
import { integerFlag, parseDuration, parseListen, required } from './args.js';

const d = DEFAULT_REPLICA_LIMITS;

/** The run flags a replica process takes (the Byzantine replica takes them too, but TLS). */
export const REPLICA_RUN_FLAGS = {
  cluster: { type: 'string' },
  key: { type: 'string' },
  data: { type: 'string' },
  listen: { type: 'string' },
  config: { type: 'string' },
  'signing-workers': { type: 'string' },
  'min-ttl': { type: 'string' },
  'max-ttl': { type: 'string' },
  'max-in-flight': { type: 'string' },
  'rate-limit': { type: 'string' },
  'leases-rate-limit': { type: 'string' },
  'max-connections': { type: 'string' },
  'max-unauthenticated-per-address': { type: 'string' },
  'max-unauthenticated': { type: 'string' },
  retention: { type: 'string' },
  'compaction-interval': { type: 'string' },
  'free-epoch-step': { type: 'string' },
  'max-epoch-step': { type: 'string' },
  'operator-secret-file': { type: 'string' },
} as const;

type RunFlagValues = { readonly [K in keyof typeof REPLICA_RUN_FLAGS]?: string | undefined };

/**
 * Checks the run flags and loads what they name: the cluster description, the
 * key file (checked against the cluster's public share, itself checked
 * against the commitments), the access rules. The signing record is probed
 * separately, in a child process, by the caller.
 * @throws QuorumFenceError INVALID_OPTION, IO_ERROR, BAD_CLUSTER, BAD_KEY_FILE, SHARE_MISMATCH, CLUSTER_MISMATCH, UNKNOWN_VERSION
 */
export function loadReplicaRunSettings(values: RunFlagValues) {
  const clusterPath = resolve(required(values.cluster, 'cluster'));
  const keyPath = resolve(required(values.key, 'key'));
  const settings = {
    dataDir: resolve(required(values.data, 'data')),
    listen: parseListen(values.listen, 'listen', { host: '127.0.0.1', port: 0 }),
    /** False: `listen` is a stand-in, and the replica listens on its endpoint (endpoint-listen.ts). */
    listenGiven: values.listen !== undefined,
    limits: {
      signingWorkers: integerFlag(values['signing-workers'], 'signing-workers', d.signingWorkers, 0, 64),
      minTtlMs: parseDuration(values['min-ttl'], 'min-ttl', d.minTtlMs),
      maxTtlMs: parseDuration(values['max-ttl'], 'max-ttl', d.maxTtlMs),
      maxInFlightPerConnection: integerFlag(values['max-in-flight'], 'max-in-flight', d.maxInFlightPerConnection),
      requestsPerSecondPerConnection: integerFlag(values['rate-limit'], 'rate-limit', d.requestsPerSecondPerConnection),
      burstPerConnection: integerFlag(values['rate-limit'], 'rate-limit', d.burstPerConnection),
      leasesPerSecondPerConnection: integerFlag(
        values['leases-rate-limit'],
        'leases-rate-limit',
        d.leasesPerSecondPerConnection,
      ),
      maxConnections: integerFlag(values['max-connections'], 'max-connections', d.maxConnections),
      maxUnauthenticatedPerAddress: integerFlag(
        values['max-unauthenticated-per-address'],
        'max-unauthenticated-per-address',
        d.maxUnauthenticatedPerAddress,
      ),
      maxUnauthenticated: integerFlag(values['max-unauthenticated'], 'max-unauthenticated', d.maxUnauthenticated),
      retentionMs: parseDuration(values.retention, 'retention', d.retentionMs),
      compactionIntervalMs: parseDuration(values['compaction-interval'], 'compaction-interval', d.compactionIntervalMs),
      freeEpochStep: epochStepFlag(values['free-epoch-step'], 'free-epoch-step', d.freeEpochStep),
      maxEpochStep: epochStepFlag(values['max-epoch-step'], 'max-epoch-step', d.maxEpochStep),
    },
    access: values.config ? loadAccessRules(resolve(values.config)) : undefined,
    operatorSecret: readOperatorSecret(values['operator-secret-file']),
  };
  const clusterJson = readJsonFile(clusterPath, 'cluster description', 'BAD_CLUSTER');
  let cluster;
  try {
    cluster = parseCluster(clusterJson);
  } catch (error) {
    if (error instanceof QuorumFenceError)
      throw new QuorumFenceError(error.code, `${clusterPath}: ${error.message}`, error.details);
    throw error;
  }
  const keyJson = readJsonFile(keyPath, 'replica key', 'BAD_KEY_FILE');
  return { ...settings, clusterJson, cluster, keyJson, key: parseReplicaKey(keyJson, cluster, keyPath) };
}

/** An epoch step flag: a whole number of epochs, 1 .. the default maxEpochStep (docs/protocol.md, "Epoch steps"). */
function epochStepFlag(value: string | undefined, name: string, fallback: bigint): bigint {
  return BigInt(integerFlag(value, name, Number(fallback), 1, Number(DEFAULT_MAX_EPOCH_STEP)));
}
