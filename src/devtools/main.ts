/**
 * `quorumfence-dev <verb> ...`: the development tools: the local demo (`npm start`), the chaos soak, the
 * benchmark, and the demo worker. They build on the SDK, the testing tools and the shared command layer;
 * the operator's command (src/cli) never imports them, and they never import it.
 */
import { runCommandLine, type VerbTable } from '../command/dispatch.js';

const verbs: VerbTable = {
  demo: () => import('./demo.js'),
  chaos: () => import('./chaos.js'),
  bench: () => import('./bench.js'),
  worker: () => import('./worker.js'),
};

export function main(argv: string[]): Promise<number> {
  return runCommandLine('quorumfence-dev', verbs, argv);
}
