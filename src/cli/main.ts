/**
 * `quorumfence <verb> ...`: looks up the verb, runs it, and turns errors into
 * one line on stderr with the error code. Verbs load lazily so that `verify`
 * does not pay for the replica's storage engine.
 */
import { QuorumFenceError } from '../common/errors.js';
import type { Command } from './args.js';

const verbs: Record<string, () => Promise<{ command: Command }>> = {
  keygen: () => import('./keygen.js'),
  verify: () => import('./verify.js'),
  replica: () => import('./replica.js'),
  resource: () => import('./resource.js'),
  bench: () => import('./bench.js'),
  demo: () => import('./demo.js'),
  worker: () => import('./worker.js'),
  acquire: () => import('./acquire.js'),
  status: () => import('./status.js'),
  identity: () => import('./identity.js'),
  chaos: () => import('./chaos.js'),
  dkg: () => import('./dkg.js'),
  reshare: () => import('./reshare.js'),
};

function verbList(loaded: [string, Command][]): string {
  const width = Math.max(...loaded.map(([name]) => name.length));
  return loaded.map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`).join('\n');
}

export async function main(argv: string[]): Promise<number> {
  const [verb, ...rest] = argv;
  if (verb === undefined || verb === '--help' || verb === '-h' || verb === 'help') {
    const loaded = await Promise.all(
      Object.entries(verbs).map(async ([name, load]) => [name, (await load()).command] as [string, Command]),
    );
    process.stdout.write(
      `usage: quorumfence <command> [options]\n\ncommands:\n${verbList(loaded)}\n\nRun "quorumfence <command> --help" for a command's options.\n`,
    );
    return verb === undefined ? 2 : 0;
  }
  const load = verbs[verb];
  if (!load) {
    process.stderr.write(`quorumfence: unknown command "${verb}"; run "quorumfence --help" for the list\n`);
    return 2;
  }
  const { command } = await load();
  if (rest.includes('--help') || rest.includes('-h')) {
    process.stdout.write(command.usage.endsWith('\n') ? command.usage : command.usage + '\n');
    return 0;
  }
  try {
    return await command.run(rest);
  } catch (error) {
    if (error instanceof QuorumFenceError) {
      const hint = error.code === 'INVALID_OPTION' ? `; run "quorumfence ${verb} --help"` : '';
      process.stderr.write(`quorumfence ${verb}: ${error.message} (${error.code})${hint}\n`);
      return error.code === 'INVALID_OPTION' ? 2 : 1;
    }
    throw error;
  }
}
