/**
 * `quorumfence lock RESOURCE -- CMD ARGS...`: runs CMD while holding a lease on RESOURCE, as `etcdctl lock`
 * does, and past it: CMD gets the admission token, so its writes through a guard are fenced. The lease renews
 * while CMD runs; if it is lost anyway, CMD's process group gets SIGTERM, then SIGKILL after --kill-after; when
 * CMD exits the lease is released and lock exits with CMD's code.
 */
import { spawn } from 'node:child_process';
import { accessSync, constants as fileConstants, statSync } from 'node:fs';
import type { Socket } from 'node:net';
import { constants } from 'node:os';
import { delimiter, join } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import type { Lease } from '../client/lease.js';
import { parseDuration, parseFlags, resourceArgument, type Command } from '../command/args.js';
import { DEFAULT_TTL_MS } from './acquire.js';
import { CLIENT_FLAGS, CLUSTER_FLAG_USAGE, IDENTITY_FLAG_USAGE, openClient, refusalLine } from './client-flags.js';

/** What CMD finds in its environment. */
export const LOCK_ENVIRONMENT = {
  token: 'QUORUMFENCE_TOKEN',
  epoch: 'QUORUMFENCE_EPOCH',
  resource: 'QUORUMFENCE_RESOURCE',
} as const;

/**
 * lock's own exit codes, chosen where timeout(1) and POSIX shells put theirs so that they are not mistaken for
 * CMD's usual ones (every other code is CMD's own, or 128 + the signal that ended it).
 */
export const LOCK_EXIT_CODES = {
  /** The lease was lost while CMD ran, and CMD was stopped (timeout(1)'s "timed out"). */
  lost: 124,
  /** lock itself failed before CMD ran: bad flags, unreadable files, or no lease (busy, unavailable, ...). */
  failed: 125,
  /** CMD was found but could not be executed. */
  cannotExecute: 126,
  /** CMD was not found. */
  notFound: 127,
} as const;

/**
 * How long CMD has between SIGTERM and SIGKILL once the lease is lost: time to finish a write and exit
 * cleanly, and short, since nothing it does unfenced after the lease ended is protected.
 */
export const DEFAULT_KILL_AFTER_MS = 10_000;

const usage = `usage: quorumfence lock RESOURCE [--cluster FILE] [--identity FILE] [--ttl 10s] [--wait 0] [--kill-after 10s] [--resume] -- CMD [ARGS...]

Acquires a lease on RESOURCE, then runs CMD with ARGS holding it. CMD finds in
its environment ${LOCK_ENVIRONMENT.token} (the admission token: send it to a
guard with every write), ${LOCK_ENVIRONMENT.epoch} and ${LOCK_ENVIRONMENT.resource}. Its stdin,
stdout and stderr are this command's. The lease is renewed while CMD runs and
released when CMD exits.

If the lease is lost anyway (the replicas unreachable past the ttl, or taken
over), CMD's process group gets SIGTERM, then SIGKILL after --kill-after.
CMD runs in a process group of its own, so the signals reach every process it
started; SIGINT, SIGTERM and SIGHUP sent to this command are passed on to it.
If this command itself dies (SIGKILL, the OOM killer), CMD's process group
gets the same SIGTERM, then SIGKILL: a watcher in the group sees this
command's end of a pipe close, so CMD never runs on with the token unwatched.

Exit codes: CMD's own, or 128 + the signal number when a signal ended it;
  ${LOCK_EXIT_CODES.lost}  the lease was lost while CMD ran (CMD was stopped)
  ${LOCK_EXIT_CODES.failed}  no lease (busy, unavailable, timeout, forbidden, invalid), bad flags or files
  ${LOCK_EXIT_CODES.cannotExecute}  CMD could not be executed
  ${LOCK_EXIT_CODES.notFound}  CMD was not found

options:
${CLUSTER_FLAG_USAGE}
${IDENTITY_FLAG_USAGE}
  --ttl DURATION    lease length (renewed while CMD runs)                (default ${DEFAULT_TTL_MS / 1000}s)
  --wait DURATION   how long to wait while another holder has it         (default 0)
  --kill-after DURATION  from SIGTERM to SIGKILL once the lease is lost  (default ${DEFAULT_KILL_AFTER_MS / 1000}s)
  --resume          end this identity's lease held by another session first (crash recovery;
                    docs/protocol.md, "Sessions")
`;

/** How CMD ended. */
export type CommandOutcome =
  | {
      readonly kind: 'exited';
      readonly code: number | null;
      readonly signal: NodeJS.Signals | null;
      readonly lost: boolean;
    }
  | { readonly kind: 'not_started'; readonly errorCode: string | undefined; readonly message: string }
  | { readonly kind: 'lost_before_start' };

/** lock's exit code for how CMD ended. */
export function lockExitCode(outcome: CommandOutcome): number {
  switch (outcome.kind) {
    case 'lost_before_start':
      return LOCK_EXIT_CODES.lost;
    case 'not_started':
      return outcome.errorCode === 'ENOENT' ? LOCK_EXIT_CODES.notFound : LOCK_EXIT_CODES.cannotExecute;
    case 'exited':
      if (outcome.lost) return LOCK_EXIT_CODES.lost;
      if (outcome.code !== null) return outcome.code;
      return 128 + (outcome.signal ? (constants.signals[outcome.signal] ?? 0) : 0);
  }
}

/** Splits `RESOURCE [flags] -- CMD ARGS...` at the first "--". @throws QuorumFenceError INVALID_OPTION without a CMD */
export function splitCommandLine(argv: readonly string[]): { own: string[]; file: string; args: string[] } {
  const split = argv.indexOf('--');
  const [file, ...args] = split === -1 ? [] : argv.slice(split + 1);
  if (file === undefined || file === '')
    throw new QuorumFenceError(
      'INVALID_OPTION',
      'a command is needed after "--": quorumfence lock RESOURCE -- CMD ARGS...',
    );
  return { own: argv.slice(0, split), file, args };
}

/**
 * What /bin/sh runs for CMD: a watcher in the background, then `exec CMD`, so CMD keeps the shell's pid (the
 * process group's leader), its stdin and its exit status. The watcher is in CMD's process group, ignores the
 * signals lock passes on, and reads fd 3, a socket from lock: "done" once CMD has exited, and end of file
 * without it when lock died (SIGKILL, the OOM killer). Then it sends the group SIGTERM and, $1 seconds later,
 * SIGKILL (which ends the watcher too). Lock outliving CMD tells it "done", so what CMD left running is not
 * touched then (as before). Positional parameters: $1 the seconds from SIGTERM to SIGKILL, then CMD and ARGS.
 */
const GROUP_WATCHER = `{
  trap '' INT TERM HUP
  if IFS= read -r word <&3 && [ "$word" = done ]; then exit 0; fi
  kill -TERM 0 2>/dev/null
  sleep "$1"
  kill -KILL 0
} &
exec 3<&-
shift
exec "$@"`;

/**
 * Where `file` would be run from, as execvp looks for it: itself when it holds a slash, else the first
 * executable regular file of that name on PATH. Checked before spawning, so that lock says "not found" or "not
 * executable" itself rather than through the shell's own words (127 and 126, the same codes either way).
 */
export function findCommand(
  file: string,
  path: string | undefined,
): { ok: true } | { ok: false; errorCode: 'ENOENT' | 'EACCES' } {
  const candidates = file.includes('/')
    ? [file]
    : (path ?? '').split(delimiter).map((directory) => join(directory || '.', file));
  let exists = false;
  for (const candidate of candidates) {
    let isFile: boolean;
    try {
      isFile = statSync(candidate).isFile();
    } catch {
      continue; // Not there: the next directory may have it.
    }
    exists = true;
    try {
      if (isFile) {
        accessSync(candidate, fileConstants.X_OK);
        return { ok: true };
      }
    } catch {
      // There, but not executable by us.
    }
  }
  return { ok: false, errorCode: exists ? 'EACCES' : 'ENOENT' };
}

type SignalHandler = (signal: NodeJS.Signals) => void;
const FORWARDED_SIGNALS: readonly NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];

/** Runs CMD holding `lease`; stops its process group if the lease is lost. Resolves when CMD has exited. */
function runHolding(
  lease: Lease,
  file: string,
  args: string[],
  killAfterMs: number,
  setSignalHandler: (handler: SignalHandler) => void,
): Promise<CommandOutcome> {
  if (!lease.active) return Promise.resolve({ kind: 'lost_before_start' });
  const found = findCommand(file, process.env.PATH);
  if (!found.ok)
    return Promise.resolve({
      kind: 'not_started',
      errorCode: found.errorCode,
      message: found.errorCode === 'ENOENT' ? 'command not found' : 'not an executable file',
    });
  return new Promise((resolve) => {
    const child = spawn(
      '/bin/sh',
      ['-c', GROUP_WATCHER, 'quorumfence-lock', String(killAfterMs / 1000), file, ...args],
      {
        stdio: ['inherit', 'inherit', 'inherit', 'pipe'],
        detached: true,
        env: {
          ...process.env,
          [LOCK_ENVIRONMENT.token]: lease.tokenText,
          [LOCK_ENVIRONMENT.epoch]: lease.epoch.toString(),
          [LOCK_ENVIRONMENT.resource]: lease.resource,
        },
      },
    );
    // The watcher's end: "done" when CMD has exited; closed without it (this process died), the group is stopped.
    const watcher = child.stdio[3] as Socket;
    watcher.on('error', () => undefined); // The group may be gone already (a lost lease ends the watcher too).
    const dismissWatcher = () => {
      watcher.end('done\n');
    };
    let lost = false;
    let killTimer: NodeJS.Timeout | undefined;
    const signalGroup = (signal: NodeJS.Signals) => {
      if (child.pid === undefined) return;
      try {
        process.kill(-child.pid, signal);
      } catch {
        // The group is gone already.
      }
    };
    const onLost = () => {
      lost = true;
      process.stderr.write(
        `quorumfence lock: lost the lease on "${lease.resource}" at epoch ${lease.epoch}: ${lease.ended?.reason} (${lease.ended?.message}); stopping the command (SIGTERM, SIGKILL after ${killAfterMs} ms) (LEASE_LOST)\n`,
      );
      signalGroup('SIGTERM');
      killTimer = setTimeout(() => signalGroup('SIGKILL'), killAfterMs);
    };
    lease.once('lost', onLost);
    setSignalHandler(signalGroup);
    let settled = false;
    const settle = (outcome: CommandOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(killTimer);
      lease.off('lost', onLost);
      resolve(outcome);
    };
    child.once('error', (error: NodeJS.ErrnoException) => {
      if (child.pid !== undefined) return; // An error after the start (a failed kill): the exit still comes.
      settle({ kind: 'not_started', errorCode: error.code, message: error.message });
    });
    child.once('exit', (code, signal) => {
      // What CMD left running in its group has no lease either.
      if (lost) signalGroup('SIGKILL');
      else dismissWatcher();
      settle({ kind: 'exited', code, signal, lost });
    });
  });
}

export const command: Command = {
  summary: 'run a command while holding a lease; the token is in its environment',
  usage,
  failureExitCode: LOCK_EXIT_CODES.failed,
  async run(argv) {
    const { own, file, args } = splitCommandLine(argv);
    const { values, positionals } = parseFlags(
      own,
      {
        ...CLIENT_FLAGS,
        ttl: { type: 'string' },
        wait: { type: 'string' },
        'kill-after': { type: 'string' },
        resume: { type: 'boolean' },
      },
      { min: 1, max: 1 },
    );
    const resource = resourceArgument(positionals[0]!);
    const ttlMs = parseDuration(values.ttl, 'ttl', DEFAULT_TTL_MS);
    const waitMs = parseDuration(values.wait, 'wait', 0);
    const killAfterMs = parseDuration(values['kill-after'], 'kill-after', DEFAULT_KILL_AFTER_MS);
    const client = await openClient(values);
    // Before CMD runs, a signal abandons the acquire; while it runs, the signal is passed on to CMD.
    const interrupted = new AbortController();
    let handler: SignalHandler = () => interrupted.abort();
    const onSignal: SignalHandler = (signal) => handler(signal);
    for (const signal of FORWARDED_SIGNALS) process.on(signal, onSignal);
    try {
      const result = await client.acquire(resource, {
        ttlMs,
        waitMs,
        signal: interrupted.signal,
        resume: values.resume === true,
      });
      if (!result.ok) {
        process.stderr.write(await refusalLine('lock', result, client, resource));
        return LOCK_EXIT_CODES.failed;
      }
      const lease = result.lease;
      for (const fault of result.faults)
        process.stderr.write(`warning: replica ${fault.replica} misbehaved (${fault.kind}): ${fault.message}\n`);
      const outcome = await runHolding(lease, file, args, killAfterMs, (forward) => (handler = forward));
      if (outcome.kind === 'lost_before_start')
        process.stderr.write(
          `quorumfence lock: the lease on "${resource}" ended before the command started (LEASE_LOST)\n`,
        );
      if (outcome.kind === 'not_started') {
        process.stderr.write(`quorumfence lock: cannot run ${JSON.stringify(file)}: ${outcome.message} (IO_ERROR)\n`);
      }
      if (lease.active) {
        // Waits for the replicas' answers: the line it prints says whether t confirmed.
        const released = await lease.release({ wait: true });
        if (!released.ok)
          process.stderr.write(
            `warning: release of "${resource}" not confirmed (${released.reason}): ${released.message}; the lease ends by itself after the ttl\n`,
          );
      }
      return lockExitCode(outcome);
    } finally {
      for (const signal of FORWARDED_SIGNALS) process.off(signal, onSignal);
      await client.close();
    }
  },
};
