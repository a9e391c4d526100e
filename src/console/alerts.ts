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
  /** Evidence recorded since the console started, by kind (quorumfence_console_evidence_total). */
  readonly evidenceByKind: Readonly<Record<string, number>>;
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
    alert: 'QuorumFenceEquivocationEvidence',
    severity: 'critical',
    forMs: 0,
    // sum by (kind) (quorumfence_console_evidence_total) > 0
    holds: ({ evidenceByKind }) =>
      Object.entries(evidenceByKind)
        .filter(([, count]) => count > 0)
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

/** Evaluates the table at each call, keeping since when each (rule, label set) holds, as Prometheus's `for` does. */
export class AlertEvaluator {
  readonly #conditions: readonly AlertCondition[];
  /** (rule, labels) → since when its expression holds (ms); dropped the first time it does not. */
  readonly #since = new Map<string, number>();

  constructor(conditions: readonly AlertCondition[] = ALERT_CONDITIONS) {
    this.#conditions = conditions;
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
        return { ...instance, state, since: new Date(since).toISOString() };
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
