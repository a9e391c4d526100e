/**
 * `DIR/replica.lock`: the pid of the one process that has a signing record
 * open for writing. Two processes signing from one store would each serialise
 * only their own requests, and could both sign one (resource, epoch).
 */
import { LOCK_FILES, takeDirectoryLock } from '../command/directory-lock.js';

/**
 * Takes `DIR/replica.lock`; returns the function that gives it back. A lock left by a dead process (SIGKILL) is
 * taken over, and so is one naming this process's pid that this process does not hold (directory-lock.ts).
 * @throws QuorumFenceError STORE_LOCKED, IO_ERROR
 */
export function takeLock(dir: string): () => void {
  return takeDirectoryLock(dir, LOCK_FILES.replica, 'replica');
}
