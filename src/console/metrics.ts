/** The console's own Prometheus metrics (names fixed in metric-names.ts), in a registry of its own. */
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import { CONSOLE_METRICS } from './metric-names.js';

export class ConsoleMetrics {
  readonly registry = new Registry();
  readonly quorumMargin: Gauge;
  readonly replicaReachable: Gauge<'replica'>;
  readonly replicaFaulty: Gauge<'replica'>;
  readonly evidence: Counter<'kind'>;

  constructor(clusterIdHex: string) {
    this.registry.setDefaultLabels({ cluster: clusterIdHex.slice(0, 16) });
    const registers = [this.registry];
    this.quorumMargin = new Gauge({
      name: CONSOLE_METRICS.quorumMargin,
      help: 'Replicas that answer and are not shown faulty, minus the 2f+1 an acquire needs',
      registers,
    });
    this.replicaReachable = new Gauge({
      name: CONSOLE_METRICS.replicaReachable,
      help: '1 when the console reached the replica at its last poll, else 0',
      labelNames: ['replica'],
      registers,
    });
    this.replicaFaulty = new Gauge({
      name: CONSOLE_METRICS.replicaFaulty,
      help: '1 when the console holds proof that the replica is faulty (docs/console.md), else 0',
      labelNames: ['replica'],
      registers,
    });
    this.evidence = new Counter({
      name: CONSOLE_METRICS.evidence,
      help: 'Evidence of misbehaviour recorded since the console started, by kind',
      labelNames: ['kind'],
      registers,
    });
    // The standard process_* and nodejs_* names, as the replicas and the resource export them: stock dashboards read them.
    collectDefaultMetrics({ register: this.registry });
  }
}
