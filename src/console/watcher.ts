/**
 * The console's poll loop: once per interval it asks every replica for its running leases (the `leases`
 * request), the status of every resource any replica lists plus the watched ones, its /healthz and its
 * /metrics; judges the answers (view.ts); and keeps the state the page shows, its history, which shipped
 * alerts would fire, and logs what changed. Polls never overlap, and everything it keeps is bounded.
 */
import type { QuorumFenceClient } from '../client/client.js';
import type { EvidenceLog } from '../client/evidence.js';
import type { ReplicaLeases } from '../client/active-leases.js';
import type { ConnectionState } from '../client/connection-state.js';
import { BoundedMap } from '../common/bounded-map.js';
import { isQuorumFenceError } from '../common/errors.js';
import type { Logger } from '../common/log.js';
import { AlertEvaluator, RULE_WINDOW_MS, type AlertState } from './alerts.js';
import { stateChanges, type ChangeSnapshot } from './changes.js';
import { equivocationFromJson, equivocationToJson, type EquivocationJson } from './evidence-json.js';
import { EvidenceStore, type EvidenceRow } from './evidence-store.js';
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
import { ConsoleJudge, confirmedLeases, type Conviction, type QuorumLease, type ReplicaObservation } from './view.js';

/** Recent grants kept for the page, newest first. */
const MAX_RECENT_GRANTS = 50;
/** Leases already seen, so each shows once in the recent grants. */
const SEEN_LEASES = 4096;
/** /metrics samples kept per replica for the alert rules' 5-minute windows: one per 10 s is ~31 of them. */
const RULE_SAMPLE_SPACING_MS = 10_000;

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
}

export interface ReplicaRow {
  readonly replica: number;
  readonly endpoint: string;
  /** The console's WebSocket connection is up and the replica answered the last poll's leases request. */
  readonly reachable: boolean;
  /** Since when it has not been reachable (ISO 8601, UTC), or null. */
  readonly downSince: string | null;
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
  readonly metrics: MetricsFigures | { readonly error: string };
  /** How many leases it listed (its word). */
  readonly leasesListed: number | null;
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
  readonly replicas: readonly ReplicaRow[];
  readonly leases: readonly Named<Omit<QuorumLease, 'epoch'> & { readonly epoch: string }>[];
  readonly recentGrants: readonly Named<{
    readonly resource: string;
    readonly epoch: string;
    readonly holder: string;
    readonly firstSeenAt: string;
  }>[];
  readonly evidence: readonly EvidenceRow[];
  readonly probedResources: number;
  readonly history: { readonly bucketSeconds: number; readonly windowSeconds: number; readonly points: HistoryPoint[] };
  /** Which shipped alert rules would fire now (alerts.ts). */
  readonly alerts: readonly AlertState[];
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
  readonly #recent: ConsoleState['recentGrants'][number][] = [];
  #state: ConsoleState;
  #timer: NodeJS.Timeout | undefined;
  #polling: Promise<void> | undefined;
  #stopped = false;
  readonly #unsubscribe: () => void;

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
      replicas: [],
      leases: [],
      recentGrants: [],
      evidence: [],
      probedResources: 0,
      history: { bucketSeconds: HISTORY_BUCKET_MS / 1000, windowSeconds: HISTORY_WINDOW_MS / 1000, points: [] },
      alerts: [],
    };
    for (const item of options.evidence.list()) this.#noteEvidence(item);
    this.#unsubscribe = options.evidence.subscribe((item) => this.#noteEvidence(item));
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

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#unsubscribe();
    await this.#polling;
  }

  get state(): ConsoleState {
    return this.#state;
  }

  get client(): QuorumFenceClient {
    return this.#client;
  }

  /** The downloadable document of evidence `id`, or undefined. */
  evidenceDocument(id: number): EquivocationJson | undefined {
    const item = this.#evidence.downloadable(id);
    return item ? equivocationToJson(item) : undefined;
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
    this.#evidenceByKind[item.kind] = (this.#evidenceByKind[item.kind] ?? 0) + 1;
    this.#options.metrics.evidence.inc({ kind: item.kind });
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
    await Promise.all(
      [...resources].map(async (resource) => {
        // A name a replica made up may not even be a valid resource: then there is nothing to ask.
        const status = await client.status(resource, { timeoutMs }).catch(() => undefined);
        for (const view of status?.replicas ?? [])
          if (view.state === 'ok') statusEpochs.get(view.replica)?.set(resource, view.epoch);
      }),
    );
    if (this.#stopped) return;
    const now = Date.now();
    const nowIso = new Date(now).toISOString();
    const connections = client.replicas();
    const observations: ReplicaObservation[] = leaseViews.map((view, k) => {
      const connection = connections.find((c) => c.replica === view.replica)!.state;
      const previous = this.#connections.get(view.replica);
      this.#connections.set(view.replica, connection);
      const health = healthReads[k]!.health;
      return {
        replica: view.replica,
        answer:
          view.state === 'ok' && connection.phase === 'ready'
            ? 'ok'
            : view.state === 'faulty'
              ? 'protocol'
              : 'unreachable',
        message: view.state === 'ok' ? undefined : view.message,
        leases: view.state === 'ok' ? view.leases : undefined,
        statusEpochs: statusEpochs.get(view.replica) ?? new Map(),
        // Connection states are immutable: every transition makes a new object, so a new one means it reconnected.
        newConnection: previous !== undefined && previous !== connection,
        identityMismatch: 'error' in health ? null : health.mismatch,
      };
    });
    const verdict = this.#judge.poll(observations, nowIso);
    const leases = confirmedLeases(observations, cluster.f);
    this.#noteRecentGrants(leases, nowIso);
    const rows: ReplicaRow[] = leaseViews.map((view, k) => {
      const judged = verdict.replicas[k]!;
      const read = healthReads[k]!;
      if (judged.reachable) this.#downSince.delete(view.replica);
      else if (!this.#downSince.has(view.replica)) this.#downSince.set(view.replica, nowIso);
      const previous = this.#samples.get(view.replica);
      if (read.sample) this.#keepSample(view.replica, read.sample);
      return {
        replica: view.replica,
        endpoint: view.endpoint,
        reachable: judged.reachable,
        downSince: this.#downSince.get(view.replica) ?? null,
        connection: view.state === 'ok' ? 'ready' : `${view.state}: ${view.message}`,
        faulty: judged.faulty,
        faultySince: judged.faultySince,
        convictions: judged.convictions,
        convicted: judged.convictions.some((c) => c.kind === 'equivocation'),
        health: read.health,
        metrics: read.sample ? metricsFigures(read.sample, previous) : { error: read.metricsError ?? 'unknown' },
        leasesListed: view.state === 'ok' ? view.leases.length : null,
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
      samples: this.#ruleSamples,
    });
    this.#export(rows, margin);
    this.#logChanges({ margin, replicas: rows, alerts });
    const names = this.#options.holderNames;
    const named = <T extends { holder: string }>(x: T) => ({ ...x, holderName: names?.get(x.holder) ?? null });
    this.#state = {
      ...this.#state,
      polledAt: nowIso,
      polls: this.#state.polls + 1,
      lastPollMs: Math.round(performance.now() - started),
      margin,
      available,
      replicas: rows,
      leases: leases.map((l) => named({ ...l, epoch: l.epoch.toString() })),
      recentGrants: this.#recent.map(named),
      evidence: this.#evidence.rows(),
      probedResources: resources.size,
      history: { ...this.#state.history, points: this.#history.points() },
      alerts,
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
        holderName: null,
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
    const before: ChangeSnapshot | undefined =
      this.#state.polls === 0 ? undefined : { ...this.#state, alerts: this.#state.alerts };
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
