/**
 * The replica's Prometheus metrics, in a registry of its own (so that two
 * replicas in one test process, or a replica beside a guard, never clash).
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** Signing is ~1 ms, a flush 1-10 ms on SSDs; buckets from 0.1 ms to 1 s cover healthy and sick disks. */
const LATENCY_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];

export type RefusalReason = 'invalid' | 'forbidden' | 'stale' | 'busy' | 'too_far' | 'not_holder';

/**
 * How an acquire left a resource's line (docs/protocol.md, Hot handoffs): decided at its turn, its wait over
 * first, withdrawn by its holder's release, its connection closed (or the replica stopping), the replica frozen.
 */
export type LineExit = 'turn' | 'expired' | 'withdrawn' | 'closed' | 'frozen';

export class ReplicaMetrics {
  readonly registry = new Registry();
  readonly grantsSigned: Counter<'kind'>;
  readonly leaseJoins: Counter;
  readonly refusals: Counter<'reason'>;
  readonly requests: Counter<'type'>;
  readonly signSeconds: Histogram;
  readonly flushSeconds: Histogram;
  readonly connections: Gauge;
  readonly closes: Counter<'code'>;
  readonly wireErrors: Counter<'code'>;
  readonly compactedRecords: Counter;
  readonly lineExits: Counter<'how'>;

  constructor(
    labels: { replica: number; cluster: string; n: number; t: number },
    activeLeases: () => number,
    store: () => { readonly records: number; readonly floor: bigint } = () => ({ records: 0, floor: 0n }),
    lineWaiters: () => number = () => 0,
  ) {
    this.registry.setDefaultLabels({ replica: String(labels.replica), cluster: labels.cluster.slice(0, 16) });
    const registers = [this.registry];
    this.grantsSigned = new Counter({
      name: 'quorumfence_replica_grants_signed_total',
      help: 'Partials sent: kind="new" for a fresh grant, kind="resend" for an identical re-request',
      labelNames: ['kind'],
      registers,
    });
    this.leaseJoins = new Counter({
      name: 'quorumfence_replica_lease_joins_total',
      help: 'Leases this replica joined on a renewal without having signed their grant (recorded, nothing signed)',
      registers,
    });
    this.refusals = new Counter({
      name: 'quorumfence_replica_refusals_total',
      help: 'Requests refused, by reason',
      labelNames: ['reason'],
      registers,
    });
    this.requests = new Counter({
      name: 'quorumfence_replica_requests_total',
      help: 'Authenticated requests, by type',
      labelNames: ['type'],
      registers,
    });
    this.signSeconds = new Histogram({
      name: 'quorumfence_replica_sign_seconds',
      help: 'Time to compute one partial signature',
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.flushSeconds = new Histogram({
      name: 'quorumfence_replica_flush_seconds',
      help: 'Time from writing a signing record to it being on stable storage',
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.connections = new Gauge({
      name: 'quorumfence_replica_connections',
      help: 'Open WebSocket connections',
      registers,
    });
    this.closes = new Counter({
      name: 'quorumfence_replica_connection_closes_total',
      help: 'Connections the replica closed, by close code',
      labelNames: ['code'],
      registers,
    });
    this.wireErrors = new Counter({
      name: 'quorumfence_replica_wire_errors_total',
      help: 'Error frames sent, by code',
      labelNames: ['code'],
      registers,
    });
    new Gauge({
      name: 'quorumfence_replica_active_leases',
      help: 'Leases running now (including the restart leases of untouched records)',
      registers,
      collect() {
        this.set(activeLeases());
      },
    });
    this.compactedRecords = new Counter({
      name: 'quorumfence_replica_compacted_records_total',
      help: 'Signing records folded into the epoch floor by compaction',
      registers,
    });
    new Gauge({
      name: 'quorumfence_replica_signing_records',
      help: 'Records in the signing record (live and retained resources)',
      registers,
      collect() {
        this.set(store().records);
      },
    });
    this.lineExits = new Counter({
      name: 'quorumfence_replica_line_exits_total',
      help: 'Acquires that left a line, by how: turn, expired (the wait was over first), withdrawn, closed, frozen',
      labelNames: ['how'],
      registers,
    });
    new Gauge({
      name: 'quorumfence_replica_line_waiters',
      help: 'Acquires waiting their turn in lines now (hot handoffs)',
      registers,
      collect() {
        this.set(lineWaiters());
      },
    });
    new Gauge({
      name: 'quorumfence_replica_epoch_floor',
      help: 'The replica-wide epoch floor (as a float: exact below 2^53)',
      registers,
      collect() {
        this.set(Number(store().floor));
      },
    });
    // The cluster's size and threshold, so that Prometheus can compute the quorum margin from the
    // replicas alone: count(up == 1) - max(threshold), with no console running.
    new Gauge({
      name: 'quorumfence_replica_cluster_replicas',
      help: 'Replicas in this cluster (n = 3f+1), from the cluster description',
      registers,
    }).set(labels.n);
    new Gauge({
      name: 'quorumfence_replica_cluster_threshold',
      help: 'Partials an acquire needs (t = 2f+1), from the cluster description',
      registers,
    }).set(labels.t);
    // prom-client's process and Node.js metrics under their standard names (process_cpu_seconds_total,
    // nodejs_eventloop_lag_seconds, ...), which stock Node.js dashboards read; the registry's default labels
    // (replica, cluster) tell the processes apart.
    collectDefaultMetrics({ register: this.registry });
  }
}
