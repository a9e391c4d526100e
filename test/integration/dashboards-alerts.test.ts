/**
 * deploy/prometheus/alerts.yml and deploy/grafana/quorumfence.json name only metrics that exist:
 * every metric name in every PromQL expression is exported by a real process. A local cluster of
 * four replica processes and the reference resource run here; one acquire and one fenced write
 * give their counters samples; their /metrics are scraped over HTTP.
 *
 * The operator console's names come from src/console/metric-names.ts: the console is built and
 * tested apart from this file, and its own test scrapes its /metrics for exactly those names.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import {
  dealLocalCluster,
  startLocalCluster,
  startLocalResource,
  type LocalCluster,
} from '../../src/cluster/launcher.js';
import type { LocalProcess } from '../../src/cluster/local-process.js';
import { QuorumFenceClient } from '../../src/client/client.js';
import { generateIdentity } from '../../src/client/identity.js';
import { CONSOLE_METRICS } from '../../src/console/metric-names.js';
import { exportedMetricNames, metricNamesIn, selectorsIn, unknownMetricNames } from '../support/promql-names.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

interface AlertRule {
  alert: string;
  expr: string;
  labels?: { severity?: string };
  annotations?: { summary?: string; description?: string };
}
const alertRules = (
  parse(readFileSync(join(ROOT, 'deploy/prometheus/alerts.yml'), 'utf8')) as {
    groups: { name: string; rules: AlertRule[] }[];
  }
).groups.flatMap((group) => group.rules);

interface Panel {
  title: string;
  targets?: { expr: string }[];
  panels?: Panel[];
}
const dashboard = JSON.parse(readFileSync(join(ROOT, 'deploy/grafana/quorumfence.json'), 'utf8')) as {
  panels: Panel[];
  templating: { list: { name: string; type: string; query?: { query?: string }; includeAll?: boolean }[] };
};
const panels = (list: Panel[]): Panel[] => list.flatMap((p) => [p, ...panels(p.panels ?? [])]);

/** Every PromQL expression of both files, with where it is for the failure message. */
const expressions = [
  ...alertRules.map((rule) => ({ where: `alert ${rule.alert}`, expr: rule.expr })),
  ...panels(dashboard.panels).flatMap((panel) =>
    (panel.targets ?? []).map((target) => ({ where: `panel "${panel.title}"`, expr: target.expr })),
  ),
];

describe('the PromQL tokenizer', () => {
  it('finds metric names, not functions, keywords, label names, values, durations or variables', () => {
    expect(
      metricNamesIn(
        'histogram_quantile(0.99, sum by (le, replica) (rate(a_seconds_bucket{reason=~"x|y", le!="1"}[5m])))',
      ),
    ).toEqual(['a_seconds']);
    expect(
      metricNamesIn(
        'sum(up{job="r"}) - max(max_over_time(b_threshold[1d])) < 1 and on (replica) c_total offset 5m or vector(0)',
      ),
    ).toEqual(['up', 'b_threshold', 'c_total']);
    expect(
      metricNamesIn('sum without (kind) (rate(d_sum[$__rate_interval])) / ignoring(x) group_left e_count'),
    ).toEqual(['d', 'e']);
    expect(metricNamesIn('f{label="a } b"} > bool 1e3')).toEqual(['f']);
  });
});

describe('alert rules', () => {
  it('each has a severity, a summary and a runbook-style description', () => {
    expect(alertRules.length).toBeGreaterThanOrEqual(6);
    for (const rule of alertRules) {
      expect(['critical', 'warning'], rule.alert).toContain(rule.labels?.severity);
      expect(rule.annotations?.summary, rule.alert).toBeTruthy();
      expect(rule.annotations?.description, rule.alert).toMatch(/Runbook:/);
    }
  });

  it('cover the margin from the console and from the scrape, evidence, fsync p99, refusals and a replica down', () => {
    const reads = (name: string) => alertRules.filter((rule) => metricNamesIn(rule.expr).includes(name));
    expect(reads(CONSOLE_METRICS.quorumMargin)).toHaveLength(1);
    // The scrape margin counts, per cluster, the replicas whose threshold series is fresh.
    expect(reads('quorumfence_replica_cluster_threshold').map((rule) => rule.alert)).toEqual([
      'QuorumFenceQuorumMarginExhaustedByScrape',
    ]);
    expect(reads(CONSOLE_METRICS.evidence)).toHaveLength(1);
    expect(reads('quorumfence_replica_flush_seconds')[0]?.expr).toMatch(/histogram_quantile\(0\.99/);
    expect(reads('quorumfence_replica_refusals_total')).toHaveLength(1);
    expect(alertRules.some((rule) => /^up\{[^}]*\} == 0$/.test(rule.expr))).toBe(true);
  });

  it('keep the cluster label: every aggregation groups by it', () => {
    // One Prometheus may watch several clusters: an alert that summed across them would mix their replicas.
    for (const rule of alertRules) {
      const aggregations = [...rule.expr.matchAll(/\b(sum|min|max|count|avg)\s*(by\s*\(([^)]*)\))?\s*\(/g)];
      for (const [text, , by, labels] of aggregations) {
        expect(by, `${rule.alert}: ${text}`).toBeDefined();
        expect(
          labels!.split(',').map((l) => l.trim()),
          `${rule.alert}: ${text}`,
        ).toContain('cluster');
      }
    }
  });
});

describe('the dashboard', () => {
  it('has a panel for each thing an operator watches, each with a unique id', () => {
    const all = panels(dashboard.panels);
    expect(new Set(all.map((p) => (p as { id?: number }).id)).size).toBe(all.length);
    const shows = (name: string) =>
      all.some((panel) => (panel.targets ?? []).some((target) => metricNamesIn(target.expr).includes(name)));
    for (const name of [
      CONSOLE_METRICS.quorumMargin,
      'quorumfence_replica_cluster_threshold', // replicas up, and the margin without the console
      'quorumfence_replica_cluster_replicas',
      'quorumfence_replica_grants_signed_total',
      'quorumfence_replica_refusals_total',
      'quorumfence_replica_flush_seconds',
      'quorumfence_replica_sign_seconds',
      'quorumfence_guard_conflicts_total',
      CONSOLE_METRICS.evidence,
      'quorumfence_replica_signing_records',
      'quorumfence_replica_epoch_floor',
      // prom-client's standard names, which the replicas and the resource export unprefixed.
      'process_cpu_seconds_total',
      'process_resident_memory_bytes',
      'nodejs_eventloop_lag_p99_seconds',
    ]) {
      expect(shows(name), name).toBe(true);
    }
  });

  it('filters every query on the cluster variable', () => {
    const variable = dashboard.templating.list.find((v) => v.name === 'cluster');
    expect(variable).toMatchObject({ type: 'query', includeAll: true });
    expect(variable?.query?.query).toMatch(/^label_values\(quorumfence_[a-z_]+, cluster\)$/);
    const targets = panels(dashboard.panels).flatMap((panel) => panel.targets ?? []);
    expect(targets.length).toBeGreaterThan(20);
    for (const { expr } of targets) {
      const selectors = selectorsIn(expr);
      expect(selectors.length, expr).toBeGreaterThan(0);
      for (const selector of selectors)
        expect(selector.matchers, `${selector.series} in ${expr}`).toMatch(/\bcluster=~"\$cluster"/);
    }
    // The check can fail: a selector without the filter is found.
    expect(selectorsIn('sum(rate(a_total{cluster=~"$cluster"}[1m])) / sum(b_total{kind="x"})')).toEqual([
      { series: 'a_total', matchers: 'cluster=~"$cluster"' },
      { series: 'b_total', matchers: 'kind="x"' },
    ]);
  });
});

describe('every metric the rules and the dashboard name is exported by a real process', () => {
  let dir: string;
  let local: LocalCluster | undefined;
  let resource: LocalProcess | undefined;
  let client: QuorumFenceClient | undefined;
  const exported = new Set<string>(Object.values(CONSOLE_METRICS));

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'qf-dashboards-alerts-'));
    dealLocalCluster(join(dir, 'keys'), 4);
    local = await startLocalCluster({ newStores: true, dir: join(dir, 'keys'), dataRoot: join(dir, 'data') });
    resource = await startLocalResource({
      clusterFile: join(dir, 'keys', 'cluster.json'),
      dataDir: join(dir, 'resource'),
    });

    // One acquire and one fenced write, so the counters and histograms have samples.
    client = await QuorumFenceClient.connect(local.cluster, generateIdentity());
    const acquired = await client.acquire('metrics/orders', { ttlMs: 10_000 });
    if (!acquired.ok) throw new Error(`acquire failed: ${JSON.stringify(acquired)}`);
    const write = await fetch(`${resource.url}/kv/${encodeURIComponent('metrics/orders')}/k`, {
      method: 'PUT',
      headers: { authorization: `QuorumFence ${acquired.lease.tokenText}` },
      body: 'value',
      signal: AbortSignal.timeout(10_000),
    });
    expect(write.status).toBe(200);

    const targets = [...local.replicas.map((r) => r.healthUrl.replace(/\/healthz$/, '')), resource.url];
    for (const base of targets) {
      const response = await fetch(`${base}/metrics`, { signal: AbortSignal.timeout(10_000) });
      expect(response.status).toBe(200);
      for (const name of exportedMetricNames(await response.text())) exported.add(name);
    }
  }, 90_000);

  afterAll(async () => {
    await client?.close();
    await resource?.stop();
    await local?.close();
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  it('scraped the replicas and the resource, with samples after the acquire and the write', () => {
    expect(exported).toContain('quorumfence_replica_grants_signed_total');
    expect(exported).toContain('quorumfence_replica_flush_seconds');
    expect(exported).toContain('quorumfence_guard_attempts_total');
  });

  it('finds no name that nothing exports', () => {
    expect(expressions.length).toBeGreaterThan(15);
    expect(unknownMetricNames(expressions, exported)).toEqual([]);
  });

  it('reports an expression naming a made-up metric', () => {
    const broken = [
      ...expressions,
      { where: 'alert MadeUp', expr: 'sum(rate(quorumfence_replica_made_up_total{reason="x"}[5m])) > 0' },
      { where: 'panel "Typo"', expr: 'histogram_quantile(0.99, rate(quorumfence_replica_flush_second_bucket[5m]))' },
    ];
    expect(unknownMetricNames(broken, exported)).toEqual([
      { where: 'alert MadeUp', name: 'quorumfence_replica_made_up_total' },
      { where: 'panel "Typo"', name: 'quorumfence_replica_flush_second' },
    ]);
  });
});
