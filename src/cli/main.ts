/**
 * `quorumfence <verb> ...`: the operator's command. The development tools (demo, chaos, bench, worker) are a
 * separate command, `quorumfence-dev` (src/devtools), so this one ships only what runs a cluster.
 */
import { runCommandLine, type VerbTable } from '../command/dispatch.js';

/** The development tools' verbs, named (not imported) so a user who types one here is told where it lives. */
const DEV_VERBS = ['demo', 'chaos', 'simulate', 'bench', 'worker', 'vectors'];

const verbs: VerbTable = {
  keygen: () => import('./keygen.js'),
  verify: () => import('./verify.js'),
  replica: () => import('./replica.js'),
  resource: () => import('./resource.js'),
  acquire: () => import('./acquire.js'),
  status: () => import('./status.js'),
  identity: () => import('./identity.js'),
  dkg: () => import('./dkg.js'),
  reshare: () => import('./reshare.js'),
  console: () => import('./console.js'),
};

export function main(argv: string[]): Promise<number> {
  return runCommandLine('quorumfence', verbs, argv, { program: 'quorumfence-dev', verbs: DEV_VERBS });
}
