/**
 * `quorumfence-dev <verb> ...`: the development tools: the local demo (`npm start`), the chaos soak, the
 * cluster simulator, the benchmark, and the demo worker. They build on the SDK, the testing tools and the shared command layer;
 * the operator's command (src/cli) never imports them, and they never import it.
 */
import { runCommandLine, type VerbTable } from '../command/dispatch.js';

/** The operator's verbs, named (not imported): neither program loads the other's code. */
// One line: the docs test reads this list as JSON.
// prettier-ignore
const OPERATOR_VERBS = [
  'keygen',
  'verify',
  'replica',
  'resource',
  'acquire',
  'lock',
  'release',
  'status',
  'health',
  'identity',
  'dkg',
  'reshare',
  'console',
  'version',
  'completion',
];

const verbs: VerbTable = {
  demo: () => import('./demo.js'),
  chaos: () => import('./chaos.js'),
  simulate: () => import('./simulate.js'),
  bench: () => import('./bench.js'),
  worker: () => import('./worker.js'),
  vectors: () => import('./vectors.js'),
};

export function main(argv: string[]): Promise<number> {
  return runCommandLine('quorumfence-dev', verbs, argv, { program: 'quorumfence', verbs: OPERATOR_VERBS });
}
