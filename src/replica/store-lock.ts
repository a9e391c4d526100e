/**
 * `DIR/replica.lock`: the pid of the one process that has a signing record
 * open for writing. Two processes signing from one store would each serialise
 * only their own requests, and could both sign one (resource, epoch).
 */
import { closeSync, openSync, readFileSync, realpathSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';

const LOCK_FILE = 'replica.lock';

/**
 * The locks this process holds, by the data directory's real path. A lock naming this process's pid that is not in here was left by an
 * earlier process that had the same pid: in a container the replica is pid 1 every time it starts, so
 * after a SIGKILL (`docker kill`, the OOM killer) the lock names the restarted replica's own pid.
 */
const held = new Set<string>();

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Takes `DIR/replica.lock`; returns the function that gives it back.
 * A lock left by a dead process (SIGKILL) is taken over, and so is one naming this process's pid that
 * this process does not hold (an earlier process with the same pid).
 * @throws QuorumFenceError STORE_LOCKED, IO_ERROR
 */
export function takeLock(dir: string): () => void {
  const path = join(dir, LOCK_FILE);
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const fd = openSync(path, 'wx', 0o600);
      try {
        writeSync(fd, `${process.pid}\n`);
      } finally {
        closeSync(fd);
      }
      const key = realpathSync(dir);
      held.add(key);
      return () => {
        held.delete(key);
        try {
          if (readFileSync(path, 'utf8').trim() === String(process.pid)) unlinkSync(path);
        } catch {
          // Already gone: nothing to release.
        }
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') {
        throw new QuorumFenceError(
          'IO_ERROR',
          `cannot create ${path}: ${(error as Error).message}`,
          { path },
          { cause: error },
        );
      }
    }
    let owner: number;
    try {
      owner = Number(readFileSync(path, 'utf8').trim());
    } catch {
      continue; // Removed between our open and read: try again.
    }
    const earlierSelf = owner === process.pid && !held.has(realpathSync(dir));
    if (Number.isSafeInteger(owner) && owner > 0 && !earlierSelf && isAlive(owner)) {
      throw new QuorumFenceError(
        'STORE_LOCKED',
        `data directory ${dir} is in use by process ${owner}${owner === process.pid ? ' (this process)' : ''}; stop it first (or remove ${path} if no replica runs)`,
        { dir, pid: owner },
      );
    }
    try {
      unlinkSync(path); // Stale: its process is gone.
    } catch {
      // Someone else took it over first; the next attempt sees their lock.
    }
  }
  throw new QuorumFenceError('STORE_LOCKED', `could not take the lock ${path}`, { dir });
}
