/**
 * `quorumfence <verb> ...`: the operator's command. The development tools (demo, chaos, bench, worker) are a
 * separate command, `quorumfence-dev` (src/devtools), so this one ships only what runs a cluster.
 */
import { runCommandLine, type VerbTable } from '../command/dispatch.js';

/** The development tools' verbs, named (not imported) so a user who types one here is told where it lives. */
const DEV_VERBS = ['demo', 'chaos', 'simulate', 'bench', 'worker', 'vectors'];

/** Every verb, loaded on first use; `completion` reads its scripts from this table too. */
export const VERBS: VerbTable = {
  keygen: () => import('./keygen.js'),
  verify: () => import('./verify.js'),
  replica: () => import('./replica.js'),
  resource: () => import('./resource.js'),
  acquire: () => import('./acquire.js'),
  lock: () => import('./lock.js'),
  release: () => import('./release.js'),
  status: () => import('./status.js'),
  health: () => import('./health.js'),
  identity: () => import('./identity.js'),
  dkg: () => import('./dkg.js'),
  reshare: () => import('./reshare.js'),
  console: () => import('./console.js'),
  version: () => import('./version.js'),
  completion: () => import('./completion.js'),
};

export function main(argv: string[]): Promise<number> {
  return runCommandLine('quorumfence', VERBS, argv, { program: 'quorumfence-dev', verbs: DEV_VERBS });
}
