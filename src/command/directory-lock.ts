/**
 * A data directory's lock file: `DIR/<name>.lock` holds the pid of the one process using the directory, as
 * the replica's `DIR/replica.lock` does (src/replica/store-lock.ts, the same rule and format). The commands
 * that keep data of their own (`quorumfence resource`, the demo) take one, so a second process on the same
 * directory is refused with STORE_LOCKED instead of sharing or deleting files under a running one. A lock
 * left by a process that is gone (SIGKILL) is taken over, and so is one naming this process's pid that this
 * process does not hold: an earlier process had the same pid (in a container the process is pid 1 every time it
 * starts, so after a SIGKILL, `docker kill` or the OOM killer the lock names the restarted process's own pid).
 */
import { closeSync, openSync, readFileSync, realpathSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';

/** The lock files of the processes that keep a data directory: a replica's, the resource's, the demo's. */
export const LOCK_FILES = {
  replica: 'replica.lock',
  resource: 'resource.lock',
  demo: 'demo.lock',
} as const;

/** The locks this process holds: lock file path under the directory's real path. */
const held = new Set<string>();

function heldKey(dir: string, file: string): string {
  return join(realpathSync(dir), file);
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The live process that holds `DIR/<file>`, or undefined when none does (no file, or its process is gone). */
export function directoryLockHolder(dir: string, file: string): number | undefined {
  let owner: number;
  try {
    owner = Number(readFileSync(join(dir, file), 'utf8').trim());
  } catch {
    return undefined;
  }
  if (!Number.isSafeInteger(owner) || owner <= 0) return undefined;
  const earlierSelf = owner === process.pid && !held.has(heldKey(dir, file));
  return !earlierSelf && isAlive(owner) ? owner : undefined;
}

/**
 * Takes `DIR/<file>` for this process; returns the function that gives it back.
 * @param what who keeps the directory, for the message ("resource", "demo")
 * @throws QuorumFenceError STORE_LOCKED (a live process holds it), IO_ERROR
 */
export function takeDirectoryLock(dir: string, file: string, what: string): () => void {
  const path = join(dir, file);
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const fd = openSync(path, 'wx', 0o600);
      try {
        writeSync(fd, `${process.pid}\n`);
      } finally {
        closeSync(fd);
      }
      const key = heldKey(dir, file);
      held.add(key);
      return () => {
        held.delete(key);
        try {
          if (readFileSync(path, 'utf8').trim() === String(process.pid)) unlinkSync(path);
        } catch {
          // Already gone: nothing to give back.
        }
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST')
        throw new QuorumFenceError(
          'IO_ERROR',
          `cannot create ${path}: ${(error as Error).message}`,
          { path },
          { cause: error },
        );
    }
    const owner = directoryLockHolder(dir, file);
    if (owner !== undefined)
      throw new QuorumFenceError(
        'STORE_LOCKED',
        `data directory ${dir} is in use by process ${owner}${owner === process.pid ? ' (this process)' : ''}; stop it first (or remove ${path} if no ${what} runs)`,
        { dir, pid: owner },
      );
    try {
      unlinkSync(path); // Stale: its process is gone.
    } catch {
      // Someone else took it over first; the next attempt sees their lock.
    }
  }
  throw new QuorumFenceError('STORE_LOCKED', `could not take the lock ${path}`, { dir });
}
