/**
 * One poll's questions to the replicas and what their answers and connections say about each: the running leases
 * (the `leases` request), each replica's /healthz and /metrics, then the status of every resource listed or watched;
 * the observation the judge (view.ts) gets for each replica, decided by the connection; and how an unanswering one
 * is unreachable (hung, down, login_refused). Apart from the poll loop (watcher.ts), which makes each poll's state,
 * and from what the polls add up to (console-memory.ts): this file asks and reads, and keeps only what the next
 * observation compares against (each replica's connection of the last poll, the protocol faults heard since).
 */
import type { QuorumFenceClient } from '../client/client.js';
import type { ReplicaFault } from '../client/evidence.js';
import type { ReplicaLeases } from '../client/active-leases.js';
import type { ConnectionState } from '../client/connection-state.js';
import type { ResourceStatus } from '../client/status.js';
import type { Cluster } from '../cluster/description.js';
import { isQuorumFenceError } from '../common/errors.js';
import type { ReplicaRow } from './console-state.js';
import {
  fetchBounded,
  httpBase,
  parseHealth,
  parseMetrics,
  type HealthClaim,
  type MetricsSample,
} from './replica-health.js';
import type { UnreachableKind } from './situation.js';
import type { ReplicaObservation } from './view.js';

/** What a replica says about itself: its /healthz, checked against who it should be, and a /metrics sample. */
export interface HealthRead {
  readonly health: ReplicaRow['health'];
  readonly sample: MetricsSample | undefined;
  readonly metricsError: string | undefined;
}

/** What one poll heard from the replicas. */
export interface ReplicaAnswers {
  /** Each replica's running leases, in the cluster's order. */
  readonly leaseViews: readonly ReplicaLeases[];
  /** Each replica's /healthz and /metrics, in the same order. */
  readonly healthReads: readonly HealthRead[];
  /** The resources whose status was asked: the watched ones and every one a replica listed. */
  readonly resources: ReadonlySet<string>;
  /** Replica → the epoch it reported for each resource asked. */
  readonly statusEpochs: ReadonlyMap<number, ReadonlyMap<string, bigint>>;
  /** Replicas that answered some status request: an answer, whichever request it was, shows the replica is there. */
  readonly answeredStatus: ReadonlySet<number>;
  /** The status round of each watched resource that could be asked. */
  readonly watchedStatus: ReadonlyMap<string, ResourceStatus>;
}

/**
 * Asks every replica its running leases, /healthz and /metrics at once, then the status of every resource listed or
 * watched, each request bounded by timeoutMs. Undefined when the client is closed (the console is stopping).
 */
export async function askReplicas(
  client: QuorumFenceClient,
  watch: readonly string[],
  timeoutMs: number,
): Promise<ReplicaAnswers | undefined> {
  const cluster = client.cluster;
  let leaseViews: ReplicaLeases[];
  let healthReads: HealthRead[];
  try {
    [leaseViews, healthReads] = await Promise.all([
      client.replicaLeases({ timeoutMs }),
      Promise.all(cluster.replicas.map((r) => readHealth(cluster, r.index, r.endpoint, timeoutMs))),
    ]);
  } catch (error) {
    if (isQuorumFenceError(error) && error.code === 'CLOSED') return undefined;
    throw error;
  }
  const resources = new Set(watch);
  for (const view of leaseViews)
    if (view.state === 'ok') for (const lease of view.leases) resources.add(lease.resource);
  const statusEpochs = new Map<number, Map<string, bigint>>(cluster.replicas.map((r) => [r.index, new Map()]));
  /** Replicas that answered some status request: an answer, whichever request it was, shows the replica is there. */
  const answeredStatus = new Set<number>();
  const watchedStatus = new Map<string, ResourceStatus>();
  await Promise.all(
    [...resources].map(async (resource) => {
      // A name a replica made up may not even be a valid resource: then there is nothing to ask.
      const status = await client.status(resource, { timeoutMs }).catch(() => undefined);
      if (status && watch.includes(resource)) watchedStatus.set(resource, status);
      for (const view of status?.replicas ?? []) {
        if (view.state === 'ok') statusEpochs.get(view.replica)?.set(resource, view.epoch);
        if (view.state === 'ok' || view.state === 'refused' || view.state === 'error') answeredStatus.add(view.replica);
      }
    }),
  );
  return { leaseViews, healthReads, resources, statusEpochs, answeredStatus, watchedStatus };
}

/** Protocol faults kept per replica between two polls (the first ones say enough). */
const FAULTS_PER_POLL = 4;

/**
 * What the judge (view.ts) is told of each replica, poll after poll: its answers, the protocol faults the client
 * heard from it since the last poll (whatever request they came with), and whether its connection is a new one.
 */
export class ReplicaObserver {
  /** Replica → the connection state object of the previous poll (a new object: a new connection). */
  readonly #connections = new Map<number, ConnectionState>();
  /** Replica → protocol faults the client reported since the last poll (whatever request they came with). */
  readonly #faults = new Map<number, ReplicaFault[]>();
  /** Hears the client's `fault` events. */
  readonly onFault = (fault: ReplicaFault) => {
    const kept = this.#faults.get(fault.replica) ?? [];
    if (kept.length < FAULTS_PER_POLL) kept.push(fault);
    this.#faults.set(fault.replica, kept);
  };

  /** Each replica's lease view, connection and observation this poll, in the order of the answers. */
  observe(
    client: QuorumFenceClient,
    answers: ReplicaAnswers,
  ): {
    readonly view: ReplicaLeases;
    readonly connection: ConnectionState;
    readonly observation: ReplicaObservation;
  }[] {
    const connections = client.replicas();
    const faults = this.#takeFaults();
    return answers.leaseViews.map((view, k) => {
      const connection = connections.find((c) => c.replica === view.replica)!.state;
      const previous = this.#connections.get(view.replica);
      this.#connections.set(view.replica, connection);
      const health = answers.healthReads[k]!.health;
      const replicaFaults = faults.get(view.replica) ?? [];
      const observation = observeReplica(view, connection, previous, health, replicaFaults, answers);
      return { view, connection, observation };
    });
  }

  /** The client's protocol faults since the last poll, by replica (taken: the next poll starts afresh). */
  #takeFaults(): Map<number, ReplicaFault[]> {
    const faults = new Map(this.#faults);
    this.#faults.clear();
    return faults;
  }
}

/** What the judge (view.ts) is told of one replica this poll; `previous` is its connection state of the last poll. */
function observeReplica(
  view: ReplicaLeases,
  connection: ConnectionState,
  previous: ConnectionState | undefined,
  health: ReplicaRow['health'],
  replicaFaults: readonly ReplicaFault[],
  answers: Pick<ReplicaAnswers, 'statusEpochs' | 'answeredStatus'>,
): ReplicaObservation {
  const protocolFault =
    replicaFaults.find((f) => f.kind === 'protocol' || f.kind === 'invalid_reply')?.message ??
    (view.state === 'faulty' ? view.message : undefined);
  const badChallenge = replicaFaults.find((f) => f.kind === 'bad_challenge');
  const answered =
    view.state === 'ok' ||
    view.state === 'refused' ||
    view.state === 'error' ||
    answers.answeredStatus.has(view.replica);
  return {
    replica: view.replica,
    // Decided by the connection: a protocol fault on any request convicts; any answer shows it is there.
    answer: protocolFault !== undefined ? 'protocol' : answered ? 'ok' : 'unreachable',
    message: protocolFault,
    leases: view.state === 'ok' ? view.leases : undefined,
    more: view.state === 'ok' && view.more,
    statusEpochs: answers.statusEpochs.get(view.replica) ?? new Map(),
    // Connection states are immutable: every transition makes a new object, so a new one means it reconnected.
    newConnection: previous !== undefined && previous !== connection,
    identityMismatch:
      ('error' in health ? null : health.mismatch) ??
      (badChallenge ? `its WebSocket challenge was refused: ${badChallenge.message}` : null),
  };
}

/** The connection in words for the replica's row: `ready`, closed for breaking the protocol, or why not reachable. */
export function connectionWords(
  view: ReplicaLeases,
  connection: ConnectionState,
  observation: ReplicaObservation,
  timeoutMs: number,
): string {
  return observation.answer === 'protocol'
    ? `closed by the console for breaking the protocol: ${observation.message ?? ''}`
    : observation.answer === 'ok'
      ? 'ready'
      : describeUnreachable(view, connection, timeoutMs);
}

/** Reads a replica's /healthz and /metrics at once, each bounded by timeoutMs; what fails is described, not thrown. */
async function readHealth(cluster: Cluster, index: number, endpoint: string, timeoutMs: number): Promise<HealthRead> {
  const base = httpBase(endpoint);
  const [health, metrics] = await Promise.allSettled([
    fetchBounded(`${base}/healthz`, timeoutMs),
    fetchBounded(`${base}/metrics`, timeoutMs),
  ]);
  let healthRow: ReplicaRow['health'];
  if (health.status === 'fulfilled') {
    let claim: HealthClaim;
    try {
      claim = parseHealth(JSON.parse(health.value));
    } catch {
      claim = parseHealth(undefined);
    }
    const mismatch =
      claim.clusterId !== null && claim.clusterId !== cluster.idHex
        ? 'its /healthz names another cluster'
        : claim.replica !== null && claim.replica !== index
          ? `its /healthz says it is replica ${claim.replica}`
          : null;
    healthRow = { ...claim, mismatch };
  } else healthRow = { error: describeFailure(health.reason) };
  return {
    health: healthRow,
    sample: metrics.status === 'fulfilled' ? parseMetrics(metrics.value, Date.now()) : undefined,
    metricsError: metrics.status === 'rejected' ? describeFailure(metrics.reason) : undefined,
  };
}

/**
 * How an unanswering replica is unreachable, from the console's connection to it: hung when the connection is open (or
 * its socket opens) and nothing comes back in time, login_refused when it refused the console's identity, down when
 * nothing listens (refused, closed, not connected).
 */
export function unreachableKind(view: ReplicaLeases, connection: ConnectionState): UnreachableKind {
  if (view.state === 'timeout') return 'hung';
  if (
    connection.phase === 'ready' ||
    connection.phase === 'awaiting_challenge' ||
    connection.phase === 'awaiting_welcome'
  )
    return 'hung';
  if (connection.lastFailure?.kind === 'handshake_timeout') return 'hung';
  if (connection.lastFailure?.kind === 'unauthenticated') return 'login_refused';
  return 'down';
}

function describeUnreachable(view: ReplicaLeases, connection: ConnectionState, timeoutMs: number): string {
  if (view.state === 'timeout') return `connected, no answer within ${timeoutMs} ms`;
  const failure = connection.lastFailure;
  if (connection.phase === 'awaiting_challenge' || connection.phase === 'awaiting_welcome')
    return 'connected, no answer to the handshake yet';
  if (!failure) return `not connected (${connection.phase})`;
  switch (failure.kind) {
    case 'handshake_timeout':
      return `accepts connections but does not answer the handshake (${failure.message})`;
    case 'unreachable':
      return `connection refused or unreachable (${failure.message})`;
    case 'closed':
      return `connection closed (${failure.message})`;
    case 'unauthenticated':
      return `refused the console's login (${failure.message})`;
    default:
      return `${failure.kind}: ${failure.message}`;
  }
}

export function describeFailure(error: unknown): string {
  return isQuorumFenceError(error) ? `${error.code}: ${error.message}` : String(error).slice(0, 200);
}
