/**
 * Files: reading the project's JSON files with one-line errors, and writing
 * files that must survive a crash and cannot be turned against another file.
 *
 * Every file the project writes goes through writeFileDurably: the bytes go
 * to a temporary file beside the target (created exclusively, so nothing is
 * followed), which is flushed and then renamed over the target (or, for an
 * exclusive write, linked into place, which fails if anything is there), and
 * the directory is flushed so the new name is durable too. A crash leaves the
 * old file or the whole new one, never a part of it. A target that exists and
 * is not a regular file (a symbolic link, a directory, a device) is refused
 * before anything is written: a link named as `--out` could otherwise make a
 * documented step overwrite the file it points to (a replica's key, say).
 * Only the last component of the path is checked, as O_NOFOLLOW does.
 */
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  fsyncSync,
  linkSync,
  lstatSync,
  openSync,
  readFileSync,
  renameSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { QuorumFenceError, type ErrorCode } from './errors.js';

/**
 * Refuses a path that exists and is not a regular file; a missing path is fine.
 * @throws QuorumFenceError NOT_A_REGULAR_FILE, IO_ERROR (the path cannot be examined)
 */
export function refuseIrregularFile(path: string, action = 'write'): void {
  let stats;
  try {
    stats = lstatSync(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw new QuorumFenceError('IO_ERROR', `cannot examine ${path}: ${(error as Error).message}`, { path });
  }
  if (stats.isFile()) return;
  const kind = stats.isSymbolicLink() ? 'a symbolic link' : stats.isDirectory() ? 'a directory' : 'not a regular file';
  throw new QuorumFenceError(
    'NOT_A_REGULAR_FILE',
    `${path} is ${kind}; refusing to ${action} it (name a regular file or a new path)`,
    { path },
  );
}

function ioError(path: string, error: unknown): QuorumFenceError {
  return new QuorumFenceError(
    'IO_ERROR',
    `cannot write ${path}: ${(error as Error).message}`,
    { path },
    { cause: error },
  );
}

/**
 * Writes `data` to `path` atomically and durably (see the module comment).
 * @param exclusive refuse to replace an existing file (FILE_EXISTS)
 * @throws QuorumFenceError NOT_A_REGULAR_FILE, FILE_EXISTS, IO_ERROR
 */
export function writeFileDurably(
  path: string,
  data: string | Uint8Array,
  options: { mode?: number; exclusive?: boolean } = {},
): void {
  refuseIrregularFile(path);
  // Beside the target, so the rename stays in one file system; hidden, and unique per process and call.
  const temporary = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`);
  let fd: number;
  try {
    fd = openSync(temporary, 'wx', options.mode ?? 0o644);
  } catch (error) {
    throw ioError(path, error);
  }
  let placed = false;
  try {
    try {
      const bytes = typeof data === 'string' ? Buffer.from(data) : data;
      let written = 0;
      while (written < bytes.length) written += writeSync(fd, bytes, written);
      fsyncSync(fd);
    } catch (error) {
      throw ioError(path, error);
    } finally {
      closeSync(fd);
    }
    try {
      // A rename replaces a link itself, never what it points to; a link fails if anything is there.
      if (options.exclusive) linkSync(temporary, path);
      else renameSync(temporary, path);
      placed = true;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'EEXIST')
        throw new QuorumFenceError('FILE_EXISTS', `${path} already exists; refusing to overwrite it`, { path });
      throw ioError(path, error);
    }
  } finally {
    if (options.exclusive || !placed) unlinkSync(temporary);
  }
  syncDirectory(dirname(path));
}

/** fsync a directory so that entries created in it are durable. */
export function syncDirectory(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Reads and parses a JSON file; `what` names it in errors ("cluster description").
 * @param hint appended to the message when the file does not exist (what to do about it)
 * @throws QuorumFenceError IO_ERROR when unreadable, `invalidCode` when not JSON
 */
export function readJsonFile(path: string, what: string, invalidCode: ErrorCode, hint?: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    const missing = (error as NodeJS.ErrnoException).code === 'ENOENT';
    throw new QuorumFenceError(
      'IO_ERROR',
      missing && hint
        ? `${what} ${path} does not exist; ${hint}`
        : `cannot read ${what} ${path}: ${(error as Error).message}`,
      { path },
      { cause: error },
    );
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new QuorumFenceError(invalidCode, `${what} ${path} is not valid JSON: ${(error as Error).message}`, { path });
  }
}
