/**
 * The state the console shows: what `/api/state` carries and the page renders (the status line, each replica's row,
 * the leases, the watched resources, the history, the alerts, the store), and that state before the first poll.
 * Types and pure shape-building only, apart from the watcher (watcher.ts) that fills it poll after poll, so the
 * shape /api/state promises (the page and operators' scripts read it) is in one place, not spread through the loop.
 */
import type { ResourceStatus } from '../client/status.js';
import type { Cluster } from '../cluster/description.js';
import { MAX_LEASES_PER_REPLY } from '../protocol/messages.js';
import type { AlertState, AlertSummary } from './alerts.js';
import type { EvidenceRow } from './evidence-store.js';
import { HISTORY_BUCKET_MS, HISTORY_WINDOW_MS, type HistoryPoint } from './history.js';
import type { HealthClaim, MetricsFigures } from './replica-health.js';
import type { ClusterStatus, SituationAction, SituationReason, UnreachableKind } from './situation.js';
import type { Conviction, QuorumLease } from './view.js';

export interface ReplicaRow {
  readonly replica: number;
  readonly endpoint: string;
  /** It answered a request of the last poll (its leases or a status; an error frame is an answer too). */
  readonly reachable: boolean;
  /** How it is unreachable, from the console's connection: hung (open, no answer), down (refused, closed), login_refused. */
  readonly unreachableAs: UnreachableKind | null;
  /** Since when it has not been reachable (ISO 8601, UTC), or null. */
  readonly downSince: string | null;
  /** The connection in words: `ready`, or why not. */
  readonly connection: string;
  /** The first proof that it is faulty, or null (docs/console.md, "When a replica is faulty"). */
  readonly faulty: string | null;
  readonly faultySince: string | null;
  /** Every proof against it, one per kind, first found first. */
  readonly convictions: readonly Conviction[];
  /** True when verified equivocation evidence convicts it. */
  readonly convicted: boolean;
  /** Its own word about itself (/healthz), or why it could not be read. */
  readonly health: (HealthClaim & { readonly mismatch: string | null }) | { readonly error: string };
  readonly metrics: ReplicaFigures | { readonly error: string };
  /** How many leases it listed (its word). */
  readonly leasesListed: number | null;
  /** It said it left leases out of its list (`more`). */
  readonly leasesCut: boolean;
}

/** A replica's figures: its /metrics between two polls, and its fsync p99 over the alert rule's window. */
export interface ReplicaFigures extends MetricsFigures {
  /** The 99th percentile of its flush (fsync) latency over the last 5 minutes of samples, ms (as FlushLatencyHigh reads it). */
  readonly flushP99Ms: number | null;
}

/** A --watch resource, by the (f+1)-th rules of `status` (client/status.ts): seen even when no lease list shows it. */
export interface WatchedResource {
  readonly resource: string;
  /** At least f+1 replicas say a lease runs. */
  readonly leased: boolean;
  /** The (f+1)-th largest epoch reported, when at least 2f+1 answered (decimal), else null. */
  readonly epoch: string | null;
  readonly remainingMs: number | null;
  /** Replicas that answered. */
  readonly answered: number;
  /** A lease on it is in the running leases table. */
  readonly listed: boolean;
}

type Named<T> = T & { readonly holderName: string | null };

export interface ConsoleState {
  /** Every time in this state is ISO 8601 in this zone. */
  readonly timeZone: 'UTC';
  readonly cluster: { readonly id: string; readonly n: number; readonly f: number; readonly t: number };
  readonly polledAt: string | null;
  readonly polls: number;
  /** How long the last poll took (ms): all its requests, health and metrics reads included. */
  readonly lastPollMs: number | null;
  readonly intervalMs: number;
  /** The page shows everything as stale when the last poll is older than this (or the console does not answer). */
  readonly staleAfterMs: number;
  readonly margin: number;
  readonly available: number;
  /** healthy, degraded (acquires work but something is wrong), unavailable (acquires fail), or starting. */
  readonly status: ClusterStatus;
  /** One sentence: what is true now. */
  readonly headline: string;
  /** Since when the status holds (ISO 8601, UTC), or null before the first poll. */
  readonly statusSince: string | null;
  /** What makes the status, worst first. */
  readonly reasons: readonly SituationReason[];
  /** What to do next, most urgent first, each naming its runbook (#runbook-<id> on the page). */
  readonly actions: readonly SituationAction[];
  /** How long each request of a poll may take (ms): a replica silent for longer is hung. */
  readonly timeoutMs: number;
  /** Replica indices in the order the page lists them: faulty, down, hung, then the rest. */
  readonly replicaOrder: readonly number[];
  readonly replicas: readonly ReplicaRow[];
  readonly leases: readonly Named<Omit<QuorumLease, 'epoch'> & { readonly epoch: string }>[];
  readonly recentGrants: readonly Named<{
    readonly resource: string;
    readonly epoch: string;
    readonly holder: string;
    readonly firstSeenAt: string;
  }>[];
  /** Each replica's list holds at most `limit` leases, those ending last; `cut` names the replicas that left some out. */
  readonly leaseLists: { readonly limit: number; readonly cut: readonly number[] };
  readonly watched: readonly WatchedResource[];
  readonly evidence: readonly EvidenceRow[];
  readonly probedResources: number;
  readonly history: {
    readonly bucketSeconds: number;
    readonly windowSeconds: number;
    readonly points: HistoryPoint[];
    /** The start of the oldest bucket held (ISO 8601, UTC), or null: the charts say since when data exists. */
    readonly dataSince: string | null;
  };
  /** Which shipped alert rules would fire now (alerts.ts). */
  readonly alerts: readonly AlertState[];
  /** How many rules fire, how many are pending and when the first of those fires. */
  readonly alertSummary: AlertSummary;
  /** Whether the console keeps its past under --data, when it last wrote it, and when it took it back at its start. */
  readonly persistence: {
    readonly enabled: boolean;
    readonly restoredFrom: string | null;
    readonly lastSavedAt: string | null;
    readonly error: string | null;
  };
}

/** The state before the first poll: nothing seen yet, the status `starting`. */
export function initialState(
  cluster: Cluster,
  options: { readonly intervalMs: number; readonly timeoutMs: number; readonly persisted: boolean },
): ConsoleState {
  return {
    timeZone: 'UTC',
    cluster: { id: cluster.idHex, n: cluster.n, f: cluster.f, t: cluster.t },
    polledAt: null,
    polls: 0,
    lastPollMs: null,
    intervalMs: options.intervalMs,
    // Three missed polls, each allowed its requests' timeout (health and status rounds follow the leases one).
    staleAfterMs: 3 * (options.intervalMs + 2 * options.timeoutMs),
    margin: -cluster.t,
    available: 0,
    status: 'starting',
    headline: 'Waiting for the first poll of the replicas.',
    statusSince: null,
    reasons: [],
    actions: [],
    timeoutMs: options.timeoutMs,
    replicaOrder: [],
    replicas: [],
    leases: [],
    recentGrants: [],
    leaseLists: { limit: MAX_LEASES_PER_REPLY, cut: [] },
    watched: [],
    evidence: [],
    probedResources: 0,
    history: {
      bucketSeconds: HISTORY_BUCKET_MS / 1000,
      windowSeconds: HISTORY_WINDOW_MS / 1000,
      points: [],
      dataSince: null,
    },
    alerts: [],
    alertSummary: { firing: 0, firingCritical: 0, pending: 0, nextFiresAt: null },
    persistence: { enabled: options.persisted, restoredFrom: null, lastSavedAt: null, error: null },
  };
}

/** A watched resource's row from its status round (undefined: the round could not be asked). */
export function watchedRow(
  resource: string,
  status: ResourceStatus | undefined,
  leases: readonly QuorumLease[],
): WatchedResource {
  return {
    resource,
    leased: status?.leased ?? false,
    epoch: status?.epoch?.toString() ?? null,
    remainingMs: status?.leased ? (status.remainingMs ?? null) : null,
    answered: status?.answered ?? 0,
    listed: leases.some((l) => l.resource === resource),
  };
}
