/**
 * `<program> <verb> ...`: looks up the verb, runs it, and turns errors into one line on stderr ending with the
 * error code in parentheses. One implementation for both programs (the operator's `quorumfence` and the development tools'
 * `quorumfence-dev`). Verbs load lazily so that `verify` does not pay for the replica's storage engine.
 */
import { QuorumFenceError } from '../common/errors.js';
import { PACKAGE_VERSION } from '../common/version.js';
import type { Command } from './args.js';

export type VerbTable = Readonly<Record<string, () => Promise<{ command: Command }>>>;

function verbList(loaded: [string, Command][]): string {
  const width = Math.max(...loaded.map(([name]) => name.length));
  return loaded.map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`).join('\n');
}

/** The other program and its verbs, so a verb typed into the wrong one is answered with the right command. */
export interface OtherProgram {
  readonly program: string;
  readonly verbs: readonly string[];
}

/** Runs one command line of `program`; resolves with the exit code (0 done, 1 failure or refusal, 2 bad flags). */
export async function runCommandLine(
  program: string,
  verbs: VerbTable,
  argv: string[],
  other?: OtherProgram,
): Promise<number> {
  const [first, ...after] = argv;
  // `--version` as every command-line tool answers it: the version verb where the program has one.
  if (first === '--version' && after.length === 0 && !Object.hasOwn(verbs, 'version')) {
    process.stdout.write(`${program} ${PACKAGE_VERSION}\n`);
    return 0;
  }
  const [verb, ...rest] = first === '--version' ? ['version', ...after] : argv;
  if (verb === undefined || verb === '--help' || verb === '-h' || verb === 'help') {
    const loaded = await Promise.all(
      Object.entries(verbs).map(async ([name, load]) => [name, (await load()).command] as [string, Command]),
    );
    process.stdout.write(
      `usage: ${program} <command> [options]\n       ${program} --version\n\ncommands:\n${verbList(loaded)}\n\nRun "${program} <command> --help" for a command's options.\n`,
    );
    return verb === undefined ? 2 : 0;
  }
  const load = Object.hasOwn(verbs, verb) ? verbs[verb] : undefined;
  if (!load) {
    const hint = other?.verbs.includes(verb)
      ? `"${verb}" is a command of ${other.program}: run "${other.program} ${verb}"`
      : `run "${program} --help" for the list`;
    process.stderr.write(`${program}: unknown command "${verb}"; ${hint} (INVALID_OPTION)\n`);
    return 2;
  }
  const { command } = await load();
  // Only the verb's own words: after "--" come another program's (`lock R -- grep --help`).
  const own = rest.includes('--') ? rest.slice(0, rest.indexOf('--')) : rest;
  if (own.includes('--help') || own.includes('-h')) {
    process.stdout.write(command.usage.endsWith('\n') ? command.usage : command.usage + '\n');
    return 0;
  }
  try {
    return await command.run(rest);
  } catch (error) {
    if (error instanceof QuorumFenceError) {
      const hint = error.code === 'INVALID_OPTION' ? `; run "${program} ${verb} --help"` : '';
      // The code ends the line, so a script (or a person) finds it in one place.
      process.stderr.write(`${program} ${verb}: ${error.message}${hint} (${error.code})\n`);
      return command.failureExitCode ?? (error.code === 'INVALID_OPTION' ? 2 : 1);
    }
    throw error;
  }
}
