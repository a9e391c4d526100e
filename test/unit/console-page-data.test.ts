/**
 * What the console computes for its page and logs, pure: holder names (--holders, bad files refused with a
 * code), the 15-minute history (bounded, the worst margin of each bucket), the alert evaluator's `for`
 * (pending, then firing, then gone), and the change events it logs.
 */
import { describe, expect, it } from 'vitest';
import { AlertEvaluator, counterRate, type AlertCondition, type AlertInput } from '../../src/console/alerts.js';
import { stateChanges, type ChangeSnapshot } from '../../src/console/changes.js';
import { HISTORY_BUCKET_MS, HISTORY_WINDOW_MS, RollingHistory } from '../../src/console/history.js';
import { HOLDER_NAMES_FORMAT, parseHolderNames } from '../../src/console/holders.js';
import type { MetricsSample } from '../../src/console/replica-health.js';
import { codeOf } from '../support/error-code.js';

const key = 'ab'.repeat(32);

describe('holder names (--holders)', () => {
  it('maps holder keys to names', () => {
    expect(parseHolderNames({ format: HOLDER_NAMES_FORMAT, holders: { [key]: 'billing-worker-1' } })).toEqual(
      new Map([[key, 'billing-worker-1']]),
    );
  });

  it('refuses a file that is not one, with the code and the field (negative case)', () => {
    expect(codeOf(() => parseHolderNames([]))).toBe('INVALID_OPTION');
    expect(codeOf(() => parseHolderNames({ format: 'quorumfence/replica-access/v1', holders: {} }))).toBe(
      'UNKNOWN_VERSION',
    );
    const bad = (holders: unknown, extra: object = {}) =>
      codeOf(() => parseHolderNames({ format: HOLDER_NAMES_FORMAT, holders, ...extra }));
    expect(bad({ [key]: 'x' }, { colours: {} })).toBe('INVALID_OPTION');
    expect(bad(['billing'])).toBe('INVALID_OPTION');
    expect(bad({ [key.toUpperCase()]: 'x' })).toBe('INVALID_OPTION');
    expect(bad({ ab: 'x' })).toBe('INVALID_OPTION');
    expect(bad({ [key]: '' })).toBe('INVALID_OPTION');
    expect(bad({ [key]: 'x'.repeat(65) })).toBe('INVALID_OPTION');
    expect(bad({ [key]: 7 })).toBe('INVALID_OPTION');
    expect(bad({ [key]: 'bell\u0007' })).toBe('INVALID_OPTION');
  });
});

describe('the 15-minute history', () => {
  it('keeps the worst margin and the mean rates of each 5 s bucket, and nothing older than 15 minutes', () => {
    const history = new RollingHistory();
    const start = 1_000 * HISTORY_BUCKET_MS;
    history.add({ at: start, margin: 1, grantsPerSecond: 4, refusalsPerSecond: { busy: 2 } });
    history.add({ at: start + 1_000, margin: -1, grantsPerSecond: null, refusalsPerSecond: {} });
    history.add({ at: start + 2_000, margin: 1, grantsPerSecond: 2, refusalsPerSecond: { busy: 1 } });
    expect(history.points()).toEqual([
      { at: new Date(start).toISOString(), margin: -1, grantsPerSecond: 3, refusalsPerSecond: { busy: 1 } },
    ]);
    for (let k = 1; k <= 400; k++)
      history.add({ at: start + k * HISTORY_BUCKET_MS, margin: 0, grantsPerSecond: 0, refusalsPerSecond: {} });
    const points = history.points();
    expect(points).toHaveLength(HISTORY_WINDOW_MS / HISTORY_BUCKET_MS);
    expect(points.every((p) => p.margin === 0)).toBe(true);
  });

  it('charts at most 8 refusal reasons and sums the rest as "other" (reasons are replicas’ words)', () => {
    const history = new RollingHistory();
    history.add({
      at: 0,
      margin: 1,
      grantsPerSecond: 0,
      refusalsPerSecond: Object.fromEntries(Array.from({ length: 20 }, (_, k) => [`r${k}`, 1])),
    });
    const [point] = history.points();
    expect(Object.keys(point!.refusalsPerSecond)).toHaveLength(9);
    expect(point!.refusalsPerSecond.other).toBe(12);
  });
});

describe('the alert evaluator', () => {
  const margin: AlertCondition = {
    alert: 'Margin',
    severity: 'critical',
    forMs: 60_000,
    holds: ({ margin: m }) => (m !== null && m < 1 ? [{ labels: {}, value: m }] : []),
  };
  const input = (at: number, m: number | null): AlertInput => ({
    at,
    margin: m,
    t: 3,
    metricsUp: new Map(),
    thresholdKnown: true,
    evidenceByKind: {},
    faulty: new Map(),
    samples: new Map(),
  });

  it('is pending until the expression held for the rule’s for, then firing, and forgets it the first time it does not hold', () => {
    const evaluator = new AlertEvaluator([margin]);
    expect(evaluator.evaluate(input(0, 1))[0]!.state).toBe('inactive');
    expect(evaluator.evaluate(input(1_000, 0))[0]!.state).toBe('pending');
    expect(evaluator.evaluate(input(60_999, 0))[0]!.state).toBe('pending');
    const firing = evaluator.evaluate(input(61_000, -1))[0]!;
    expect(firing).toMatchObject({ state: 'firing', instances: [{ since: new Date(1_000).toISOString() }] });
    expect(evaluator.evaluate(input(62_000, 1))[0]!.state).toBe('inactive');
    expect(evaluator.evaluate(input(63_000, 0))[0]!.state).toBe('pending');
    expect(evaluator.evaluate(input(64_000, null))[0]!.state).toBe('inactive');
  });

  it('says which rules it cannot evaluate, and a counter’s rate counts a restart from zero', () => {
    const evaluator = new AlertEvaluator([{ alert: 'Guard', severity: 'critical', forMs: 0, notEvaluated: 'why' }]);
    expect(evaluator.evaluate(input(0, 1))).toEqual([
      { alert: 'Guard', severity: 'critical', state: 'not evaluated', instances: [], note: 'why' },
    ]);
    const sample = (at: number, busy: number) => ({ at, refusals: { busy } }) as unknown as MetricsSample;
    // 10 -> 40 (+30), restart, 0 -> 20 (+20): 50 over 10 s.
    const samples = [sample(0, 10), sample(5_000, 40), sample(6_000, 0), sample(10_000, 20)];
    expect(counterRate(samples, (s) => s.refusals.busy ?? 0)).toBe(5);
    expect(counterRate(samples.slice(0, 1), (s) => s.refusals.busy ?? 0)).toBeUndefined();
  });
});

describe('the changes the console logs', () => {
  const snapshot = (margin: number, rows: [number, boolean, string | null][]): ChangeSnapshot => ({
    margin,
    replicas: rows.map(([replica, reachable, faulty]) => ({ replica, reachable, faulty, connection: 'x' })),
    alerts: [],
  });

  it('names a replica lost, back and proven faulty, and the margin, each once', () => {
    const healthy = snapshot(1, [
      [1, true, null],
      [2, true, null],
    ]);
    expect(stateChanges(undefined, healthy).map((c) => c.event)).toEqual(['margin_changed']);
    const lost = snapshot(0, [
      [1, false, null],
      [2, true, 'lies'],
    ]);
    expect(stateChanges(healthy, lost).map((c) => [c.event, c.level, c.fields.replica ?? c.fields.margin])).toEqual([
      ['replica_unreachable', 'warn', 1],
      ['replica_faulty', 'error', 2],
      ['margin_changed', 'warn', 0],
    ]);
    expect(stateChanges(lost, lost)).toEqual([]);
    expect(stateChanges(lost, healthy).map((c) => c.event)).toEqual(['replica_reachable', 'margin_changed']);
  });

  it('names an alert that starts and stops firing', () => {
    const withAlert = (state: 'firing' | 'pending'): ChangeSnapshot => ({
      ...snapshot(1, []),
      alerts: [{ alert: 'QuorumFenceReplicaDown', severity: 'warning', state, instances: [], note: null }],
    });
    expect(stateChanges(withAlert('pending'), withAlert('firing')).map((c) => [c.event, c.level])).toEqual([
      ['alert_firing', 'warn'],
    ]);
    expect(stateChanges(withAlert('firing'), withAlert('pending')).map((c) => c.event)).toEqual(['alert_resolved']);
  });
});
