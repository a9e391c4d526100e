/**
 * Every Byzantine replica behaviour on f = 1 of N = 4 replicas, with a paused
 * holder, contending clients and a partition (the scenario is described in
 * behaviour-scenario.ts): zero violations, and every uncontended acquire completes.
 */
import { behaviourScenario } from './behaviour-scenario.js';

behaviourScenario(1);
