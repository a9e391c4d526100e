/**
 * The console's status line (issue 46), pure: one word for the cluster, why, and what to do, each action naming a
 * runbook that exists on the page and a docs section that exists; the alerts tile's firing and pending counts; the
 * fsync p99 the page shows beside the mean, computed as Prometheus's histogram_quantile does.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { histogramQuantile, summariseAlerts, type AlertState } from '../../src/console/alerts.js';
import { RUNBOOKS } from '../../src/console/runbooks.js';
import {
  assessSituation,
  worstFirst,
  type SituationInput,
  type SituationReplica,
  type UnreachableKind,
} from '../../src/console/situation.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

const ok = (replica: number): SituationReplica => ({
  replica,
  reachable: true,
  unreachableAs: null,
  downSince: null,
  connection: 'ready',
  faulty: null,
  faultySince: null,
});
const unreachable = (replica: number, how: UnreachableKind): SituationReplica => ({
  ...ok(replica),
  reachable: false,
  unreachableAs: how,
  downSince: '2026-01-01T03:04:05.000Z',
  connection:
    how === 'hung' ? 'connected, no answer within 1000 ms' : 'connection refused or unreachable (ECONNREFUSED)',
});
const faulty = (replica: number): SituationReplica => ({
  ...ok(replica),
  faulty: 'reports epoch 9223372036854775807 for "x"',
  faultySince: '2026-01-01T03:00:00.000Z',
});

/** The input for replicas as given, t = 2f+1 with n = 3f+1, margin from those available. */
function input(replicas: SituationReplica[], extra: Partial<SituationInput> = {}): SituationInput {
  const n = replicas.length;
  const f = (n - 1) / 3;
  const t = 2 * f + 1;
  const available = replicas.filter((r) => r.reachable && r.faulty === null).length;
  return {
    polls: 5,
    n,
    t,
    margin: available - t,
    available,
    timeoutMs: 1000,
    replicas,
    alerts: [],
    leasesAtRisk: [],
    leaseListsCut: [],
    ...extra,
  };
}

const alert = (name: string, state: 'firing' | 'pending', labels: Record<string, string> = {}): AlertState => ({
  alert: name,
  severity: 'warning',
  state,
  note: null,
  instances: [
    {
      labels,
      value: 1,
      state,
      since: '2026-01-01T03:00:00.000Z',
      firesAt: state === 'firing' ? '2026-01-01T03:10:00.000Z' : '2026-01-01T03:20:00.000Z',
    },
  ],
});

describe('the status line', () => {
  it('healthy: every replica available, and it says how many may still fail', () => {
    const s = assessSituation(input([1, 2, 3, 4].map(ok)));
    expect(s.status).toBe('healthy');
    expect(s.headline).toBe('Healthy: all 4 replicas answer, acquires work and 1 more replica may fail.');
    expect(s.actions).toEqual([]);
  });

  it('unavailable with 2 of 4 down: acquires fail, and the first action names the replicas to bring back', () => {
    const s = assessSituation(input([ok(1), unreachable(2, 'down'), ok(3), unreachable(4, 'down')]));
    expect(s.status).toBe('unavailable');
    expect(s.headline).toMatch(
      /^Unavailable: acquires are failing\. 2 of 4 replicas answer honestly, an acquire needs 3/,
    );
    expect(s.actions[0]).toMatchObject({ code: 'bring_back', runbook: 'acquires-failing', replicas: [2, 4] });
    expect(s.actions[0]!.text).toMatch(/^Bring back replica 2 or 4: acquires work again once 3 replicas answer\.$/);
    expect(s.reasons.map((r) => r.code)).toEqual(['acquires_failing', 'replica_down', 'replica_down']);
  });

  it('says how many to bring back when one is not enough, and to replace a faulty one when all are not enough', () => {
    const two = assessSituation(input([ok(1), ok(2), ...[3, 4, 5, 6, 7].map((r) => unreachable(r, 'down'))]));
    // N = 7, t = 5, 2 available: 3 of the 5.
    expect(two.actions[0]!.text).toMatch(/^Bring back 3 of replicas 3, 4, 5, 6 and 7:/);
    const withLiar = assessSituation(input([ok(1), faulty(2), unreachable(3, 'down'), unreachable(4, 'hung')]));
    expect(withLiar.status).toBe('unavailable');
    expect(withLiar.headline).toMatch(/\(replica 2 is faulty; replica 3 is down; replica 4 is hung\)\.$/);
    expect(withLiar.actions[0]!.text).toBe('Bring back replicas 3 and 4: acquires work again once 3 replicas answer.');
    expect(withLiar.actions.map((a) => a.code)).toEqual(['bring_back', 'replace', 'restart', 'investigate_hung']);
    // Two faulty of 4 (more than f): bringing back replica 4 alone cannot restore acquires.
    const tooMany = assessSituation(input([ok(1), faulty(2), faulty(3), unreachable(4, 'down')]));
    expect(tooMany.actions[0]!.text).toMatch(
      /^Bring back replica 4: .*; that is not enough, so also replace faulty replicas 2 and 3 by a reshare\.$/,
    );
  });

  it('degraded, not healthy, with N = 7 and one replica down though 1 more may fail (issue 46 item 6)', () => {
    const s = assessSituation(input([1, 2, 3, 4, 5, 6].map(ok).concat(unreachable(7, 'down'))));
    expect(s.status).toBe('degraded');
    expect(s.headline).toBe(
      'Degraded: acquires work and 1 more replica may fail, but not every replica is available (replica 7 is down).',
    );
    expect(s.actions.map((a) => [a.code, a.runbook])).toEqual([['restart', 'replica-down']]);
  });

  it('tells hung (connection open, no answer) from down (refused), each with its own action', () => {
    const s = assessSituation(input([ok(1), ok(2), ok(3), unreachable(4, 'hung')]));
    expect(s.status).toBe('degraded');
    expect(s.reasons.find((r) => r.code === 'replica_hung')!.text).toBe(
      'Replica 4 is hung since 03:04:05 UTC: its connection is open but it answered nothing within 1000 ms.',
    );
    expect(s.actions.map((a) => [a.code, a.runbook])).toEqual([['investigate_hung', 'replica-hung']]);
    const refused = assessSituation(input([ok(1), ok(2), ok(3), unreachable(4, 'login_refused')]));
    expect(refused.actions.map((a) => a.code)).toEqual(['grant_console_access']);
  });

  it('a faulty replica: the proof in the reason, and the action to replace it', () => {
    const s = assessSituation(input([ok(1), ok(2), ok(3), faulty(4)]));
    expect(s.status).toBe('degraded');
    expect(s.reasons.map((r) => r.code)).toEqual(['no_spare', 'replica_faulty']);
    expect(s.reasons[1]!.text).toContain('9223372036854775807');
    expect(s.actions.map((a) => [a.code, a.runbook])).toEqual([['replace', 'replica-faulty']]);
    // In a poll where it broke the protocol again (the console closed its connection), the same: not also "down".
    const closed = assessSituation(
      input([ok(1), ok(2), ok(3), { ...faulty(4), reachable: false, connection: 'closed by the console' }]),
    );
    expect(closed.reasons.map((r) => r.code)).toEqual(['no_spare', 'replica_faulty']);
    expect(closed.headline).toBe(
      'Degraded: acquires work, but one more replica lost stops them (replica 4 is faulty).',
    );
  });

  it('leases at risk degrade; a cut lease list is said but changes no status; a pending alert changes nothing', () => {
    const healthy = [1, 2, 3, 4].map(ok);
    const risk = assessSituation(input(healthy, { leasesAtRisk: ['orders/1'] }));
    expect(risk.status).toBe('degraded');
    expect(risk.actions.map((a) => a.runbook)).toEqual(['leases-at-risk']);
    const cut = assessSituation(input(healthy, { leaseListsCut: [1, 2, 3, 4] }));
    expect(cut.status).toBe('healthy');
    expect(cut.reasons.map((r) => [r.code, r.severity])).toEqual([['lease_lists_cut', 'info']]);
    expect(cut.actions.map((a) => [a.code, a.runbook])).toEqual([['watch_resources', 'lease-list-cut']]);
    const pending = assessSituation(input(healthy, { alerts: [alert('QuorumFenceFlushLatencyHigh', 'pending')] }));
    expect(pending.status).toBe('healthy');
  });

  it('a firing alert no replica state explains degrades, with its runbook; one a replica state explains is not repeated', () => {
    const healthy = [1, 2, 3, 4].map(ok);
    const slow = assessSituation(
      input(healthy, { alerts: [alert('QuorumFenceFlushLatencyHigh', 'firing', { replica: '3' })] }),
    );
    expect(slow.status).toBe('degraded');
    expect(slow.reasons.map((r) => [r.code, r.replicas])).toEqual([['alert_firing', [3]]]);
    expect(slow.actions.map((a) => a.runbook)).toEqual(['flush-slow']);
    const down = assessSituation(
      input([ok(1), ok(2), ok(3), unreachable(4, 'down')], {
        alerts: [alert('QuorumFenceReplicaDown', 'firing', { replica: '4' })],
      }),
    );
    expect(down.reasons.map((r) => r.code)).toEqual(['no_spare', 'replica_down']);
  });

  it('starting before the first poll, and the replicas worst first: faulty, down, hung, then the rest', () => {
    expect(assessSituation(input([1, 2, 3, 4].map(ok), { polls: 0 })).status).toBe('starting');
    expect(worstFirst([ok(1), unreachable(2, 'hung'), faulty(3), unreachable(4, 'down')])).toEqual([3, 4, 2, 1]);
  });
});

describe('the runbooks', () => {
  it('exist for every action, and each names a docs section that exists', () => {
    const ids = new Set(RUNBOOKS.map((r) => r.id));
    expect(ids.size).toBe(RUNBOOKS.length);
    const everything = assessSituation(
      input([ok(1), faulty(2), unreachable(3, 'down'), unreachable(4, 'hung')], {
        leasesAtRisk: ['a'],
        leaseListsCut: [1],
        alerts: [alert('QuorumFenceRefusalSpike', 'firing', { replica: '1', reason: 'forbidden' })],
      }),
    );
    for (const action of everything.actions) expect(ids.has(action.runbook), action.runbook).toBe(true);
    for (const { docs, id } of RUNBOOKS) {
      const headings = readFileSync(`${ROOT}/${docs.file}`, 'utf8')
        .split('\n')
        .filter((line) => /^#{1,4} /.test(line))
        .map((line) => line.replace(/^#+ /, ''));
      expect(
        headings.some((h) => h.startsWith(docs.heading)),
        `${id}: ${docs.file} has no section ${docs.heading}`,
      ).toBe(true);
    }
  });
});

describe('the alerts tile', () => {
  it('counts rules firing and pending apart, and says when the first pending one fires', () => {
    const summary = summariseAlerts([
      alert('A', 'firing'),
      alert('B', 'pending'),
      {
        ...alert('C', 'pending'),
        instances: [{ ...alert('C', 'pending').instances[0]!, firesAt: '2026-01-01T03:05:00.000Z' }],
      },
      { alert: 'D', severity: 'critical', state: 'inactive', instances: [], note: null },
    ]);
    expect(summary).toEqual({ firing: 1, firingCritical: 0, pending: 2, nextFiresAt: '2026-01-01T03:05:00.000Z' });
  });
});

describe('histogramQuantile (the fsync p99 beside the mean)', () => {
  it('interpolates within the bucket the rank falls in, as Prometheus does', () => {
    // Every flush between 50 and 100 ms: the rule tests' replica 1, whose p99 promtool reports as 0.0995 s.
    expect(histogramQuantile(0.99, { '0.005': 0, '0.05': 0, '0.1': 900, '+Inf': 900 })).toBeCloseTo(0.0995, 10);
    // All fast: within the first bucket, from 0.
    expect(histogramQuantile(0.5, { '0.005': 100, '+Inf': 100 })).toBeCloseTo(0.0025, 10);
    // Above the last finite bound: that bound.
    expect(histogramQuantile(0.99, { '0.1': 10, '+Inf': 100 })).toBe(0.1);
    expect(histogramQuantile(0.99, { '0.1': 0, '+Inf': 0 })).toBeUndefined();
  });
});
