/**
 * `quorumfence health`: every replica's own /healthz (reachable, version, uptime, last error) and the quorum
 * margin, healthy replicas minus the 2f+1 an acquire needs. Needs no identity: /healthz is plain HTTP on the
 * replica's port. Each answer is that replica's claim; a replica counts as healthy only if it answers for the
 * cluster and index cluster.json gives it and is not frozen.
 */
import { QuorumFenceError } from '../common/errors.js';
import type { Cluster } from '../cluster/description.js';
import { fetchBounded, httpBase, parseHealth, type HealthClaim } from '../console/replica-health.js';
import { parseDuration, parseFlags, type Command } from '../command/args.js';
import { CLUSTER_FLAG_USAGE, clusterPathOf, loadClusterForCommand } from './client-flags.js';

/** Between two polls of --wait: quick enough for a script waiting on a cluster that is starting. */
const WAIT_POLL_MS = 250;

const usage = `usage: quorumfence health [--cluster FILE] [--timeout 2s] [--wait DURATION] [--json]

Asks every replica in the cluster description for its /healthz (plain HTTP on
the replica's port; no identity needed) and prints a table: reachable,
version, uptime, last error, and whether it counts as healthy (it answers,
for this cluster and its own index, and is not frozen for a reshare). The
summary gives the quorum margin: healthy replicas minus the 2f+1 an acquire
needs, so 0 means one more failure stops acquires. What a replica says about
itself is its own claim ("quorumfence console" checks the replicas' claims
against each other). For wss:// replicas whose certificate this machine does
not trust, set NODE_EXTRA_CA_CERTS to the CA file.

Exit codes: 0 margin >= 0; 1 margin below 0 (acquires cannot succeed); 2 bad flags.

options:
${CLUSTER_FLAG_USAGE}
  --timeout DURATION  how long each replica may take to answer           (default 2s)
  --wait DURATION     ask again until the margin is >= 0, at most this long (default 0: ask once)
  --json              print one JSON object instead of a table
`;

export interface ReplicaHealth {
  readonly replica: number;
  readonly endpoint: string;
  /** It answered /healthz with 200 and JSON. */
  readonly reachable: boolean;
  readonly healthy: boolean;
  readonly version: string | null;
  readonly uptimeSeconds: number | null;
  readonly lastError: HealthClaim['lastError'];
  /** Why it is not healthy; null when it is. */
  readonly problem: string | null;
}

export interface HealthReport {
  readonly clusterId: string;
  readonly n: number;
  readonly f: number;
  readonly t: number;
  readonly healthy: number;
  /** healthy - t: how many more replicas may fail before acquires stop (negative: they already have). */
  readonly margin: number;
  readonly replicas: readonly ReplicaHealth[];
}

/** One replica's /healthz answer (the body as text) or why there was none. */
export type HealthAnswer =
  { readonly ok: true; readonly body: string } | { readonly ok: false; readonly message: string };

/** Judges one replica's answer against what cluster.json says it is. Pure. */
export function judgeReplica(cluster: Cluster, replica: number, answer: HealthAnswer): ReplicaHealth {
  const endpoint = cluster.replicas[replica - 1]!.endpoint;
  const none = { replica, endpoint, version: null, uptimeSeconds: null, lastError: null };
  if (!answer.ok) return { ...none, reachable: false, healthy: false, problem: answer.message };
  let json: unknown;
  try {
    json = JSON.parse(answer.body);
  } catch {
    return { ...none, reachable: false, healthy: false, problem: 'its /healthz answer is not JSON' };
  }
  const claim = parseHealth(json);
  const frozen = typeof json === 'object' && json !== null && (json as { frozen?: unknown }).frozen === true;
  const problem =
    claim.clusterId !== cluster.idHex
      ? `answers for another cluster (${claim.clusterId ?? 'none'})`
      : claim.replica !== replica
        ? `answers as replica ${claim.replica ?? 'none'}, not ${replica}`
        : frozen
          ? 'frozen for a reshare: it signs nothing'
          : claim.status !== 'ok'
            ? `status ${claim.status}`
            : null;
  return {
    replica,
    endpoint,
    reachable: true,
    healthy: problem === null,
    version: claim.version,
    uptimeSeconds: claim.uptimeSeconds,
    lastError: claim.lastError,
    problem,
  };
}

/** The report from every replica's judgement. Pure. */
export function healthReport(cluster: Cluster, replicas: readonly ReplicaHealth[]): HealthReport {
  const healthy = replicas.filter((r) => r.healthy).length;
  return {
    clusterId: cluster.idHex,
    n: cluster.n,
    f: cluster.f,
    t: cluster.t,
    healthy,
    margin: healthy - cluster.t,
    replicas,
  };
}

/** "3d 4h", "12m 3s", "45s". */
export function formatUptime(seconds: number | null): string {
  if (seconds === null || seconds < 0) return '-';
  const s = Math.floor(seconds);
  if (s >= 86_400) return `${Math.floor(s / 86_400)}d ${Math.floor((s % 86_400) / 3600)}h`;
  if (s >= 3600) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  if (s >= 60) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${s}s`;
}

/** The table `health` prints. Pure. */
export function formatHealthReport(report: HealthReport): string {
  const summary =
    `cluster ${report.clusterId.slice(0, 16)}… (n ${report.n}, f ${report.f}): ${report.healthy} of ${report.n} replicas healthy, ` +
    `${report.t} needed: margin ${report.margin}` +
    (report.margin < 0
      ? ' (acquires cannot succeed)'
      : report.margin === 0
        ? ' (one more failure stops acquires)'
        : '');
  const rows = report.replicas.map((r) => [
    String(r.replica),
    r.endpoint,
    r.reachable ? 'yes' : 'no',
    r.version ?? '-',
    formatUptime(r.uptimeSeconds),
    r.healthy ? 'healthy' : 'unhealthy',
    r.problem ?? (r.lastError ? `last error ${r.lastError.at}: ${r.lastError.message}` : '-'),
  ]);
  const header = ['replica', 'endpoint', 'reachable', 'version', 'uptime', 'health', 'problem or last error'];
  const widths = header.map((h, k) => Math.max(h.length, ...rows.map((row) => row[k]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, k) => (k === cells.length - 1 ? cell : cell.padEnd(widths[k]!)))
      .join('  ')
      .trimEnd();
  return [summary, line(header), ...rows.map(line)].join('\n') + '\n';
}

async function askReplica(cluster: Cluster, replica: number, timeoutMs: number): Promise<HealthAnswer> {
  try {
    return {
      ok: true,
      body: await fetchBounded(`${httpBase(cluster.replicas[replica - 1]!.endpoint)}/healthz`, timeoutMs),
    };
  } catch (error) {
    if (error instanceof QuorumFenceError) return { ok: false, message: error.message };
    throw error;
  }
}

/** Asks every replica at once. */
export async function checkHealth(cluster: Cluster, timeoutMs: number): Promise<HealthReport> {
  const answers = await Promise.all(cluster.replicas.map((r) => askReplica(cluster, r.index, timeoutMs)));
  return healthReport(
    cluster,
    answers.map((answer, k) => judgeReplica(cluster, cluster.replicas[k]!.index, answer)),
  );
}

export const command: Command = {
  summary: "every replica's health and the quorum margin, in a table or JSON",
  usage,
  async run(argv) {
    const { values } = parseFlags(argv, {
      cluster: { type: 'string' },
      timeout: { type: 'string' },
      wait: { type: 'string' },
      json: { type: 'boolean' },
    });
    const timeoutMs = parseDuration(values.timeout, 'timeout', 2_000);
    if (timeoutMs < 1) throw new QuorumFenceError('INVALID_OPTION', '--timeout must be above 0');
    const waitMs = parseDuration(values.wait, 'wait', 0);
    const cluster = loadClusterForCommand(clusterPathOf(values));
    const deadline = performance.now() + waitMs;
    let report = await checkHealth(cluster, timeoutMs);
    // --wait: bounded by its duration, one poll at a time.
    while (report.margin < 0 && performance.now() + WAIT_POLL_MS < deadline) {
      await new Promise((resolve) => setTimeout(resolve, WAIT_POLL_MS));
      report = await checkHealth(cluster, timeoutMs);
    }
    process.stdout.write(values.json ? JSON.stringify(report) + '\n' : formatHealthReport(report));
    return report.margin < 0 ? 1 : 0;
  },
};
