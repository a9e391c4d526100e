/**
 * Flag parsing shared by every verb: node's parseArgs in strict mode (unknown
 * flags are refused), with errors turned into one line that says what to do.
 */
import { readFileSync } from 'node:fs';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { expectResource } from '../common/check.js';
import { QuorumFenceError } from '../common/errors.js';

export type OptionSpec = NonNullable<ParseArgsConfig['options']>;

export interface Command {
  /** One line for the verb list. */
  readonly summary: string;
  /** Full --help text. */
  readonly usage: string;
  /** Runs the verb; resolves to the process exit code. */
  run(argv: string[]): Promise<number>;
  /**
   * The exit code for the verb's own errors and bad flags, when 1 and 2 would be mistaken for another
   * program's (`lock` exits with its command's code, so its own failures use 125, as timeout(1) does).
   */
  readonly failureExitCode?: number;
}

/** A verb's subcommands by name, each taking the rest of the command line. */
export type Subcommands = Readonly<Record<string, (argv: string[]) => number | Promise<number>>>;

/**
 * Runs the subcommand `argv[0]` names. With `fallback`, a command line whose first word is absent or a flag
 * runs the fallback with all of argv (`replica --cluster ...` means `replica run ...`).
 * @throws QuorumFenceError INVALID_OPTION naming the subcommands, for a missing or unknown one
 */
export async function runSubcommand(
  argv: string[],
  subcommands: Subcommands,
  fallback?: (argv: string[]) => number | Promise<number>,
): Promise<number> {
  const [name, ...rest] = argv;
  const names = Object.keys(subcommands).join(', ');
  if (name !== undefined && Object.hasOwn(subcommands, name)) return subcommands[name]!(rest);
  if (fallback && (name === undefined || name.startsWith('-'))) return fallback(argv);
  throw new QuorumFenceError(
    'INVALID_OPTION',
    name === undefined ? `a subcommand is needed (${names})` : `unknown subcommand "${name}" (${names})`,
  );
}

/**
 * @throws QuorumFenceError INVALID_OPTION for unknown flags, missing values, or unexpected positionals.
 */
export function parseFlags<O extends OptionSpec>(
  argv: string[],
  options: O,
  positionals: { min?: number; max?: number } = {},
): {
  values: ReturnType<typeof parseArgs<{ options: O; allowPositionals: true; strict: true }>>['values'];
  positionals: string[];
} {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options, allowPositionals: true, strict: true });
  } catch (error) {
    throw new QuorumFenceError(
      'INVALID_OPTION',
      (error as Error).message.replace(/\. To specify a positional.*$/s, ''),
    );
  }
  refuseEmptyValues(parsed.values);
  const { min = 0, max = 0 } = positionals;
  if (parsed.positionals.length < min)
    throw new QuorumFenceError('INVALID_OPTION', `expected ${min} argument(s), got ${parsed.positionals.length}`);
  if (parsed.positionals.length > max) {
    throw new QuorumFenceError('INVALID_OPTION', `unexpected argument "${parsed.positionals[max]}"`);
  }
  return { values: parsed.values, positionals: parsed.positionals };
}

/**
 * The one rule for a flag given with an empty value (`--identity ""`, `--cluster=`): an error, for every flag of
 * every verb. Read as absent, it would fall back to a default or an environment variable the user did not ask
 * for (an unset shell variable in `--identity "$ID"` reads as "use $QUORUMFENCE_IDENTITY"), against the rule that
 * a flag given always wins. Pure.
 * @throws QuorumFenceError INVALID_OPTION naming the first empty flag
 */
export function refuseEmptyValues(values: Readonly<Record<string, unknown>>): void {
  for (const [flag, value] of Object.entries(values)) {
    const empty = value === '' || (Array.isArray(value) && value.includes(''));
    if (empty)
      throw new QuorumFenceError(
        'INVALID_OPTION',
        `--${flag} was given an empty value; give it a value, or leave the flag out for its default`,
      );
  }
}

/** Requires a string flag. @throws QuorumFenceError INVALID_OPTION */
export function required(value: string | undefined, flag: string): string {
  if (value === undefined) throw new QuorumFenceError('INVALID_OPTION', `--${flag} is required`);
  return value;
}

/** A positive integer flag. @throws QuorumFenceError INVALID_OPTION */
export function integerFlag(
  value: string | undefined,
  flag: string,
  fallback: number,
  min = 1,
  max = Number.MAX_SAFE_INTEGER,
): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < min || n > max) {
    throw new QuorumFenceError('INVALID_OPTION', `--${flag} expects an integer in ${min}..${max}, got "${value}"`);
  }
  return n;
}

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/**
 * Parses "250ms", "10s", "2m", "1h" (decimals allowed: "1.5s") into milliseconds. A number without a unit is
 * refused, since "--ttl 10" reads as 10 seconds to some and 10 ms to others; only "0" needs none, as in Go.
 * @throws QuorumFenceError INVALID_OPTION
 */
export function parseDuration(value: string | undefined, flag: string, fallback: number): number {
  if (value === undefined) return fallback;
  const text = value.trim();
  if (text === '0') return 0;
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(text);
  if (!match) {
    const bare = /^\d+(?:\.\d+)?$/.test(text) ? `; a number needs its unit (${text}ms or ${text}s?)` : '';
    throw new QuorumFenceError(
      'INVALID_OPTION',
      `--${flag} expects a duration with a unit, like 500ms, 10s or 2m, got "${value}"${bare}`,
    );
  }
  return Math.round(Number(match[1]) * DURATION_UNITS[match[2]!]!);
}

/** Where the client verbs read --cluster and --identity from when the flag is absent (a flag always wins). */
export const CLUSTER_ENVIRONMENT_VARIABLE = 'QUORUMFENCE_CLUSTER';
export const IDENTITY_ENVIRONMENT_VARIABLE = 'QUORUMFENCE_IDENTITY';

/**
 * A string flag that falls back to an environment variable, as etcdctl's ETCDCTL_ENDPOINTS does. A flag given
 * always wins (parseFlags refuses one given empty); a variable set to "" counts as unset.
 * @throws QuorumFenceError INVALID_OPTION when both are absent
 */
export function requiredOrEnvironment(
  value: string | undefined,
  flag: string,
  variable: string,
  env: NodeJS.ProcessEnv = process.env,
): string {
  if (value !== undefined) return value;
  const fromEnvironment = env[variable];
  if (fromEnvironment !== undefined && fromEnvironment !== '') return fromEnvironment;
  throw new QuorumFenceError('INVALID_OPTION', `--${flag} is required (or set $${variable})`);
}

/** "host:port" → parts. @throws QuorumFenceError INVALID_OPTION */
export function parseListen(
  value: string | undefined,
  flag: string,
  fallback: { host: string; port: number },
): { host: string; port: number } {
  if (value === undefined) return fallback;
  const match = /^(.*):(\d+)$/.exec(value);
  const port = match ? Number(match[2]) : NaN;
  if (!match || !(port >= 0 && port <= 65535)) {
    throw new QuorumFenceError('INVALID_OPTION', `--${flag} expects host:port, got "${value}"`);
  }
  return { host: match[1]!.replace(/^\[(.*)\]$/, '$1') || '127.0.0.1', port };
}

/**
 * This process's command-line arguments after the script, as the bytes the shell passed (Linux:
 * /proc/self/cmdline; node's own options come before the script, so the last ones are the script's). Undefined
 * where they cannot be read (null).
 */
export function rawArguments(): Buffer[] | null {
  let cmdline: Buffer;
  try {
    cmdline = readFileSync('/proc/self/cmdline');
  } catch {
    return null;
  }
  const words: Buffer[] = [];
  for (let start = 0; start < cmdline.length;) {
    const end = cmdline.indexOf(0, start);
    words.push(cmdline.subarray(start, end === -1 ? cmdline.length : end));
    start = end === -1 ? cmdline.length : end + 1;
  }
  const count = process.argv.length - 2;
  return count >= 0 && count <= words.length ? words.slice(words.length - count) : null;
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

function isUtf8(bytes: Uint8Array): boolean {
  try {
    strictUtf8.decode(bytes);
    return true;
  } catch {
    return false;
  }
}

/**
 * A resource name as the command line gives it (RESOURCE, --watch), checked before anything connects: the name
 * contract (src/common/check.ts), and bytes that were well-formed UTF-8. Node decodes arguments as UTF-8 and
 * turns each invalid byte into U+FFFD, so `acquire $'orders/\xff'` would lock "orders/\uFFFD", a name the user
 * never typed, which two different byte strings map to. A U+FFFD is accepted only when the bytes behind it are
 * its own UTF-8 encoding (EF BF BD); where they cannot be read (no /proc), it is refused, since it cannot be told
 * apart.
 * @param commandLine the arguments' bytes (rawArguments()), null where they cannot be read
 * @throws QuorumFenceError RESOURCE_NOT_UTF8, and expectResource's codes (RESOURCE_EMPTY, RESOURCE_TOO_LONG,
 *   NAME_CONTROL_CHARACTER)
 */
export function resourceArgument(
  value: string,
  what = 'RESOURCE',
  commandLine: readonly Uint8Array[] | null = rawArguments(),
): string {
  if (value.includes('\uFFFD')) {
    const decoder = new TextDecoder();
    const candidates = (commandLine ?? []).filter((word) => decoder.decode(word) === value);
    if (!candidates.some(isUtf8))
      throw new QuorumFenceError(
        'RESOURCE_NOT_UTF8',
        `${what} ${JSON.stringify(value)} ${
          commandLine === null
            ? 'holds U+FFFD, which is also what an invalid UTF-8 byte on the command line becomes, and this system cannot tell which'
            : 'was not well-formed UTF-8 on the command line (U+FFFD marks the bytes that were not)'
        }; resource names are UTF-8: give the name in UTF-8`,
      );
  }
  expectResource(value, what);
  return value;
}
