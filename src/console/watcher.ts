/**
 * The console's poll loop: once per interval it asks every replica for its running leases (the `leases`
 * request), the status of every resource any replica lists plus the watched ones, its /healthz and its
 * /metrics; judges the answers (view.ts); and keeps the state the page shows, its history, which shipped
 * alerts would fire, and logs what changed. Polls never overlap, and everything it keeps is bounded.
 */
import type { QuorumFenceClient } from '../client/client.js';
import type { EvidenceLog, ReplicaFault } from '../client/evidence.js';
import type { ReplicaLeases } from '../client/active-leases.js';
import type { ConnectionState } from '../client/connection-state.js';
import type { ResourceStatus } from '../client/status.js';
import { MAX_LEASES_PER_REPLY } from '../protocol/messages.js';
import { BoundedMap } from '../common/bounded-map.js';
import { isQuorumFenceError } from '../common/errors.js';
import type { Logger } from '../common/log.js';
import {
  AlertEvaluator,
  RULE_WINDOW_MS,
  flushQuantileMs,
  summariseAlerts,
  type AlertState,
  type AlertSummary,
} from './alerts.js';
import { stateChanges, type ChangeSnapshot } from './changes.js';
import type { ConsoleSnapshot, ConsoleStore, RecentGrant } from './console-store.js';
import { equivocationFromJson } from './evidence-json.js';
import { EvidenceStore, type EvidenceDocument, type EvidenceRow } from './evidence-store.js';
import { HISTORY_BUCKET_MS, HISTORY_WINDOW_MS, RollingHistory, type HistoryPoint } from './history.js';
import type { ConsoleMetrics } from './metrics.js';
import {
  fetchBounded,
  httpBase,
  metricsFigures,
  parseHealth,
  parseMetrics,
  type HealthClaim,
  type MetricsFigures,
  type MetricsSample,
} from './replica-health.js';
import {
  assessSituation,
  worstFirst,
  type ClusterStatus,
  type SituationAction,
  type SituationReason,
  type UnreachableKind,
} from './situation.js';
import {
  ConsoleJudge,
  confirmedLeases,
  isFaultKind,
  type Conviction,
  type QuorumLease,
  type ReplicaObservation,
} from './view.js';

/** Recent grants kept for the page, newest first. */
const MAX_RECENT_GRANTS = 50;
/** Leases already seen, so each shows once in the recent grants. */
const SEEN_LEASES = 4096;
/** /metrics samples kept per replica for the alert rules' 5-minute windows: one per 10 s is ~31 of them. */
const RULE_SAMPLE_SPACING_MS = 10_000;
/** The store (--data) is written at least this often, and at once when evidence, a conviction or the status is new. */
const SAVE_EVERY_MS = HISTORY_BUCKET_MS;
/** Protocol faults kept per replica between two polls (the first ones say enough). */
const FAULTS_PER_POLL = 4;

export interface ConsoleWatcherOptions {
  readonly client: QuorumFenceClient;
  /** The client's evidence log (the console records what clients hand it there too). */
  readonly evidence: EvidenceLog;
  readonly metrics: ConsoleMetrics;
  readonly intervalMs: number;
  /** How long each request of a poll may take. */
  readonly timeoutMs: number;
  /** Resources whose status is asked at every poll, listed or not. */
  readonly watch: readonly string[];
  /** Holder key (lowercase hex) → the name the page shows (--holders). */
  readonly holderNames?: ReadonlyMap<string, string>;
  /** Hears what changed between polls (a replica lost, back or faulty, the margin, alerts); silent without. */
  readonly logger?: Logger;
  /** Hears a poll that failed (a bug, not a replica's doing: replicas' failures are part of the state). */
  readonly onPollError?: (error: unknown) => void;
  /** Where history, timers, convictions and evidence are kept across restarts (--data); none: in memory only. */
  readonly store?: ConsoleStore;
}

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

interface HealthRead {
  readonly health: ReplicaRow['health'];
  readonly sample: MetricsSample | undefined;
  readonly metricsError: string | undefined;
}

export class ConsoleWatcher {
  readonly #options: ConsoleWatcherOptions;
  readonly #client: QuorumFenceClient;
  readonly #judge: ConsoleJudge;
  readonly #evidence: EvidenceStore;
  readonly #evidenceByKind: Record<string, number> = {};
  #lastEvidenceId = 0;
  readonly #history = new RollingHistory();
  readonly #alerts = new AlertEvaluator();
  /** Replica → its latest /metrics sample, and its samples over the alert rules' window. */
  readonly #samples = new Map<number, MetricsSample>();
  readonly #ruleSamples = new Map<number, MetricsSample[]>();
  /** Some replica's /metrics has answered since the start (the alerts' stand-in for Prometheus remembering the threshold). */
  #metricsSeen = false;
  /** Replica → the connection state object of the previous poll (a new object: a new connection). */
  readonly #connections = new Map<number, ConnectionState>();
  readonly #downSince = new Map<number, string>();
  readonly #seen = new BoundedMap<string, true>(SEEN_LEASES);
  #recent: RecentGrant[] = [];
  /** Replica → protocol faults the client reported since the last poll (whatever request they came with). */
  readonly #faults = new Map<number, ReplicaFault[]>();
  #statusSince: { status: ClusterStatus; since: string } | null = null;
  /** The store needs writing now (evidence, a conviction, a status change), not only at the next SAVE_EVERY_MS. */
  #dirty = false;
  #lastSavedAt = 0;
  #saving: Promise<void> | undefined;
  #restoredFrom: string | null = null;
  #persistenceError: string | null = null;
  #state: ConsoleState;
  #timer: NodeJS.Timeout | undefined;
  #polling: Promise<void> | undefined;
  #stopped = false;
  readonly #unsubscribe: () => void;
  readonly #onFault = (fault: ReplicaFault) => {
    const kept = this.#faults.get(fault.replica) ?? [];
    if (kept.length < FAULTS_PER_POLL) kept.push(fault);
    this.#faults.set(fault.replica, kept);
  };

  constructor(options: ConsoleWatcherOptions) {
    this.#options = options;
    this.#client = options.client;
    const { cluster } = this.#client;
    this.#judge = new ConsoleJudge(cluster.f);
    this.#evidence = new EvidenceStore(cluster);
    this.#state = {
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
      persistence: { enabled: options.store !== undefined, restoredFrom: null, lastSavedAt: null, error: null },
    };
    this.#restore();
    for (const item of options.evidence.list()) this.#noteEvidence(item);
    this.#unsubscribe = options.evidence.subscribe((item) => this.#noteEvidence(item));
    this.#client.on('fault', this.#onFault);
  }

  /** Polls now and then every interval until stop(). */
  start(): void {
    const loop = () => {
      if (this.#stopped) return;
      this.#polling = this.#poll()
        .catch((error: unknown) => this.#options.onPollError?.(error))
        .finally(() => {
          this.#polling = undefined;
          if (!this.#stopped) this.#timer = setTimeout(loop, this.#options.intervalMs);
        });
    };
    loop();
  }

  /** Stops polling and, with a store, writes it a last time. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#unsubscribe();
    this.#client.off('fault', this.#onFault);
    await this.#polling;
    await this.#saving;
    if (this.#options.store) await this.#save(Date.now());
  }

  get state(): ConsoleState {
    return this.#state;
  }

  get client(): QuorumFenceClient {
    return this.#client;
  }

  /** The document of evidence `id` (an equivocation anyone can check, or the console's observation), or undefined. */
  evidenceDocument(id: number): EvidenceDocument | undefined {
    return this.#evidence.document(id);
  }

  /**
   * Records equivocation evidence a client hands over, once it verifies against the cluster.
   * @throws QuorumFenceError INVALID_ARGUMENT and the field errors of equivocationFromJson
   */
  addEvidence(document: unknown): number {
    const evidence = equivocationFromJson(document, this.#client.cluster);
    // The same pair handed over again (several clients saw it) is kept once.
    const known = this.#evidence.findSame(evidence);
    if (known !== undefined) return known;
    const { observedAt: _observedAt, ...item } = evidence;
    this.#options.evidence.record(item);
    return this.#lastEvidenceId;
  }

  #noteEvidence(item: Parameters<EvidenceStore['note']>[0]): void {
    const { id, conviction } = this.#evidence.note(item);
    this.#lastEvidenceId = id;
    if (conviction) this.#judge.convict(conviction.replica, conviction.kind, conviction.reason, conviction.at);
    this.#countEvidence(item.kind, 1);
  }

  #countEvidence(kind: string, count: number): void {
    this.#evidenceByKind[kind] = (this.#evidenceByKind[kind] ?? 0) + count;
    this.#options.metrics.evidence.inc({ kind }, count);
    this.#dirty = true;
  }

  /** The client's protocol faults since the last poll, by replica (taken: the next poll starts afresh). */
  #takeFaults(): Map<number, ReplicaFault[]> {
    const faults = new Map(this.#faults);
    this.#faults.clear();
    return faults;
  }

  async #poll(): Promise<void> {
    const started = performance.now();
    const { client } = this;
    const { timeoutMs } = this.#options;
    const cluster = client.cluster;
    let leaseViews: ReplicaLeases[];
    let healthReads: HealthRead[];
    try {
      [leaseViews, healthReads] = await Promise.all([
        client.replicaLeases({ timeoutMs }),
        Promise.all(cluster.replicas.map((r) => this.#readHealth(r.index, r.endpoint))),
      ]);
    } catch (error) {
      if (isQuorumFenceError(error) && error.code === 'CLOSED') return;
      throw error;
    }
    const resources = new Set(this.#options.watch);
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
        if (status && this.#options.watch.includes(resource)) watchedStatus.set(resource, status);
        for (const view of status?.replicas ?? []) {
          if (view.state === 'ok') statusEpochs.get(view.replica)?.set(resource, view.epoch);
          if (view.state === 'ok' || view.state === 'refused' || view.state === 'error')
            answeredStatus.add(view.replica);
        }
      }),
    );
    if (this.#stopped) return;
    const now = Date.now();
    const nowIso = new Date(now).toISOString();
    const connections = client.replicas();
    const faults = this.#takeFaults();
    const reads = leaseViews.map((view, k) => {
      const connection = connections.find((c) => c.replica === view.replica)!.state;
      const previous = this.#connections.get(view.replica);
      this.#connections.set(view.replica, connection);
      const health = healthReads[k]!.health;
      const replicaFaults = faults.get(view.replica) ?? [];
      const protocolFault =
        replicaFaults.find((f) => f.kind === 'protocol' || f.kind === 'invalid_reply')?.message ??
        (view.state === 'faulty' ? view.message : undefined);
      const badChallenge = replicaFaults.find((f) => f.kind === 'bad_challenge');
      const answered =
        view.state === 'ok' || view.state === 'refused' || view.state === 'error' || answeredStatus.has(view.replica);
      const observation: ReplicaObservation = {
        replica: view.replica,
        // Decided by the connection: a protocol fault on any request convicts; any answer shows it is there.
        answer: protocolFault !== undefined ? 'protocol' : answered ? 'ok' : 'unreachable',
        message: protocolFault,
        leases: view.state === 'ok' ? view.leases : undefined,
        more: view.state === 'ok' && view.more,
        statusEpochs: statusEpochs.get(view.replica) ?? new Map(),
        // Connection states are immutable: every transition makes a new object, so a new one means it reconnected.
        newConnection: previous !== undefined && previous !== connection,
        identityMismatch:
          ('error' in health ? null : health.mismatch) ??
          (badChallenge ? `its WebSocket challenge was refused: ${badChallenge.message}` : null),
      };
      return { view, connection, observation };
    });
    const observations = reads.map((r) => r.observation);
    const verdict = this.#judge.poll(observations, nowIso);
    for (const found of verdict.newConvictions) {
      this.#evidence.noteConviction(found);
      this.#countEvidence(found.kind, 1);
    }
    const leases = confirmedLeases(observations, cluster.f);
    this.#noteRecentGrants(leases, nowIso);
    const rows: ReplicaRow[] = reads.map(({ view, connection, observation }, k) => {
      const judged = verdict.replicas[k]!;
      const read = healthReads[k]!;
      if (judged.reachable) this.#downSince.delete(view.replica);
      else if (!this.#downSince.has(view.replica)) this.#downSince.set(view.replica, nowIso);
      const previous = this.#samples.get(view.replica);
      if (read.sample) this.#keepSample(view.replica, read.sample);
      const unreachableAs = observation.answer === 'unreachable' ? unreachableKind(view, connection) : null;
      return {
        replica: view.replica,
        endpoint: view.endpoint,
        reachable: judged.reachable,
        unreachableAs,
        downSince: this.#downSince.get(view.replica) ?? null,
        connection:
          observation.answer === 'protocol'
            ? `closed by the console for breaking the protocol: ${observation.message ?? ''}`
            : observation.answer === 'ok'
              ? 'ready'
              : describeUnreachable(view, connection, timeoutMs),
        faulty: judged.faulty,
        faultySince: judged.faultySince,
        convictions: judged.convictions,
        convicted: judged.convictions.some((c) => c.kind === 'equivocation'),
        health: read.health,
        metrics: read.sample
          ? {
              ...metricsFigures(read.sample, previous),
              flushP99Ms: flushQuantileMs(0.99, this.#ruleSamples.get(view.replica) ?? []) ?? null,
            }
          : { error: read.metricsError ?? 'unknown' },
        leasesListed: view.state === 'ok' ? view.leases.length : null,
        leasesCut: view.state === 'ok' && view.more,
      };
    });
    const { margin, available } = verdict;
    this.#history.add({ at: now, margin, ...clusterRates(rows) });
    const alerts = this.#alerts.evaluate({
      at: now,
      margin,
      t: cluster.t,
      metricsUp: new Map(healthReads.map((read, k) => [leaseViews[k]!.replica, read.sample !== undefined])),
      thresholdKnown: (this.#metricsSeen ||= healthReads.some((read) => read.sample !== undefined)),
      evidenceByKind: this.#evidenceByKind,
      faulty: new Map(rows.map((r) => [r.replica, r.faulty !== null])),
      samples: this.#ruleSamples,
    });
    const leaseListsCut = rows.filter((r) => r.leasesCut).map((r) => r.replica);
    const situation = assessSituation({
      polls: this.#state.polls + 1,
      n: cluster.n,
      t: cluster.t,
      margin,
      available,
      timeoutMs,
      replicas: rows,
      alerts,
      leasesAtRisk: leases.filter((l) => l.atRisk).map((l) => l.resource),
      leaseListsCut,
    });
    if (this.#statusSince?.status !== situation.status) {
      this.#statusSince = { status: situation.status, since: nowIso };
      this.#dirty = true;
    }
    this.#export(rows, margin);
    this.#logChanges({ margin, replicas: rows, alerts, status: situation.status, headline: situation.headline });
    const names = this.#options.holderNames;
    const named = <T extends { holder: string }>(x: T) => ({ ...x, holderName: names?.get(x.holder) ?? null });
    const points = this.#history.points();
    this.#state = {
      ...this.#state,
      polledAt: nowIso,
      polls: this.#state.polls + 1,
      lastPollMs: Math.round(performance.now() - started),
      margin,
      available,
      status: situation.status,
      headline: situation.headline,
      statusSince: this.#statusSince.since,
      reasons: situation.reasons,
      actions: situation.actions,
      replicaOrder: worstFirst(rows),
      replicas: rows,
      leases: leases.map((l) => named({ ...l, epoch: l.epoch.toString() })),
      recentGrants: this.#recent.map(named),
      leaseLists: { limit: MAX_LEASES_PER_REPLY, cut: leaseListsCut },
      watched: this.#options.watch.map((resource) => watchedRow(resource, watchedStatus.get(resource), leases)),
      evidence: this.#evidence.rows(),
      probedResources: resources.size,
      history: { ...this.#state.history, points, dataSince: points[0]?.at ?? null },
      alerts,
      alertSummary: summariseAlerts(alerts),
    };
    this.#maybeSave(now);
  }

  /** Writes the store when it is due (SAVE_EVERY_MS) or something new must not be lost; never two writes at once. */
  #maybeSave(now: number): void {
    if (!this.#options.store || this.#saving || this.#stopped) return;
    if (!this.#dirty && now - this.#lastSavedAt < SAVE_EVERY_MS) return;
    this.#saving = this.#save(now).finally(() => (this.#saving = undefined));
  }

  async #save(now: number): Promise<void> {
    const store = this.#options.store!;
    this.#dirty = false;
    try {
      await store.save(this.#snapshot(now));
      this.#lastSavedAt = now;
      this.#persistenceError = null;
    } catch (error) {
      this.#dirty = true;
      this.#persistenceError = describeFailure(error);
      this.#options.logger?.error({ err: error, path: store.path }, 'cannot write the console store');
    }
    this.#state = {
      ...this.#state,
      persistence: {
        enabled: true,
        restoredFrom: this.#restoredFrom,
        lastSavedAt: this.#lastSavedAt ? new Date(this.#lastSavedAt).toISOString() : null,
        error: this.#persistenceError,
      },
    };
  }

  #snapshot(now: number): ConsoleSnapshot {
    return {
      savedAt: now,
      history: this.#history.stored(),
      recentGrants: this.#recent,
      alertTimers: this.#alerts.timers(),
      downSince: [...this.#downSince],
      status: this.#statusSince,
      convictions: this.#judge.allConvictions(),
      evidence: this.#evidence.stored(),
      evidenceByKind: { ...this.#evidenceByKind },
    };
  }

  /**
   * Takes back what an earlier run kept under --data (console-store.ts). Every part is read defensively: what does not
   * read is left out, and the console starts with the rest.
   */
  #restore(): void {
    const store = this.#options.store;
    const snapshot = store?.load();
    if (!snapshot || typeof snapshot.savedAt !== 'number' || !Number.isFinite(snapshot.savedAt)) return;
    const now = Date.now();
    const n = this.#client.cluster.n;
    const isReplica = (r: unknown): r is number => typeof r === 'number' && Number.isSafeInteger(r) && r >= 1 && r <= n;
    const isText = (v: unknown): v is string => typeof v === 'string' && v.length <= 1_000;
    const arrayOf = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
    this.#history.restore(arrayOf(snapshot.history) as never, now);
    for (const g of arrayOf(snapshot.recentGrants).slice(0, MAX_RECENT_GRANTS) as Partial<RecentGrant>[]) {
      if (!isText(g?.resource) || !isText(g.epoch) || !isText(g.holder) || !isText(g.firstSeenAt)) continue;
      this.#recent.push({ resource: g.resource, epoch: g.epoch, holder: g.holder, firstSeenAt: g.firstSeenAt });
      this.#seen.set(`${g.epoch}\u0000${g.holder}\u0000${g.resource}`, true);
    }
    const timers = arrayOf(snapshot.alertTimers).filter(
      (e): e is [string, number] => Array.isArray(e) && isText(e[0]) && typeof e[1] === 'number',
    );
    this.#alerts.restoreTimers(timers, snapshot.savedAt, now);
    for (const e of arrayOf(snapshot.downSince))
      if (Array.isArray(e) && isReplica(e[0]) && isText(e[1])) this.#downSince.set(e[0], e[1]);
    const status = snapshot.status as { status?: unknown; since?: unknown } | null | undefined;
    if (isText(status?.status) && isText(status.since))
      this.#statusSince = { status: status.status as ClusterStatus, since: status.since };
    for (const c of arrayOf(snapshot.convictions) as { replica?: unknown; conviction?: Partial<Conviction> }[]) {
      const v = c?.conviction;
      if (!isReplica(c?.replica) || !v || !isFaultKind(v.kind) || !isText(v.reason)) continue;
      if (!isText(v.firstAt) || !isText(v.lastAt) || typeof v.count !== 'number') continue;
      this.#judge.restore(c.replica, {
        kind: v.kind,
        reason: v.reason,
        firstAt: v.firstAt,
        lastAt: v.lastAt,
        count: v.count,
      });
    }
    const evidence = snapshot.evidence as { nextId?: unknown; items?: unknown } | undefined;
    const { skipped } = this.#evidence.restore({
      nextId: typeof evidence?.nextId === 'number' ? evidence.nextId : 1,
      items: arrayOf(evidence?.items) as never,
    });
    if (skipped > 0)
      this.#options.logger?.warn({ skipped }, 'evidence in the console store that does not read was left out');
    const counts = snapshot.evidenceByKind;
    if (typeof counts === 'object' && counts !== null)
      for (const [kind, count] of Object.entries(counts).slice(0, 64))
        if (kind.length <= 40 && typeof count === 'number' && Number.isSafeInteger(count) && count > 0)
          this.#countEvidence(kind, count);
    this.#dirty = false;
    this.#lastSavedAt = snapshot.savedAt;
    this.#restoredFrom = new Date(snapshot.savedAt).toISOString();
    const points = this.#history.points();
    this.#state = {
      ...this.#state,
      history: { ...this.#state.history, points, dataSince: points[0]?.at ?? null },
      recentGrants: this.#recent.map((g) => ({ ...g, holderName: this.#options.holderNames?.get(g.holder) ?? null })),
      evidence: this.#evidence.rows(),
      persistence: { enabled: true, restoredFrom: this.#restoredFrom, lastSavedAt: this.#restoredFrom, error: null },
    };
  }

  #noteRecentGrants(leases: readonly QuorumLease[], nowIso: string): void {
    for (const lease of [...leases].reverse()) {
      const key = `${lease.epoch}\u0000${lease.holder}\u0000${lease.resource}`;
      if (this.#seen.get(key)) continue;
      this.#seen.set(key, true);
      this.#recent.unshift({
        resource: lease.resource,
        epoch: lease.epoch.toString(),
        holder: lease.holder,
        firstSeenAt: nowIso,
      });
    }
    this.#recent.splice(MAX_RECENT_GRANTS);
  }

  /** Keeps the latest sample, and one per RULE_SAMPLE_SPACING_MS over the alert rules' window. */
  #keepSample(replica: number, sample: MetricsSample): void {
    this.#samples.set(replica, sample);
    const window = this.#ruleSamples.get(replica) ?? [];
    this.#ruleSamples.set(replica, window);
    const beforeLast = window.at(-2);
    if (beforeLast && sample.at - beforeLast.at < RULE_SAMPLE_SPACING_MS) window[window.length - 1] = sample;
    else window.push(sample);
    while (window.length > 0 && window[0]!.at < sample.at - RULE_WINDOW_MS) window.shift();
  }

  #export(rows: readonly ReplicaRow[], margin: number): void {
    const m = this.#options.metrics;
    m.quorumMargin.set(margin);
    for (const row of rows) {
      m.replicaReachable.set({ replica: String(row.replica) }, row.reachable ? 1 : 0);
      m.replicaFaulty.set({ replica: String(row.replica) }, row.faulty === null ? 0 : 1);
    }
  }

  #logChanges(after: ChangeSnapshot): void {
    const logger = this.#options.logger;
    if (!logger) return;
    const before: ChangeSnapshot | undefined = this.#state.polls === 0 ? undefined : this.#state;
    for (const change of stateChanges(before, after))
      logger[change.level]({ event: change.event, ...change.fields }, change.message);
  }

  async #readHealth(index: number, endpoint: string): Promise<HealthRead> {
    const base = httpBase(endpoint);
    const { timeoutMs } = this.#options;
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
      const cluster = this.#client.cluster;
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
}

/**
 * How an unanswering replica is unreachable, from the console's connection to it: hung when the connection is open (or
 * its socket opens) and nothing comes back in time, login_refused when it refused the console's identity, down when
 * nothing listens (refused, closed, not connected).
 */
function unreachableKind(view: ReplicaLeases, connection: ConnectionState): UnreachableKind {
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

/** A watched resource's row from its status round (undefined: the round could not be asked). */
function watchedRow(
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

/** The cluster's rates for the history: the replicas' own figures, summed. */
function clusterRates(rows: readonly ReplicaRow[]): {
  grantsPerSecond: number | null;
  refusalsPerSecond: Record<string, number>;
} {
  let grantsPerSecond: number | null = null;
  const refusalsPerSecond: Record<string, number> = {};
  for (const row of rows) {
    if ('error' in row.metrics) continue;
    if (row.metrics.grantsPerSecond !== null) grantsPerSecond = (grantsPerSecond ?? 0) + row.metrics.grantsPerSecond;
    for (const [reason, rate] of Object.entries(row.metrics.refusalsPerSecond ?? {}))
      refusalsPerSecond[reason] = (refusalsPerSecond[reason] ?? 0) + rate;
  }
  return { grantsPerSecond, refusalsPerSecond };
}

function describeFailure(error: unknown): string {
  return isQuorumFenceError(error) ? `${error.code}: ${error.message}` : String(error).slice(0, 200);
}
