/**
 * Writing files that must survive a crash: write, fsync the file, fsync the
 * directory (so the new name is durable too).
 */
import { closeSync, fsyncSync, openSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import { QuorumFenceError } from './errors.js';

/**
 * @param exclusive refuse to replace an existing file (FILE_EXISTS)
 * @throws QuorumFenceError FILE_EXISTS, IO_ERROR
 */
export function writeFileDurably(path: string, data: string | Uint8Array, options: { mode?: number; exclusive?: boolean } = {}): void {
  let fd: number;
  try {
    fd = openSync(path, options.exclusive ? 'wx' : 'w', options.mode ?? 0o644);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') throw new QuorumFenceError('FILE_EXISTS', `${path} already exists; refusing to overwrite it`, { path });
    throw new QuorumFenceError('IO_ERROR', `cannot write ${path}: ${(error as Error).message}`, { path }, { cause: error });
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
