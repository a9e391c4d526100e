/**
 * Flag parsing shared by every verb: node's parseArgs in strict mode (unknown
 * flags are refused), with errors turned into one line that says what to do.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { QuorumFenceError } from '../common/errors.js';

export type OptionSpec = NonNullable<ParseArgsConfig['options']>;

export interface Command {
  /** One line for the verb list. */
  readonly summary: string;
  /** Full --help text. */
  readonly usage: string;
  /** Runs the verb; resolves to the process exit code. */
  run(argv: string[]): Promise<number>;
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
  const { min = 0, max = 0 } = positionals;
  if (parsed.positionals.length < min)
    throw new QuorumFenceError('INVALID_OPTION', `expected ${min} argument(s), got ${parsed.positionals.length}`);
  if (parsed.positionals.length > max) {
    throw new QuorumFenceError('INVALID_OPTION', `unexpected argument "${parsed.positionals[max]}"`);
  }
  return { values: parsed.values, positionals: parsed.positionals };
}

/** Requires a string flag. @throws QuorumFenceError INVALID_OPTION */
export function required(value: string | undefined, flag: string): string {
  if (value === undefined || value === '') throw new QuorumFenceError('INVALID_OPTION', `--${flag} is required`);
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
 * Parses "250ms", "10s", "2m", "1h" (or a bare number of milliseconds) into milliseconds.
 * @throws QuorumFenceError INVALID_OPTION
 */
export function parseDuration(value: string | undefined, flag: string, fallback: number): number {
  if (value === undefined) return fallback;
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(value.trim());
  if (!match)
    throw new QuorumFenceError('INVALID_OPTION', `--${flag} expects a duration like 500ms, 10s or 2m, got "${value}"`);
  return Math.round(Number(match[1]) * DURATION_UNITS[match[2] ?? 'ms']!);
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
