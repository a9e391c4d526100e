/**
 * Each replica's word about itself: its /healthz answer and the few figures the console shows from its
 * /metrics (grants per second between two polls, refusals by reason, flush latency). Fetched with a timeout
 * and a size bound, parsed defensively (a lying replica may send anything), and always labelled as that
 * replica's claim: nothing here is checked against the other replicas.
 */
import { QuorumFenceError } from '../common/errors.js';

/** Health and metrics answers larger than this are refused (a replica's /metrics is ~10 KB). */
const MAX_BODY_BYTES = 1024 * 1024;
/** Strings a replica supplies are cut to this length before anyone sees them. */
const MAX_TEXT = 200;

export interface HealthClaim {
  readonly status: string;
  readonly replica: number | null;
  readonly clusterId: string | null;
  readonly version: string | null;
  readonly uptimeSeconds: number | null;
  readonly lastError: { readonly at: string; readonly message: string } | null;
}

/** The counters and sums the console reads from one /metrics answer. */
export interface MetricsSample {
  /** Wall-clock ms when it was taken (the console's clock). */
  readonly at: number;
  /** quorumfence_replica_grants_signed_total{kind="new"}. */
  readonly grantsNew: number;
  /** quorumfence_replica_grants_signed_total, every kind (new grants and resends): partials signed. */
  readonly grantsSigned: number;
  /** quorumfence_replica_refusals_total by reason. */
  readonly refusals: Readonly<Record<string, number>>;
  /** quorumfence_replica_requests_total by type (acquire, renew, release, ...). */
  readonly requests: Readonly<Record<string, number>>;
  /** quorumfence_replica_flush_seconds _sum and _count. */
  readonly flushSum: number;
  readonly flushCount: number;
  /** quorumfence_replica_sign_seconds _sum and _count. */
  readonly signSum: number;
  readonly signCount: number;
  /** quorumfence_replica_flush_seconds_bucket by its `le` label (cumulative counts, as exported). */
  readonly flushBuckets: Readonly<Record<string, number>>;
  /** quorumfence_replica_signing_records: records in its store (live and retained resources). */
  readonly signingRecords: number | null;
  /** quorumfence_replica_epoch_floor: its replica-wide epoch floor (a float: exact below 2^53). */
  readonly epochFloor: number | null;
}

/** What the page shows from two consecutive samples. */
export interface MetricsFigures {
  /** New grants per second since the previous sample (null on the first). */
  readonly grantsPerSecond: number | null;
  readonly refusals: Readonly<Record<string, number>>;
  /** Refusals per second by reason since the previous sample (null on the first, or after a restart). */
  readonly refusalsPerSecond: Readonly<Record<string, number>> | null;
  /** Mean flush (fsync) latency in ms over the last interval, or over the replica's life when none happened since. */
  readonly flushMeanMs: number | null;
  readonly flushes: number;
  readonly signingRecords: number | null;
  readonly epochFloor: number | null;
}

function text(value: unknown): string | null {
  return typeof value === 'string' ? value.slice(0, MAX_TEXT) : null;
}

function finite(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/** Reads a /healthz body into the fields the console shows; anything missing or mistyped becomes null. */
export function parseHealth(body: unknown): HealthClaim {
  const o = (typeof body === 'object' && body !== null && !Array.isArray(body) ? body : {}) as Record<string, unknown>;
  const lastError = o.lastError as Record<string, unknown> | null | undefined;
  const replica = finite(o.replica);
  return {
    status: text(o.status) ?? 'unknown',
    replica: replica !== null && Number.isSafeInteger(replica) ? replica : null,
    clusterId: text(o.clusterId),
    version: text(o.version),
    uptimeSeconds: finite(o.uptimeSeconds),
    lastError:
      typeof lastError === 'object' && lastError !== null && !Array.isArray(lastError)
        ? { at: text(lastError.at) ?? '', message: text(lastError.message) ?? '' }
        : null,
  };
}

const SAMPLE_LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/** Refusal reasons and bucket bounds are label values a replica chooses: keep a bounded number of short ones. */
const MAX_REASONS = 16;
const MAX_BUCKETS = 32;

/** Reads the console's figures from Prometheus text. Unknown lines are skipped; nothing here throws. */
export function parseMetrics(body: string, at: number): MetricsSample {
  let grantsNew = 0;
  let grantsSigned = 0;
  let flushSum = 0;
  let flushCount = 0;
  let signSum = 0;
  let signCount = 0;
  let signingRecords: number | null = null;
  let epochFloor: number | null = null;
  const refusals: Record<string, number> = {};
  const requests: Record<string, number> = {};
  const flushBuckets: Record<string, number> = {};
  for (const line of body.split('\n')) {
    if (!line.startsWith('quorumfence_replica_')) continue;
    const match = SAMPLE_LINE.exec(line);
    if (!match) continue;
    const value = Number(match[3]);
    if (!Number.isFinite(value)) continue;
    const labels = new Map<string, string>();
    for (const m of (match[2] ?? '').matchAll(LABEL)) labels.set(m[1]!, m[2]!);
    switch (match[1]) {
      case 'quorumfence_replica_grants_signed_total':
        if (labels.get('kind') === 'new') grantsNew += value;
        grantsSigned += value;
        break;
      case 'quorumfence_replica_refusals_total': {
        const reason = (labels.get('reason') ?? '').slice(0, 32);
        if (reason in refusals || Object.keys(refusals).length < MAX_REASONS)
          refusals[reason] = (refusals[reason] ?? 0) + value;
        break;
      }
      case 'quorumfence_replica_requests_total': {
        const type = (labels.get('type') ?? '').slice(0, 32);
        if (type in requests || Object.keys(requests).length < MAX_REASONS)
          requests[type] = (requests[type] ?? 0) + value;
        break;
      }
      case 'quorumfence_replica_flush_seconds_sum':
        flushSum += value;
        break;
      case 'quorumfence_replica_flush_seconds_count':
        flushCount += value;
        break;
      case 'quorumfence_replica_sign_seconds_sum':
        signSum += value;
        break;
      case 'quorumfence_replica_sign_seconds_count':
        signCount += value;
        break;
      case 'quorumfence_replica_flush_seconds_bucket': {
        const le = (labels.get('le') ?? '').slice(0, 16);
        if (le in flushBuckets || Object.keys(flushBuckets).length < MAX_BUCKETS)
          flushBuckets[le] = (flushBuckets[le] ?? 0) + value;
        break;
      }
      case 'quorumfence_replica_signing_records':
        signingRecords = value;
        break;
      case 'quorumfence_replica_epoch_floor':
        epochFloor = value;
        break;
      default:
        break;
    }
  }
  return {
    at,
    grantsNew,
    grantsSigned,
    refusals,
    requests,
    flushSum,
    flushCount,
    signSum,
    signCount,
    flushBuckets,
    signingRecords,
    epochFloor,
  };
}

/** The page's figures from the latest sample and the one before it (if any). */
export function metricsFigures(latest: MetricsSample, previous: MetricsSample | undefined): MetricsFigures {
  const seconds = previous ? (latest.at - previous.at) / 1000 : 0;
  const grants = previous ? latest.grantsNew - previous.grantsNew : 0;
  const flushes = previous ? latest.flushCount - previous.flushCount : 0;
  const flushMeanMs =
    previous && flushes > 0
      ? ((latest.flushSum - previous.flushSum) / flushes) * 1000
      : latest.flushCount > 0
        ? (latest.flushSum / latest.flushCount) * 1000
        : null;
  // A counter that went down means the replica restarted: no rate for that interval.
  let refusalsPerSecond: Record<string, number> | null = previous && seconds > 0 ? {} : null;
  for (const [reason, count] of Object.entries(latest.refusals)) {
    if (!refusalsPerSecond || !previous) break;
    const increase = count - (previous.refusals[reason] ?? 0);
    if (increase < 0) refusalsPerSecond = null;
    else refusalsPerSecond[reason] = increase / seconds;
  }
  return {
    grantsPerSecond: previous && seconds > 0 && grants >= 0 ? grants / seconds : null,
    refusals: latest.refusals,
    refusalsPerSecond,
    flushMeanMs,
    flushes: latest.flushCount,
    signingRecords: latest.signingRecords,
    epochFloor: latest.epochFloor,
  };
}

/**
 * GETs `url` with a timeout and a size bound.
 * @throws QuorumFenceError TIMEOUT, CONNECTION_FAILED (network error, non-2xx, too large)
 */
export async function fetchBounded(url: string, timeoutMs: number): Promise<string> {
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs), redirect: 'error' });
  } catch (error) {
    const name = (error as Error).name;
    throw new QuorumFenceError(
      name === 'TimeoutError' ? 'TIMEOUT' : 'CONNECTION_FAILED',
      name === 'TimeoutError' ? `no answer within ${timeoutMs} ms` : `${(error as Error).message}`.slice(0, MAX_TEXT),
    );
  }
  if (!response.ok) {
    await response.body?.cancel();
    throw new QuorumFenceError('CONNECTION_FAILED', `HTTP ${response.status}`);
  }
  const reader = response.body?.getReader();
  if (!reader) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > MAX_BODY_BYTES) {
      await reader.cancel();
      throw new QuorumFenceError('CONNECTION_FAILED', `answer larger than ${MAX_BODY_BYTES} bytes`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** The http(s) base of a replica's WebSocket endpoint (its /healthz and /metrics are on the same port). */
export function httpBase(endpoint: string): string {
  return endpoint.replace(/^ws/, 'http').replace(/\/+$/, '');
}
