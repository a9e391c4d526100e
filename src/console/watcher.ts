/**
 * The console's poll loop: once per interval it asks every replica for its running leases (the `leases`
 * request), the status of every resource any replica lists plus the watched ones, its /healthz and its
 * /metrics; judges the answers (view.ts); and keeps the state the page shows, its history, which shipped
 * alerts would fire, and logs what changed. Polls never overlap, and everything it keeps is bounded.
 *
 * The questions and how each replica's answers read are in replica-poll.ts; what the polls add up to (history,
 * alert timers, recent grants, down-since) and its snapshot for --data in console-memory.ts; the state's shape
 * in console-state.ts. Here: the loop, the evidence handed in, each poll's state, and when the store is written.
 */
import type { QuorumFenceClient } from '../client/client.js';
import type { EvidenceLog } from '../client/evidence.js';
import { MAX_LEASES_PER_REPLY } from '../protocol/messages.js';
import type { Logger } from '../common/log.js';
import { flushQuantileMs, summariseAlerts } from './alerts.js';
import { stateChanges, type ChangeSnapshot } from './changes.js';
import { ConsoleMemory, clusterRates } from './console-memory.js';
import { initialState, watchedRow, type ConsoleState, type ReplicaRow } from './console-state.js';
import type { ConsoleStore } from './console-store.js';
import { equivocationFromJson } from './evidence-json.js';
import { EvidenceStore, type EvidenceDocument } from './evidence-store.js';
import { HISTORY_BUCKET_MS } from './history.js';
import type { ConsoleMetrics } from './metrics.js';
import { metricsFigures } from './replica-health.js';
import { ReplicaObserver, askReplicas, connectionWords, describeFailure, unreachableKind } from './replica-poll.js';
import { assessSituation, worstFirst } from './situation.js';
import { ConsoleJudge, confirmedLeases } from './view.js';

export type { ConsoleState, ReplicaFigures, ReplicaRow, WatchedResource } from './console-state.js';

/** The store (--data) is written at least this often, and at once when evidence, a conviction or the status is new. */
const SAVE_EVERY_MS = HISTORY_BUCKET_MS;

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

export class ConsoleWatcher {
  readonly #options: ConsoleWatcherOptions;
  readonly #client: QuorumFenceClient;
  readonly #judge: ConsoleJudge;
  readonly #evidence: EvidenceStore;
  #lastEvidenceId = 0;
  /** What the polls add up to, and what --data keeps of it. */
  readonly #memory: ConsoleMemory;
  /** Each replica's connection and the client's protocol faults from one poll to the next. */
  readonly #observer = new ReplicaObserver();
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

  constructor(options: ConsoleWatcherOptions) {
    this.#options = options;
    this.#client = options.client;
    const { cluster } = this.#client;
    this.#judge = new ConsoleJudge(cluster.f);
    this.#evidence = new EvidenceStore(cluster);
    this.#memory = new ConsoleMemory(this.#judge, this.#evidence);
    this.#state = initialState(cluster, {
      intervalMs: options.intervalMs,
      timeoutMs: options.timeoutMs,
      persisted: options.store !== undefined,
    });
    this.#restore();
    for (const item of options.evidence.list()) this.#noteEvidence(item);
    this.#unsubscribe = options.evidence.subscribe((item) => this.#noteEvidence(item));
    this.#client.on('fault', this.#observer.onFault);
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
    this.#client.off('fault', this.#observer.onFault);
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
    this.#memory.countEvidence(kind, count);
    this.#options.metrics.evidence.inc({ kind }, count);
    this.#dirty = true;
  }

  async #poll(): Promise<void> {
    const started = performance.now();
    const { client } = this;
    const { timeoutMs } = this.#options;
    const cluster = client.cluster;
    const memory = this.#memory;
    const answers = await askReplicas(client, this.#options.watch, timeoutMs);
    if (!answers) return;
    const { leaseViews, healthReads, resources, watchedStatus } = answers;
    if (this.#stopped) return;
    const now = Date.now();
    const nowIso = new Date(now).toISOString();
    const reads = this.#observer.observe(client, answers);
    const observations = reads.map((r) => r.observation);
    const verdict = this.#judge.poll(observations, nowIso);
    for (const found of verdict.newConvictions) {
      this.#evidence.noteConviction(found);
      this.#countEvidence(found.kind, 1);
    }
    const leases = confirmedLeases(observations, cluster.f);
    memory.noteRecentGrants(leases, nowIso);
    const rows: ReplicaRow[] = reads.map(({ view, connection, observation }, k) => {
      const judged = verdict.replicas[k]!;
      const read = healthReads[k]!;
      if (judged.reachable) memory.downSince.delete(view.replica);
      else if (!memory.downSince.has(view.replica)) memory.downSince.set(view.replica, nowIso);
      const previous = memory.samples.get(view.replica);
      if (read.sample) memory.keepSample(view.replica, read.sample);
      const unreachableAs = observation.answer === 'unreachable' ? unreachableKind(view, connection) : null;
      return {
        replica: view.replica,
        endpoint: view.endpoint,
        reachable: judged.reachable,
        unreachableAs,
        downSince: memory.downSince.get(view.replica) ?? null,
        connection: connectionWords(view, connection, observation, timeoutMs),
        faulty: judged.faulty,
        faultySince: judged.faultySince,
        convictions: judged.convictions,
        convicted: judged.convictions.some((c) => c.kind === 'equivocation'),
        health: read.health,
        metrics: read.sample
          ? {
              ...metricsFigures(read.sample, previous),
              flushP99Ms: flushQuantileMs(0.99, memory.ruleSamples.get(view.replica) ?? []) ?? null,
            }
          : { error: read.metricsError ?? 'unknown' },
        leasesListed: view.state === 'ok' ? view.leases.length : null,
        leasesCut: view.state === 'ok' && view.more,
      };
    });
    const { margin, available } = verdict;
    memory.history.add({ at: now, margin, ...clusterRates(rows) });
    const alerts = memory.alerts.evaluate({
      at: now,
      margin,
      t: cluster.t,
      metricsUp: new Map(healthReads.map((read, k) => [leaseViews[k]!.replica, read.sample !== undefined])),
      thresholdKnown: (memory.metricsSeen ||= healthReads.some((read) => read.sample !== undefined)),
      evidenceByKind: memory.evidenceByKind,
      faulty: new Map(rows.map((r) => [r.replica, r.faulty !== null])),
      samples: memory.ruleSamples,
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
    if (memory.statusSince?.status !== situation.status) {
      memory.statusSince = { status: situation.status, since: nowIso };
      this.#dirty = true;
    }
    this.#export(rows, margin);
    this.#logChanges({ margin, replicas: rows, alerts, status: situation.status, headline: situation.headline });
    const names = this.#options.holderNames;
    const named = <T extends { holder: string }>(x: T) => ({ ...x, holderName: names?.get(x.holder) ?? null });
    const points = memory.history.points();
    this.#state = {
      ...this.#state,
      polledAt: nowIso,
      polls: this.#state.polls + 1,
      lastPollMs: Math.round(performance.now() - started),
      margin,
      available,
      status: situation.status,
      headline: situation.headline,
      statusSince: memory.statusSince.since,
      reasons: situation.reasons,
      actions: situation.actions,
      replicaOrder: worstFirst(rows),
      replicas: rows,
      leases: leases.map((l) => named({ ...l, epoch: l.epoch.toString() })),
      recentGrants: memory.recent.map(named),
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
      await store.save(this.#memory.snapshot(now));
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

  /**
   * Takes back what an earlier run kept under --data (console-store.ts). Every part is read defensively: what does not
   * read is left out, and the console starts with the rest.
   */
  #restore(): void {
    const store = this.#options.store;
    const snapshot = store?.load();
    if (!snapshot || typeof snapshot.savedAt !== 'number' || !Number.isFinite(snapshot.savedAt)) return;
    const { skipped, evidenceByKind } = this.#memory.restore(
      snapshot,
      snapshot.savedAt,
      this.#client.cluster.n,
      Date.now(),
    );
    if (skipped > 0)
      this.#options.logger?.warn({ skipped }, 'evidence in the console store that does not read was left out');
    for (const [kind, count] of evidenceByKind) this.#countEvidence(kind, count);
    this.#dirty = false;
    this.#lastSavedAt = snapshot.savedAt;
    this.#restoredFrom = new Date(snapshot.savedAt).toISOString();
    const points = this.#memory.history.points();
    this.#state = {
      ...this.#state,
      history: { ...this.#state.history, points, dataSince: points[0]?.at ?? null },
      recentGrants: this.#memory.recent.map((g) => ({
        ...g,
        holderName: this.#options.holderNames?.get(g.holder) ?? null,
      })),
      evidence: this.#evidence.rows(),
      persistence: { enabled: true, restoredFrom: this.#restoredFrom, lastSavedAt: this.#restoredFrom, error: null },
    };
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
}
