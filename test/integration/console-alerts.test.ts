/**
 * The console's alert table (src/console/alerts.ts) says what Prometheus says about deploy/prometheus/alerts.yml.
 *
 * - Every rule in alerts.yml has one row, with its severity and `for`, and every row names a rule.
 * - On generated timelines (minute by minute: the console's margin, each replica's scrape up or down, evidence
 *   counters, refusal counters by reason, flush histograms), the conditions fire for exactly the label sets
 *   for which Prometheus's own evaluation of alerts.yml fires (`promtool test rules`), checked at the end of each
 *   16-minute phase, when every rule's window and `for` have seen the phase's regime alone.
 *
 * Needs promtool (Debian's prometheus package; .ci/run installs it); without it the test against
 * promtool is skipped, saying so in its name, unless CI's QUORUMFENCE_TEST_REQUIRE_SYSTEM=1 (test/support/system-tools.ts).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { ALERT_CONDITIONS, AlertEvaluator, type AlertCondition } from '../../src/console/alerts.js';
import type { MetricsSample } from '../../src/console/replica-health.js';
import { lacks, needs } from '../support/system-tools.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const RULES = join(ROOT, 'deploy/prometheus/alerts.yml');
const work = mkdtempSync(join(tmpdir(), 'qf-console-alerts-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

interface Rule {
  alert: string;
  expr: string;
  for?: string;
  labels?: { severity?: string };
  annotations?: Record<string, string>;
}
const rulesFile = parse(readFileSync(RULES, 'utf8')) as { groups: { name: string; rules: Rule[] }[] };
const rules = rulesFile.groups.flatMap((g) => g.rules);

function durationMs(text: string | undefined): number {
  if (text === undefined) return 0;
  const match = /^(\d+)([smh])$/.exec(text);
  if (!match) throw new Error(`unexpected duration ${text}`);
  return Number(match[1]) * { s: 1_000, m: 60_000, h: 3_600_000 }[match[2] as 's' | 'm' | 'h'];
}

function promtool(): string {
  const found = spawnSync('sh', ['-c', 'command -v promtool'], { encoding: 'utf8' });
  const path = found.stdout.trim();
  if (found.status !== 0 || path === '') throw new Error('promtool is not installed (apt-get install prometheus)');
  return path;
}

describe('the console’s alert table', () => {
  it('has one row per rule of alerts.yml, with its severity and for, and no row for a rule that is not there', () => {
    expect(ALERT_CONDITIONS.map((c) => c.alert)).toEqual(rules.map((r) => r.alert));
    for (const rule of rules) {
      const row = ALERT_CONDITIONS.find((c) => c.alert === rule.alert)!;
      expect({ severity: row.severity, forMs: row.forMs }, rule.alert).toEqual({
        severity: rule.labels?.severity,
        forMs: durationMs(rule.for),
      });
      expect(row.holds !== undefined || row.notEvaluated !== undefined, rule.alert).toBe(true);
    }
  });
});

const N = 4;
const T = 3;
const PHASE_MINUTES = 16;
const PHASES = 3;
const MINUTES = PHASE_MINUTES * PHASES;
const REASONS = ['invalid', 'forbidden', 'too_far', 'not_holder', 'busy', 'stale'] as const;
/** Evidence kinds: the two made of signatures (the evidence rule's), and one that is not (only the faulty rule's). */
const KINDS = ['equivocation', 'invalid_partial', 'protocol'] as const;

/** One phase's regime: constant for its 16 minutes. */
interface Phase {
  margin: number;
  up: boolean[];
  /** Per replica: the console holds proof that it is faulty. */
  faulty: boolean[];
  /** Per kind: evidence recorded per minute. */
  evidence: number[];
  /** Per replica, per reason: refusals per minute. */
  refusals: number[][];
  /**
   * Per replica: flushes per minute, how many per 1000 are slower than 50 ms, and whether those fall in the
   * next bucket (0.1) or above the last finite one (only +Inf), where histogram_quantile answers that bound.
   */
  flushes: { perMinute: number; slowPerMille: number; slowIn: '0.1' | '+Inf' }[];
}

const phase: fc.Arbitrary<Phase> = fc.record({
  margin: fc.integer({ min: -2, max: 2 }),
  up: fc.array(fc.boolean(), { minLength: N, maxLength: N }),
  faulty: fc.array(fc.constantFrom(false, false, true), { minLength: N, maxLength: N }),
  evidence: fc.array(fc.constantFrom(0, 0, 1), { minLength: KINDS.length, maxLength: KINDS.length }),
  // 0, 30 or 180 a minute: 0, 0.5 or 3 a second, either side of the rule's 1/s.
  refusals: fc.array(fc.array(fc.constantFrom(0, 30, 180), { minLength: REASONS.length, maxLength: REASONS.length }), {
    minLength: N,
    maxLength: N,
  }),
  // 5 or 50 per 1000 slow: either side of the rule's 99th percentile at 50 ms.
  flushes: fc.array(
    fc.record({
      perMinute: fc.constantFrom(0, 600),
      slowPerMille: fc.constantFrom(0, 5, 50, 500),
      slowIn: fc.constantFrom('0.1' as const, '+Inf' as const),
    }),
    { minLength: N, maxLength: N },
  ),
});
const timeline = fc.array(phase, { minLength: PHASES, maxLength: PHASES });

/** The series of a timeline at each minute 0..MINUTES. */
function series(phases: Phase[]) {
  const at = (minute: number) => phases[Math.min(PHASES - 1, Math.floor(minute / PHASE_MINUTES))]!;
  const margin: number[] = [];
  const up: number[][] = Array.from({ length: N }, () => []);
  const faulty: number[][] = Array.from({ length: N }, () => []);
  const evidence: number[][] = KINDS.map(() => []);
  const refusals: number[][][] = Array.from({ length: N }, () => REASONS.map(() => []));
  const flushAll: number[][] = Array.from({ length: N }, () => []);
  const flushFast: number[][] = Array.from({ length: N }, () => []);
  const flushUpTo100ms: number[][] = Array.from({ length: N }, () => []);
  for (let minute = 0; minute <= MINUTES; minute++) {
    const p = at(minute);
    const last = (values: number[]) => values.at(-1) ?? 0;
    // Counters rise by the phase's amount each minute after the first sample.
    const rise = (values: number[], perMinute: number) => values.push(minute === 0 ? 0 : last(values) + perMinute);
    margin.push(p.margin);
    for (let r = 0; r < N; r++) {
      up[r]!.push(p.up[r]! ? 1 : 0);
      faulty[r]!.push(p.faulty[r]! ? 1 : 0);
      REASONS.forEach((_, k) => rise(refusals[r]![k]!, p.refusals[r]![k]!));
      const { perMinute, slowPerMille, slowIn } = p.flushes[r]!;
      const fast = (perMinute * (1000 - slowPerMille)) / 1000;
      rise(flushAll[r]!, perMinute);
      rise(flushFast[r]!, fast);
      rise(flushUpTo100ms[r]!, slowIn === '0.1' ? perMinute : fast);
    }
    KINDS.forEach((_, k) => rise(evidence[k]!, p.evidence[k]!));
  }
  return { margin, up, faulty, evidence, refusals, flushAll, flushFast, flushUpTo100ms };
}

/** What the console's table says at each phase end: alert → the label sets firing. */
function consoleVerdicts(phases: Phase[], conditions: readonly AlertCondition[]) {
  const s = series(phases);
  const evaluator = new AlertEvaluator(conditions);
  const verdicts = new Map<number, Map<string, Record<string, string>[]>>();
  for (let minute = 0; minute <= MINUTES; minute++) {
    const sample = (r: number, m: number): MetricsSample => ({
      at: m * 60_000,
      grantsNew: 0,
      grantsSigned: 0,
      refusals: Object.fromEntries(REASONS.map((reason, k) => [reason, s.refusals[r]![k]![m]!])),
      requests: {},
      flushSum: 0,
      flushCount: s.flushAll[r]![m]!,
      signSum: 0,
      signCount: 0,
      flushBuckets: { '0.05': s.flushFast[r]![m]!, '0.1': s.flushUpTo100ms[r]![m]!, '+Inf': s.flushAll[r]![m]! },
      signingRecords: null,
      epochFloor: null,
    });
    const windowStart = Math.max(0, minute - 5);
    const states = evaluator.evaluate({
      at: minute * 60_000,
      margin: s.margin[minute]!,
      t: T,
      metricsUp: new Map(Array.from({ length: N }, (_, r) => [r + 1, s.up[r]![minute] === 1])),
      thresholdKnown: s.up.some((up) => up.slice(0, minute + 1).includes(1)),
      evidenceByKind: Object.fromEntries(KINDS.map((kind, k) => [kind, s.evidence[k]![minute]!])),
      faulty: new Map(Array.from({ length: N }, (_, r) => [r + 1, s.faulty[r]![minute] === 1])),
      samples: new Map(
        Array.from({ length: N }, (_, r) => [
          r + 1,
          Array.from({ length: minute - windowStart + 1 }, (_, k) => sample(r, windowStart + k)),
        ]),
      ),
    });
    if (minute % PHASE_MINUTES !== PHASE_MINUTES - 1) continue;
    verdicts.set(
      minute,
      new Map(
        states
          .filter((a) => a.state !== 'not evaluated')
          .map((a) => [a.alert, a.instances.filter((i) => i.state === 'firing').map((i) => ({ ...i.labels }))]),
      ),
    );
  }
  return verdicts;
}

/** The labels Prometheus adds beyond the condition's: the scrape job of the `up` series the rule reads. */
const SCRAPE_LABELS: Record<string, Record<string, string>> = {
  QuorumFenceReplicaDown: { job: 'quorumfence-replicas' },
};

/** Writes alerts.yml without annotations (their text is not the question) and a promtool test; runs it. */
function promtoolAgrees(phases: Phase[], conditions: readonly AlertCondition[]): { ok: boolean; output: string } {
  const s = series(phases);
  const values = (v: number[]) => v.join(' ');
  const input: { series: string; values: string }[] = [
    { series: 'quorumfence_console_quorum_margin', values: values(s.margin) },
  ];
  for (let r = 0; r < N; r++) {
    const replica = r + 1;
    input.push({ series: `up{job="quorumfence-replicas",replica="${replica}"}`, values: values(s.up[r]!) });
    input.push({ series: `quorumfence_console_replica_faulty{replica="${replica}"}`, values: values(s.faulty[r]!) });
    input.push({
      series: `quorumfence_replica_cluster_threshold{replica="${replica}"}`,
      // A failed scrape marks the replica's series stale at once, as Prometheus does.
      values: s.up[r]!.map((up) => (up === 1 ? String(T) : 'stale')).join(' '),
    });
    REASONS.forEach((reason, k) =>
      input.push({
        series: `quorumfence_replica_refusals_total{replica="${replica}",reason="${reason}"}`,
        values: values(s.refusals[r]![k]!),
      }),
    );
    input.push({
      series: `quorumfence_replica_flush_seconds_bucket{replica="${replica}",le="0.05"}`,
      values: values(s.flushFast[r]!),
    });
    input.push({
      series: `quorumfence_replica_flush_seconds_bucket{replica="${replica}",le="0.1"}`,
      values: values(s.flushUpTo100ms[r]!),
    });
    input.push({
      series: `quorumfence_replica_flush_seconds_bucket{replica="${replica}",le="+Inf"}`,
      values: values(s.flushAll[r]!),
    });
  }
  KINDS.forEach((kind, k) =>
    input.push({ series: `quorumfence_console_evidence_total{kind="${kind}"}`, values: values(s.evidence[k]!) }),
  );
  const verdicts = consoleVerdicts(phases, conditions);
  const tests = [...verdicts].flatMap(([minute, alerts]) =>
    [...alerts].map(([alert, firing]) => {
      const condition = conditions.find((c) => c.alert === alert)!;
      return {
        eval_time: `${minute}m`,
        alertname: alert,
        exp_alerts: firing.map((labels) => ({
          exp_labels: { ...labels, ...SCRAPE_LABELS[alert], severity: condition.severity },
        })),
      };
    }),
  );
  const stripped = {
    groups: rulesFile.groups.map((g) => ({ ...g, rules: g.rules.map(({ annotations: _a, ...rule }) => rule) })),
  };
  writeFileSync(join(work, 'rules.yml'), stringify(stripped));
  writeFileSync(
    join(work, 'test.yml'),
    stringify({
      rule_files: ['rules.yml'],
      evaluation_interval: '1m',
      tests: [{ interval: '1m', input_series: input, alert_rule_test: tests }],
    }),
  );
  const run = spawnSync(promtool(), ['test', 'rules', 'test.yml'], { cwd: work, encoding: 'utf8', timeout: 30_000 });
  return { ok: run.status === 0, output: `${run.stdout}${run.stderr}`.slice(0, 4000) };
}

describe.skipIf(lacks('promtool'))(
  `the console’s alert conditions against Prometheus’s evaluation of alerts.yml ${needs('promtool')}`,
  () => {
    it('fire for the same label sets on generated timelines', () => {
      fc.assert(
        fc.property(timeline, (phases) => {
          const { ok, output } = promtoolAgrees(phases, ALERT_CONDITIONS);
          expect(ok, output).toBe(true);
        }),
        // Each run is one promtool process (about half a second here): 20 runs of 3 phases, 60 regimes.
        { numRuns: 20 },
      );
    }, 120_000);

    it('catch a condition that differs from its rule (a refusal threshold of 4/s instead of 1/s)', () => {
      const planted = ALERT_CONDITIONS.map((c): AlertCondition =>
        c.alert === 'QuorumFenceRefusalSpike'
          ? { ...c, holds: (input) => c.holds!(input).filter((i) => i.value > 4) }
          : c,
      );
      const result = fc.check(
        fc.property(timeline, (phases) => promtoolAgrees(phases, planted).ok),
        // The first disagreement is enough: no shrinking (each step would be another promtool run).
        { numRuns: 30, seed: 30, endOnFailure: true },
      );
      expect(result.failed).toBe(true);
    }, 120_000);
  },
);
