/**
 * Files: reading the project's JSON files with one-line errors, and writing
 * files that must survive a crash (write, fsync the file, fsync the directory
 * so the new name is durable too).
 */
import { closeSync, fsyncSync, openSync, readFileSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import { QuorumFenceError, type ErrorCode } from './errors.js';

/**
 * @param exclusive refuse to replace an existing file (FILE_EXISTS)
 * @throws QuorumFenceError FILE_EXISTS, IO_ERROR
 */
export function writeFileDurably(
  path: string,
  data: string | Uint8Array,
  options: { mode?: number; exclusive?: boolean } = {},
): void {
  let fd: number;
  try {
    fd = openSync(path, options.exclusive ? 'wx' : 'w', options.mode ?? 0o644);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST')
      throw new QuorumFenceError('FILE_EXISTS', `${path} already exists; refusing to overwrite it`, { path });
    throw new QuorumFenceError(
      'IO_ERROR',
      `cannot write ${path}: ${(error as Error).message}`,
      { path },
      { cause: error },
    );
  }
  try {
    const bytes = typeof data === 'string' ? Buffer.from(data) : data;
    let written = 0;
    while (written < bytes.length) written += writeSync(fd, bytes, written);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
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
