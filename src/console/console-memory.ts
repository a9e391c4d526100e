/**
 * What the console keeps from poll to poll, each part bounded: the 15-minute history, the /metrics samples the
 * alert rules read and the rules' timers, the recent grants, since when each replica is down and the status holds,
 * and the evidence counted by kind; with the judge's convictions and the evidence store, the snapshot `--data`
 * writes (console-store.ts) and taking it back at a start. Apart from the questions (replica-poll.ts) and the poll
 * loop that makes each poll's state from them (watcher.ts): this is what the polls add up to, and what survives a
 * restart.
 */
import { BoundedMap } from '../common/bounded-map.js';
import { AlertEvaluator, RULE_WINDOW_MS } from './alerts.js';
import type { ConsoleSnapshot, RecentGrant } from './console-store.js';
import type { ReplicaRow } from './console-state.js';
import type { EvidenceStore } from './evidence-store.js';
import { RollingHistory } from './history.js';
import type { MetricsSample } from './replica-health.js';
import type { ClusterStatus } from './situation.js';
import { isFaultKind, type ConsoleJudge, type Conviction, type QuorumLease } from './view.js';

/** Recent grants kept for the page, newest first. */
const MAX_RECENT_GRANTS = 50;
/** Leases already seen, so each shows once in the recent grants. */
const SEEN_LEASES = 4096;
/** /metrics samples kept per replica for the alert rules' 5-minute windows: one per 10 s is ~31 of them. */
const RULE_SAMPLE_SPACING_MS = 10_000;

export class ConsoleMemory {
  readonly history = new RollingHistory();
  readonly alerts = new AlertEvaluator();
  /** Replica → its latest /metrics sample, and its samples over the alert rules' window. */
  readonly samples = new Map<number, MetricsSample>();
  readonly ruleSamples = new Map<number, MetricsSample[]>();
  /** Some replica's /metrics has answered since the start (the alerts' stand-in for Prometheus remembering the threshold). */
  metricsSeen = false;
  /** Replica → since when it has not been reachable (ISO 8601, UTC). */
  readonly downSince = new Map<number, string>();
  readonly #seen = new BoundedMap<string, true>(SEEN_LEASES);
  /** Recent grants, newest first, each lease once. */
  readonly recent: RecentGrant[] = [];
  /** The status and since when it holds. */
  statusSince: { status: ClusterStatus; since: string } | null = null;
  /** Evidence recorded, by kind, as quorumfence_console_evidence_total counts it (kept across restarts with --data). */
  readonly evidenceByKind: Record<string, number> = {};
  readonly #judge: ConsoleJudge;
  readonly #evidence: EvidenceStore;

  /** The judge and the evidence store are the watcher's; their convictions and evidence go into the snapshot. */
  constructor(judge: ConsoleJudge, evidence: EvidenceStore) {
    this.#judge = judge;
    this.#evidence = evidence;
  }

  /** Adds to the count of one kind (the watcher counts its metric alongside). */
  countEvidence(kind: string, count: number): void {
    this.evidenceByKind[kind] = (this.evidenceByKind[kind] ?? 0) + count;
  }

  /** Adds the leases not seen before to the recent grants, first seen now. */
  noteRecentGrants(leases: readonly QuorumLease[], nowIso: string): void {
    for (const lease of [...leases].reverse()) {
      const key = `${lease.epoch}\u0000${lease.holder}\u0000${lease.resource}`;
      if (this.#seen.get(key)) continue;
      this.#seen.set(key, true);
      this.recent.unshift({
        resource: lease.resource,
        epoch: lease.epoch.toString(),
        holder: lease.holder,
        firstSeenAt: nowIso,
      });
    }
    this.recent.splice(MAX_RECENT_GRANTS);
  }

  /** Keeps the latest sample, and one per RULE_SAMPLE_SPACING_MS over the alert rules' window. */
  keepSample(replica: number, sample: MetricsSample): void {
    this.samples.set(replica, sample);
    const window = this.ruleSamples.get(replica) ?? [];
    this.ruleSamples.set(replica, window);
    const beforeLast = window.at(-2);
    if (beforeLast && sample.at - beforeLast.at < RULE_SAMPLE_SPACING_MS) window[window.length - 1] = sample;
    else window.push(sample);
    while (window.length > 0 && window[0]!.at < sample.at - RULE_WINDOW_MS) window.shift();
  }

  /** Everything --data keeps, as of now. */
  snapshot(now: number): ConsoleSnapshot {
    return {
      savedAt: now,
      history: this.history.stored(),
      recentGrants: this.recent,
      alertTimers: this.alerts.timers(),
      downSince: [...this.downSince],
      status: this.statusSince,
      convictions: this.#judge.allConvictions(),
      evidence: this.#evidence.stored(),
      evidenceByKind: { ...this.evidenceByKind },
    };
  }

  /**
   * Takes back what an earlier run kept, saved at savedAt: every part is read defensively, and what
   * does not read is left out. Returns how many evidence items were left out and the evidence counts by kind that
   * read, for the watcher to count again (they feed its metrics).
   */
  restore(
    snapshot: Partial<ConsoleSnapshot>,
    savedAt: number,
    n: number,
    now: number,
  ): { readonly skipped: number; readonly evidenceByKind: readonly (readonly [string, number])[] } {
    const isReplica = (r: unknown): r is number => typeof r === 'number' && Number.isSafeInteger(r) && r >= 1 && r <= n;
    const isText = (v: unknown): v is string => typeof v === 'string' && v.length <= 1_000;
    const arrayOf = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
    this.history.restore(arrayOf(snapshot.history) as never, now);
    for (const g of arrayOf(snapshot.recentGrants).slice(0, MAX_RECENT_GRANTS) as Partial<RecentGrant>[]) {
      if (!isText(g?.resource) || !isText(g.epoch) || !isText(g.holder) || !isText(g.firstSeenAt)) continue;
      this.recent.push({ resource: g.resource, epoch: g.epoch, holder: g.holder, firstSeenAt: g.firstSeenAt });
      this.#seen.set(`${g.epoch}\u0000${g.holder}\u0000${g.resource}`, true);
    }
    const timers = arrayOf(snapshot.alertTimers).filter(
      (e): e is [string, number] => Array.isArray(e) && isText(e[0]) && typeof e[1] === 'number',
    );
    this.alerts.restoreTimers(timers, savedAt, now);
    for (const e of arrayOf(snapshot.downSince))
      if (Array.isArray(e) && isReplica(e[0]) && isText(e[1])) this.downSince.set(e[0], e[1]);
    const status = snapshot.status as { status?: unknown; since?: unknown } | null | undefined;
    if (isText(status?.status) && isText(status.since))
      this.statusSince = { status: status.status as ClusterStatus, since: status.since };
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
    const evidenceByKind: [string, number][] = [];
    const counts = snapshot.evidenceByKind;
    if (typeof counts === 'object' && counts !== null)
      for (const [kind, count] of Object.entries(counts).slice(0, 64))
        if (kind.length <= 40 && typeof count === 'number' && Number.isSafeInteger(count) && count > 0)
          evidenceByKind.push([kind, count]);
    return { skipped, evidenceByKind };
  }
}

/** The cluster's rates for the history: the replicas' own figures, summed. */
export function clusterRates(rows: readonly ReplicaRow[]): {
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
