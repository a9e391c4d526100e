/**
 * Which of the shipped alert rules (deploy/prometheus/alerts.yml) would fire now, from what the console sees:
 * one condition per rule, in one table, each the rule's expression restated over the console's state and the
 * replicas' /metrics samples (the console's reads of /metrics stand for Prometheus's scrapes). Not a PromQL
 * evaluator: test/integration/console-alerts.test.ts checks each condition against Prometheus's own
 * evaluation of alerts.yml (promtool) on generated series, and that every rule in the file has a row here.
 * A new rule gets a row in ALERT_CONDITIONS: either `holds`, or `notEvaluated` saying why the console cannot.
 */
import type { MetricsSample } from './replica-health.js';

/** The window the rules' rate() and histogram_quantile() read (`[5m]`). */
export const RULE_WINDOW_MS = 5 * 60_000;

export interface AlertInput {
  /** The console's clock, ms. */
  readonly at: number;
  /** The console's quorum margin (null before its first poll). */
  readonly margin: number | null;
  /** Partials an acquire needs (2f+1), as the replicas export it. */
  readonly t: number;
  /** Per replica: its /metrics answered at this poll (Prometheus's `up` for the replica job). */
  readonly metricsUp: ReadonlyMap<number, boolean>;
  /**
   * Some replica's /metrics has answered since the console started: it stands for the rules' memory of the threshold
   * t (a day of `max_over_time`), without which Prometheus has no scrape margin to alert on.
   */
  readonly thresholdKnown: boolean;
  /** Evidence recorded, by kind (quorumfence_console_evidence_total; kept across restarts with --data). */
  readonly evidenceByKind: Readonly<Record<string, number>>;
  /** Per replica: the console holds proof that it is faulty (quorumfence_console_replica_faulty). */
  readonly faulty: ReadonlyMap<number, boolean>;
  /** Per replica: its /metrics samples over the last RULE_WINDOW_MS, oldest first. */
  readonly samples: ReadonlyMap<number, readonly MetricsSample[]>;
}

/** One label set for which a rule's expression holds now, with the expression's value. */
export interface AlertInstance {
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

export interface AlertCondition {
  /** The rule's `alert` name in alerts.yml. */
  readonly alert: string;
  readonly severity: 'critical' | 'warning';
  /** The rule's `for` (0 when it has none). */
  readonly forMs: number;
  /** The rule's expression over the console's input: the label sets for which it holds now. */
  readonly holds?: (input: AlertInput) => readonly AlertInstance[];
  /** Why the console cannot evaluate the rule (it reads a metric the console does not see). */
  readonly notEvaluated?: string;
}

/** Evidence made of a replica's signatures (the EquivocationEvidence rule's `kind=~`): anyone can check it. */
export const SIGNATURE_EVIDENCE_KINDS: readonly string[] = ['equivocation', 'invalid_partial'];
/** Refusals that point at clients rather than contention (the RefusalSpike rule's `reason=~`). */
const CLIENT_REFUSALS = ['invalid', 'forbidden', 'too_far', 'not_holder'];
/** The FlushLatencyHigh rule's threshold: a p99 above 50 ms; the replicas' flush histogram has a bucket there. */
const SLOW_FLUSH_BUCKET = '0.05';

/**
 * How much a counter rose over the samples, a drop counted as a restart from zero (as Prometheus's increase()
 * does); undefined with fewer than two samples.
 */
export function counterIncrease(
  samples: readonly MetricsSample[],
  read: (s: MetricsSample) => number,
): number | undefined {
  if (samples.length < 2) return undefined;
  let increase = 0;
  for (let k = 1; k < samples.length; k++) {
    const before = read(samples[k - 1]!);
    const now = read(samples[k]!);
    increase += now >= before ? now - before : now;
  }
  return increase;
}

/** The counter's per-second rate over the samples, or undefined. */
export function counterRate(samples: readonly MetricsSample[], read: (s: MetricsSample) => number): number | undefined {
  const increase = counterIncrease(samples, read);
  const seconds = samples.length >= 2 ? (samples.at(-1)!.at - samples[0]!.at) / 1000 : 0;
  return increase === undefined || seconds <= 0 ? undefined : increase / seconds;
}

/** The shipped rules, one row each, in alerts.yml's order. */
export const ALERT_CONDITIONS: readonly AlertCondition[] = [
  {
    alert: 'QuorumFenceQuorumMarginExhausted',
    severity: 'critical',
    forMs: 60_000,
    // quorumfence_console_quorum_margin < 1
    holds: ({ margin }) => (margin !== null && margin < 1 ? [{ labels: {}, value: margin }] : []),
  },
  {
    alert: 'QuorumFenceQuorumMarginExhaustedByScrape',
    severity: 'critical',
    forMs: 120_000,
    // (count of the replicas whose threshold series is fresh, or 0) - the threshold remembered for a day < 1: a
    // failed scrape makes the series stale at once, so fresh series are the replicas whose /metrics answered.
    holds: ({ metricsUp, t, thresholdKnown }) => {
      const value = [...metricsUp.values()].filter(Boolean).length - t;
      return thresholdKnown && value < 1 ? [{ labels: {}, value }] : [];
    },
  },
  {
    alert: 'QuorumFenceReplicaDown',
    severity: 'warning',
    forMs: 120_000,
    // up{job="quorumfence-replicas"} == 0
    holds: ({ metricsUp }) =>
      [...metricsUp].filter(([, up]) => !up).map(([replica]) => ({ labels: { replica: String(replica) }, value: 0 })),
  },
  {
    alert: 'QuorumFenceReplicaFaulty',
    severity: 'critical',
    forMs: 0,
    // max by (replica) (quorumfence_console_replica_faulty) > 0
    holds: ({ faulty }) =>
      [...faulty]
        .filter(([, proven]) => proven)
        .map(([replica]) => ({ labels: { replica: String(replica) }, value: 1 })),
  },
  {
    alert: 'QuorumFenceEquivocationEvidence',
    severity: 'critical',
    forMs: 0,
    // sum by (kind) (quorumfence_console_evidence_total{kind=~"equivocation|invalid_partial"}) > 0
    holds: ({ evidenceByKind }) =>
      Object.entries(evidenceByKind)
        .filter(([kind, count]) => SIGNATURE_EVIDENCE_KINDS.includes(kind) && count > 0)
        .map(([kind, count]) => ({ labels: { kind }, value: count })),
  },
  {
    alert: 'QuorumFenceGuardConflict',
    severity: 'critical',
    forMs: 0,
    notEvaluated: 'it reads the guards’ quorumfence_guard_conflicts_total; the console does not read guards',
  },
  {
    alert: 'QuorumFenceFlushLatencyHigh',
    severity: 'warning',
    forMs: 600_000,
    // histogram_quantile(0.99, sum by (le, replica) (rate(flush_seconds_bucket[5m]))) > 0.05: the p99 is above
    // the 0.05 bucket's bound exactly when fewer than 99 % of the window's flushes fell in that bucket.
    holds: ({ samples }) =>
      [...samples].flatMap(([replica, window]) => {
        const all = counterIncrease(window, (s) => s.flushBuckets['+Inf'] ?? 0);
        const fast = counterIncrease(window, (s) => s.flushBuckets[SLOW_FLUSH_BUCKET] ?? 0);
        if (all === undefined || fast === undefined || all <= 0 || fast >= 0.99 * all) return [];
        return [{ labels: { replica: String(replica) }, value: 1 - fast / all }];
      }),
  },
  {
    alert: 'QuorumFenceRefusalSpike',
    severity: 'warning',
    forMs: 300_000,
    // sum by (replica, reason) (rate(refusals_total{reason=~"invalid|forbidden|too_far|not_holder"}[5m])) > 1
    holds: ({ samples }) =>
      [...samples].flatMap(([replica, window]) =>
        CLIENT_REFUSALS.flatMap((reason) => {
          const rate = counterRate(window, (s) => s.refusals[reason] ?? 0);
          return rate !== undefined && rate > 1 ? [{ labels: { replica: String(replica), reason }, value: rate }] : [];
        }),
      ),
  },
];

export interface AlertInstanceState extends AlertInstance {
  /** firing once its expression held for the rule's `for`; pending before. */
  readonly state: 'firing' | 'pending';
  /** Since when the expression holds (ISO 8601, UTC). */
  readonly since: string;
  /** When it fires (or fired): `since` plus the rule's `for` (ISO 8601, UTC). */
  readonly firesAt: string;
}

export interface AlertState {
  readonly alert: string;
  readonly severity: string;
  readonly state: 'firing' | 'pending' | 'inactive' | 'not evaluated';
  readonly instances: readonly AlertInstanceState[];
  readonly note: string | null;
}

const labelKey = (alert: string, labels: Readonly<Record<string, string>>) =>
  `${alert}\u0000${JSON.stringify(Object.entries(labels).sort(([a], [b]) => a.localeCompare(b)))}`;

/** How many rules fire and how many are pending, and when the first pending one fires (the page's alerts tile). */
export interface AlertSummary {
  readonly firing: number;
  readonly firingCritical: number;
  readonly pending: number;
  /** The earliest time a pending instance fires if its expression keeps holding (ISO 8601, UTC), or null. */
  readonly nextFiresAt: string | null;
}

/** Counts rules (not label sets): a rule is firing when any of its instances is, pending when one is and none fires. */
export function summariseAlerts(alerts: readonly AlertState[]): AlertSummary {
  const firing = alerts.filter((a) => a.state === 'firing');
  const pending = alerts.flatMap((a) => a.instances.filter((i) => i.state === 'pending'));
  return {
    firing: firing.length,
    firingCritical: firing.filter((a) => a.severity === 'critical').length,
    pending: alerts.filter((a) => a.state === 'pending').length,
    nextFiresAt: pending.map((i) => i.firesAt).sort()[0] ?? null,
  };
}

/**
 * Prometheus keeps an alert's `for` across its own restart when it was down less than this (its
 * `rules.alert.for-outage-tolerance` default); the console does the same with the timers it kept under --data.
 */
export const FOR_OUTAGE_TOLERANCE_MS = 60 * 60_000;

/** Evaluates the table at each call, keeping since when each (rule, label set) holds, as Prometheus's `for` does. */
export class AlertEvaluator {
  readonly #conditions: readonly AlertCondition[];
  /** (rule, labels) → since when its expression holds (ms); dropped the first time it does not. */
  readonly #since = new Map<string, number>();

  constructor(conditions: readonly AlertCondition[] = ALERT_CONDITIONS) {
    this.#conditions = conditions;
  }

  /** The timers, to keep across a restart (console-store.ts). */
  timers(): [string, number][] {
    return [...this.#since];
  }

  /**
   * Takes back timers kept by an earlier run that stopped at `savedAt`: only when it was down less than
   * FOR_OUTAGE_TOLERANCE_MS at `now`, and each is dropped at the first evaluation where its expression does not hold.
   */
  restoreTimers(timers: readonly (readonly [string, number])[], savedAt: number, now: number): void {
    if (now - savedAt > FOR_OUTAGE_TOLERANCE_MS) return;
    for (const [key, since] of timers) if (Number.isFinite(since) && since <= now) this.#since.set(key, since);
  }

  evaluate(input: AlertInput): AlertState[] {
    const holding = new Set<string>();
    const states = this.#conditions.map((condition): AlertState => {
      const base = { alert: condition.alert, severity: condition.severity };
      if (!condition.holds)
        return { ...base, state: 'not evaluated', instances: [], note: condition.notEvaluated ?? null };
      const instances = condition.holds(input).map((instance): AlertInstanceState => {
        const key = labelKey(condition.alert, instance.labels);
        holding.add(key);
        const since = this.#since.get(key) ?? input.at;
        this.#since.set(key, since);
        const state = input.at - since >= condition.forMs ? 'firing' : 'pending';
        return {
          ...instance,
          state,
          since: new Date(since).toISOString(),
          firesAt: new Date(since + condition.forMs).toISOString(),
        };
      });
      const state = instances.some((i) => i.state === 'firing')
        ? 'firing'
        : instances.length > 0
          ? 'pending'
          : 'inactive';
      return { ...base, state, instances, note: null };
    });
    for (const key of [...this.#since.keys()]) if (!holding.has(key)) this.#since.delete(key);
    return states;
  }
}

/**
 * The q-quantile of a histogram's increases by `le` bound (cumulative, as exported), as Prometheus's
 * histogram_quantile() computes it: linear within the bucket the rank falls in, the highest finite bound when it falls
 * in +Inf; undefined without observations.
 */
export function histogramQuantile(q: number, increases: Readonly<Record<string, number>>): number | undefined {
  const buckets = Object.entries(increases)
    .map(([le, count]) => ({ le: le === '+Inf' ? Infinity : Number(le), count }))
    .filter((b) => !Number.isNaN(b.le))
    .sort((a, b) => a.le - b.le);
  const total = buckets.at(-1);
  if (!total || total.le !== Infinity || total.count <= 0) return undefined;
  const rank = q * total.count;
  let lowerBound = 0;
  let lowerCount = 0;
  for (const bucket of buckets) {
    if (bucket.count >= rank) {
      if (bucket.le === Infinity) return lowerBound;
      if (bucket.count === lowerCount) return bucket.le;
      return lowerBound + ((bucket.le - lowerBound) * (rank - lowerCount)) / (bucket.count - lowerCount);
    }
    lowerBound = bucket.le;
    lowerCount = bucket.count;
  }
  return lowerBound;
}

/** A replica's flush (fsync) latency quantile over its samples' window, in ms, or undefined without flushes. */
export function flushQuantileMs(q: number, samples: readonly MetricsSample[]): number | undefined {
  if (samples.length < 2) return undefined;
  const increases: Record<string, number> = {};
  for (const le of Object.keys(samples.at(-1)!.flushBuckets)) {
    const rise = counterIncrease(samples, (s) => s.flushBuckets[le] ?? 0);
    if (rise !== undefined) increases[le] = rise;
  }
  const seconds = histogramQuantile(q, increases);
  return seconds === undefined ? undefined : seconds * 1000;
}
