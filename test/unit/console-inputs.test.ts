/**
 * What the console reads from others, parsed defensively: a replica's /healthz and /metrics (its own claims),
 * and equivocation evidence documents (kept only when the signatures convict the named replica).
 */
import { describe, expect, it } from 'vitest';
import { toHex } from '../../src/common/bytes.js';
import { loadBackend } from '../../src/crypto/load.js';
import { EVIDENCE_FORMAT, equivocationFromJson, equivocationToJson } from '../../src/console/evidence-json.js';
import { metricsFigures, parseHealth, parseMetrics } from '../../src/console/replica-health.js';
import type { Grant } from '../../src/token/grant.js';
import { codeOf } from '../support/error-code.js';
import { dealCluster } from '../support/dealt-cluster.js';

const METRICS = `# HELP quorumfence_replica_grants_signed_total Partials sent
# TYPE quorumfence_replica_grants_signed_total counter
quorumfence_replica_grants_signed_total{kind="new",replica="1",cluster="ab"} 10
quorumfence_replica_grants_signed_total{kind="resend",replica="1",cluster="ab"} 4
quorumfence_replica_refusals_total{reason="busy",replica="1",cluster="ab"} 3
quorumfence_replica_refusals_total{reason="stale",replica="1",cluster="ab"} 1
quorumfence_replica_requests_total{type="acquire",replica="1",cluster="ab"} 20
quorumfence_replica_requests_total{type="release",replica="1",cluster="ab"} 12
quorumfence_replica_flush_seconds_sum{replica="1",cluster="ab"} 0.02
quorumfence_replica_flush_seconds_count{replica="1",cluster="ab"} 10
quorumfence_replica_flush_seconds_bucket{le="0.001",replica="1",cluster="ab"} 2
quorumfence_replica_sign_seconds_sum{replica="1",cluster="ab"} 0.0042
quorumfence_replica_sign_seconds_count{replica="1",cluster="ab"} 14
quorumfence_replica_flush_seconds_bucket{le="0.05",replica="1",cluster="ab"} 9
quorumfence_replica_flush_seconds_bucket{le="+Inf",replica="1",cluster="ab"} 10
quorumfence_replica_signing_records{replica="1",cluster="ab"} 42
quorumfence_replica_epoch_floor{replica="1",cluster="ab"} 7
`;

describe('a replica’s own claims', () => {
  it('reads grants, refusals by reason and flush latency from /metrics, and a rate between two samples', () => {
    const first = parseMetrics(METRICS, 1_000);
    expect(first).toMatchObject({
      grantsNew: 10,
      grantsSigned: 14,
      refusals: { busy: 3, stale: 1 },
      requests: { acquire: 20, release: 12 },
      flushSum: 0.02,
      flushCount: 10,
      signSum: 0.0042,
      signCount: 14,
      flushBuckets: { '0.001': 2, '0.05': 9, '+Inf': 10 },
      signingRecords: 42,
      epochFloor: 7,
    });
    const later = parseMetrics(
      METRICS.replace('kind="new",replica="1",cluster="ab"} 10', 'kind="new",replica="1",cluster="ab"} 30')
        .replace('_sum{replica="1",cluster="ab"} 0.02', '_sum{replica="1",cluster="ab"} 0.08')
        .replace('_count{replica="1",cluster="ab"} 10', '_count{replica="1",cluster="ab"} 30')
        .replace('reason="busy",replica="1",cluster="ab"} 3', 'reason="busy",replica="1",cluster="ab"} 9'),
      3_000,
    );
    const figures = metricsFigures(later, first);
    expect(figures.grantsPerSecond).toBe(10);
    // Refusals per second between the two samples, not the lifetime totals.
    expect(figures.refusalsPerSecond).toEqual({ busy: 3, stale: 0 });
    expect(figures).toMatchObject({ signingRecords: 42, epochFloor: 7 });
    expect(metricsFigures(first, undefined).refusalsPerSecond).toBeNull();
    expect(figures.flushMeanMs).toBeCloseTo(3, 6);
    expect(metricsFigures(first, undefined).grantsPerSecond).toBeNull();
    expect(metricsFigures(first, undefined).flushMeanMs).toBeCloseTo(2, 6);
  });

  it('shrugs off garbage: no throw, no rate across a restart, a bounded set of refusal reasons (negative case)', () => {
    expect(
      parseMetrics('<html>not metrics</html>\nquorumfence_replica_grants_signed_total{kind="new"} NaN', 0),
    ).toEqual({
      at: 0,
      grantsNew: 0,
      grantsSigned: 0,
      refusals: {},
      requests: {},
      flushSum: 0,
      flushCount: 0,
      signSum: 0,
      signCount: 0,
      flushBuckets: {},
      signingRecords: null,
      epochFloor: null,
    });
    const many = Array.from({ length: 100 }, (_, k) => `quorumfence_replica_refusals_total{reason="r${k}"} 1`).join(
      '\n',
    );
    expect(Object.keys(parseMetrics(many, 0).refusals).length).toBeLessThanOrEqual(16);
    const manyTypes = many.replaceAll('refusals_total{reason=', 'requests_total{type=');
    expect(Object.keys(parseMetrics(manyTypes, 0).requests).length).toBeLessThanOrEqual(16);
    const restarted = metricsFigures(parseMetrics(METRICS, 2_000), { ...parseMetrics(METRICS, 1_000), grantsNew: 99 });
    expect(restarted.grantsPerSecond).toBeNull();
    const refusalsRestarted = metricsFigures(parseMetrics(METRICS, 2_000), {
      ...parseMetrics(METRICS, 1_000),
      refusals: { busy: 99 },
    });
    expect(refusalsRestarted.refusalsPerSecond).toBeNull();
    expect(parseHealth('nonsense')).toEqual({
      status: 'unknown',
      replica: null,
      clusterId: null,
      version: null,
      uptimeSeconds: null,
      lastError: null,
    });
    const long = parseHealth({ status: 'ok', version: 'x'.repeat(10_000), replica: 1.5, lastError: { message: 7 } });
    expect(long.version).toHaveLength(200);
    expect(long.replica).toBeNull();
    expect(long.lastError).toEqual({ at: '', message: '' });
  });
});

describe('equivocation documents', () => {
  const dealt = dealCluster(4, loadBackend());
  const { cluster } = dealt;
  const grant = (holder: number, epoch = 7n): Grant => ({
    clusterId: cluster.id,
    resource: 'orders',
    epoch,
    holder: new Uint8Array(32).fill(holder),
  });
  const grantJson = (g: Grant) => ({
    clusterId: toHex(g.clusterId),
    resource: g.resource,
    epoch: String(g.epoch),
    holder: toHex(g.holder),
  });
  const document = (signer: number, a: Grant, b: Grant, replica = signer) => ({
    format: EVIDENCE_FORMAT,
    replica,
    observedAt: '2026-01-01T00:00:00.000Z',
    grant: grantJson(a),
    partial: toHex(dealt.partial(signer, a).bytes),
    conflicting: { grant: grantJson(b), partial: toHex(dealt.partial(signer, b).bytes) },
  });

  it('round-trips a document that convicts its replica', () => {
    const evidence = equivocationFromJson(document(2, grant(1), grant(2)), cluster);
    expect(evidence).toMatchObject({ kind: 'equivocation', replica: 2 });
    expect(equivocationToJson(evidence)).toEqual(document(2, grant(1), grant(2)));
  });

  it.each([
    ['naming another replica than the signer', () => document(2, grant(1), grant(2), 3), 'INVALID_ARGUMENT'],
    ['one holder twice', () => document(2, grant(1), grant(1)), 'INVALID_ARGUMENT'],
    ['two epochs', () => document(2, grant(1, 7n), grant(2, 8n)), 'INVALID_ARGUMENT'],
    ['a replica index out of range', () => document(2, grant(1), grant(2), 9), 'INVALID_ARGUMENT'],
    ['another format', () => ({ ...document(2, grant(1), grant(2)), format: 'x' }), 'INVALID_ARGUMENT'],
    ['a short partial', () => ({ ...document(2, grant(1), grant(2)), partial: 'abcd' }), 'BAD_LENGTH'],
    [
      'an epoch as a number',
      () => ({ ...document(2, grant(1), grant(2)), grant: { ...grantJson(grant(1)), epoch: 7 } }),
      'INVALID_ARGUMENT',
    ],
    ['not an object', () => 'evidence', 'INVALID_ARGUMENT'],
  ])('refuses a document with %s', (_name, make, code) => {
    expect(codeOf(() => equivocationFromJson(make(), cluster))).toBe(code);
  });
});
