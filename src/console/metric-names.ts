/**
 * The names the operator console exports on its own `/metrics`. They are fixed here, apart from the
 * console's code, because the Prometheus alert rules and the Grafana dashboard under deploy/ name
 * them too, and a test checks that every name those files use is one a process really exports.
 *
 * The console is the one process that watches the whole cluster (leases f+1 replicas list, faults
 * only on proof), so the figures no single replica can report about itself come from it: how many more replicas
 * may fail before acquires stop, and the evidence of misbehaving replicas.
 */
export const CONSOLE_METRICS = {
  /** Gauge: replicas that answer (and are not shown faulty) minus the 2f+1 an acquire needs. */
  quorumMargin: 'quorumfence_console_quorum_margin',
  /** Gauge per `replica` label: 1 when the console reached the replica at its last poll, else 0. */
  replicaReachable: 'quorumfence_console_replica_reachable',
  /** Gauge per `replica` label: 1 when the console holds proof that it is faulty (docs/console.md). */
  replicaFaulty: 'quorumfence_console_replica_faulty',
  /** Counter per `kind` label: evidence of misbehaviour recorded since the console started. */
  evidence: 'quorumfence_console_evidence_total',
} as const;
