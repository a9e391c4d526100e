/**
 * `quorumfence/testing`: the tools to attack and judge a deployment, for users' own tests (src/testing/README.md).
 * The Byzantine replica runs as its own process (`dist/nodes/byzantine-replica.js`); its control API is here.
 */
export * from './history-checker.js';
export * from './fault-proxy.js';
export * from './delay-proxy.js';
export * from './seeded-random.js';
export * from './workload.js';
export * from './byzantine-clients.js';
export * from './twins.js';
export * from './holder-process.js';
export * from './scenario-cluster.js';
export * from './chaos.js';
export { byzantineEntryPoint, byzantineState, controlByzantine } from './byzantine/control.js';
export { BYZANTINE_BEHAVIOURS, type ByzantineBehaviour } from './byzantine/behaviours.js';
