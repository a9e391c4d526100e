/**
 * What the client verbs (acquire, lock, release, status, health, console) share: --cluster and --identity,
 * each falling back to its environment variable; loading the files they name; connecting; and the one line a
 * refused acquire prints.
 */
import { QuorumFenceError } from '../common/errors.js';
import { createLogger } from '../common/log.js';
import { loadClusterFile, type Cluster } from '../cluster/description.js';
import { toHex } from '../common/bytes.js';
import type { AcquireRefusal } from '../client/acquire.js';
import type { ReplicaLeases } from '../client/active-leases.js';
import { QuorumFenceClient } from '../client/client.js';
import { loadIdentityFile, type Identity } from '../client/identity.js';
import { CLUSTER_ENVIRONMENT_VARIABLE, IDENTITY_ENVIRONMENT_VARIABLE, requiredOrEnvironment } from '../command/args.js';

/** The two flags, for a verb's parseFlags options. */
export const CLIENT_FLAGS = {
  cluster: { type: 'string' },
  identity: { type: 'string' },
} as const;

/** Their lines in a verb's --help. */
export const CLUSTER_FLAG_USAGE = `  --cluster FILE    the cluster description (cluster.json); default $${CLUSTER_ENVIRONMENT_VARIABLE}`;
export const IDENTITY_FLAG_USAGE = `  --identity FILE   the client identity ("quorumfence identity new"); default $${IDENTITY_ENVIRONMENT_VARIABLE}`;

interface ClientFlagValues {
  readonly cluster?: string | undefined;
  readonly identity?: string | undefined;
}

/** --cluster, or $QUORUMFENCE_CLUSTER. @throws QuorumFenceError INVALID_OPTION when neither is set */
export function clusterPathOf(values: ClientFlagValues): string {
  return requiredOrEnvironment(values.cluster, 'cluster', CLUSTER_ENVIRONMENT_VARIABLE);
}

/** --identity, or $QUORUMFENCE_IDENTITY. @throws QuorumFenceError INVALID_OPTION when neither is set */
export function identityPathOf(values: ClientFlagValues): string {
  return requiredOrEnvironment(values.identity, 'identity', IDENTITY_ENVIRONMENT_VARIABLE);
}

/**
 * Loads the cluster description a command was given, saying which file to pass when it cannot be read.
 * @throws QuorumFenceError IO_ERROR, and loadClusterFile's errors for a malformed description
 */
export function loadClusterForCommand(clusterPath: string): Cluster {
  try {
    return loadClusterFile(clusterPath);
  } catch (error) {
    if (error instanceof QuorumFenceError && error.code === 'IO_ERROR') {
      throw new QuorumFenceError(
        'IO_ERROR',
        `cannot read the cluster description ${clusterPath}; pass the cluster.json that "quorumfence keygen" wrote`,
      );
    }
    throw error;
  }
}

/** The cluster and identity the flags (or their environment variables) name. */
export function loadClientFiles(values: ClientFlagValues): {
  clusterPath: string;
  cluster: Cluster;
  identity: Identity;
} {
  const clusterPath = clusterPathOf(values);
  const cluster = loadClusterForCommand(clusterPath);
  return { clusterPath, cluster, identity: loadIdentityFile(identityPathOf(values)) };
}

/**
 * Loads the cluster and identity files and connects.
 * @throws QuorumFenceError CONNECTION_FAILED when no replica is reachable, and the loaders' errors
 */
export async function openClient(
  values: ClientFlagValues & {
    /** Speak for this earlier session (32 hex digits, docs/protocol.md "Sessions") instead of a fresh one. */
    readonly session?: string | undefined;
  },
): Promise<QuorumFenceClient> {
  const { clusterPath, cluster, identity } = loadClientFiles(values);
  const client = await QuorumFenceClient.connect(cluster, identity, {
    logger: createLogger('client', { level: 'warn', destination: 2 }),
    ...(values.session === undefined ? {} : { session: values.session }),
  });
  const ready = client.replicas().filter((r) => r.state.phase === 'ready').length;
  if (ready === 0) {
    const failures = client.replicas().map((r) => `${r.endpoint}: ${r.state.lastFailure?.message ?? r.state.phase}`);
    await client.close();
    throw new QuorumFenceError(
      'CONNECTION_FAILED',
      `no replica of the cluster is reachable (${failures.join('; ')}); check that the replicas are running and that the endpoints in ${clusterPath} are right`,
    );
  }
  return client;
}

/**
 * Whose is the lease on `resource` at `epoch`, from the replicas' lists of running leases: `mine` when at least
 * f+1 of them (so at least one honest one) list it under `holderHex`, `other` when f+1 list it under another
 * holder, `unknown` otherwise (too few answers, or lists cut at their limit). Pure.
 */
export function leaseOwner(
  views: readonly ReplicaLeases[],
  resource: string,
  epoch: bigint,
  holderHex: string,
  f: number,
): 'mine' | 'other' | 'unknown' {
  let mine = 0;
  let other = 0;
  for (const view of views) {
    if (view.state !== 'ok') continue;
    const lease = view.leases.find((l) => l.resource === resource && l.epoch === epoch);
    if (lease === undefined) continue;
    if (toHex(lease.holder) === holderHex) mine++;
    else other++;
  }
  return mine >= f + 1 ? 'mine' : other >= f + 1 ? 'other' : 'unknown';
}

/** How long a busy lease still runs, as a --wait that outlasts it. */
const waitFor = (remainingMs: number) => `--wait ${Math.ceil((remainingMs + 1) / 1000)}s`;

/**
 * The busy line. A busy lease may be this identity's own, taken by another invocation (a session of its own,
 * docs/protocol.md "Sessions"): "another holder" would mislead, and the way out is release --session or
 * --resume, not a longer wait. The replicas' lease lists say whose it is (f+1 of them must agree); when they do
 * not answer, the line names both possibilities.
 */
async function busyHint(
  refusal: Extract<AcquireRefusal, { reason: 'busy' }>,
  client: QuorumFenceClient,
  resource: string,
): Promise<string> {
  const seconds = Math.ceil(refusal.remainingMs / 1000);
  const ownWayOut = `release it with "quorumfence release ${resource} ${refusal.epoch} --session SESSION" (the session its acquire printed), take it over with --resume, or wait with ${waitFor(refusal.remainingMs)}`;
  let owner: 'mine' | 'other' | 'unknown';
  try {
    const views = await client.replicaLeases({ timeoutMs: 2_000 });
    owner = leaseOwner(views, resource, refusal.epoch, client.identity.publicKeyHex, client.cluster.f);
  } catch {
    owner = 'unknown';
  }
  if (owner === 'mine')
    return `this identity (${client.identity.publicKeyHex.slice(0, 16)}…) holds "${resource}" at epoch ${refusal.epoch} in another session, for about ${seconds}s more: if that process ended, ${ownWayOut}`;
  return `held by another holder at epoch ${refusal.epoch} for about ${seconds}s more; wait longer with ${waitFor(refusal.remainingMs)}${
    owner === 'unknown' ? ` (if it is this identity's own lease from another session: ${ownWayOut})` : ''
  }`;
}

/** One line saying what went wrong and what to try. */
export async function refusalHint(
  refusal: AcquireRefusal,
  client: QuorumFenceClient,
  resource: string,
): Promise<string> {
  switch (refusal.reason) {
    case 'busy':
      return busyHint(refusal, client, resource);
    case 'unavailable':
      return `${refusal.message}; at least ${client.cluster.t} of the ${client.cluster.n} replicas must be running and reachable`;
    case 'timeout':
      return `${refusal.message}; the replicas are slow or the resource is heavily contended: try a larger --wait`;
    case 'forbidden':
      return `${refusal.message}; add this identity (${client.identity.publicKeyHex}) with a prefix of "${resource}" to the replicas' access config (--config)`;
    case 'invalid':
      return `${refusal.message}; check --ttl against the replicas' --min-ttl/--max-ttl`;
    case 'aborted':
      return refusal.message;
  }
}

/**
 * The stderr line of a refused acquire. Like an error line it ends with a code in parentheses: the refusal
 * reason in capitals (BUSY, UNAVAILABLE, TIMEOUT, FORBIDDEN, INVALID, ABORTED).
 */
export async function refusalLine(
  verb: string,
  refusal: AcquireRefusal,
  client: QuorumFenceClient,
  resource: string,
): Promise<string> {
  return `quorumfence ${verb}: ${refusal.reason}: ${await refusalHint(refusal, client, resource)} (${refusal.reason.toUpperCase()})\n`;
}
