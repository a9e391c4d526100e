/**
 * The one writer of files (src/common/files.ts): atomic (a temporary file beside the target, flushed, renamed
 * or linked into place, never a half-written target and no temporary file left), and never through a
 * symbolic link or onto anything that is not a regular file: such a target is refused with
 * NOT_A_REGULAR_FILE and the file it points to is unchanged.
 */
import {
  closeSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { refuseIrregularFile, writeFileDurably } from '../../src/common/files.js';
import { codeOf } from '../support/error-code.js';

let dir: string;
const key = '{"secretShare":"do not overwrite me"}\n';
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'qf-files-'));
  writeFileSync(join(dir, 'replica.key'), key, { mode: 0o600 });
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** Every name in the directory: no temporary file may be left behind. */
const names = () => readdirSync(dir).sort();

describe('writeFileDurably', () => {
  it('writes a new file with the mode asked for, and leaves no temporary file', () => {
    writeFileDurably(join(dir, 'out.json'), 'new\n', { mode: 0o600 });
    expect(readFileSync(join(dir, 'out.json'), 'utf8')).toBe('new\n');
    expect(statSync(join(dir, 'out.json')).mode & 0o777).toBe(0o600);
    expect(names()).toEqual(['out.json', 'replica.key']);
  });

  it('replaces a regular file by renaming a new one over it: a reader of the old file still reads it whole', () => {
    const path = join(dir, 'out.json');
    writeFileSync(path, 'old contents\n');
    const reader = openSync(path, 'r');
    try {
      writeFileDurably(path, 'new\n');
      const buffer = Buffer.alloc(64);
      const read = readSync(reader, buffer, 0, 64, 0);
      // Truncating in place would have left the old file's reader with the new bytes (or none).
      expect(buffer.subarray(0, read).toString()).toBe('old contents\n');
    } finally {
      closeSync(reader);
    }
    expect(readFileSync(path, 'utf8')).toBe('new\n');
    expect(names()).toEqual(['out.json', 'replica.key']);
  });

  it('refuses a symbolic link in place of the target (to a key file, or dangling), and the key is unchanged', () => {
    for (const exclusive of [false, true]) {
      const link = join(dir, `card-${exclusive}.json`);
      symlinkSync(join(dir, 'replica.key'), link);
      expect(codeOf(() => writeFileDurably(link, 'card\n', { exclusive }))).toBe('NOT_A_REGULAR_FILE');
      expect(readFileSync(join(dir, 'replica.key'), 'utf8')).toBe(key);
      expect(lstatSync(link).isSymbolicLink()).toBe(true);
    }
    const dangling = join(dir, 'dangling.json');
    symlinkSync(join(dir, 'nowhere'), dangling);
    expect(codeOf(() => writeFileDurably(dangling, 'x'))).toBe('NOT_A_REGULAR_FILE');
    expect(names()).toEqual(['card-false.json', 'card-true.json', 'dangling.json', 'replica.key']);
  });

  it('refuses a directory in place of the target; an exclusive write refuses an existing file (FILE_EXISTS); a missing directory is IO_ERROR', () => {
    mkdirSync(join(dir, 'sub'));
    expect(codeOf(() => writeFileDurably(join(dir, 'sub'), 'x'))).toBe('NOT_A_REGULAR_FILE');
    expect(codeOf(() => writeFileDurably(join(dir, 'replica.key'), 'x', { exclusive: true }))).toBe('FILE_EXISTS');
    expect(readFileSync(join(dir, 'replica.key'), 'utf8')).toBe(key);
    expect(codeOf(() => writeFileDurably(join(dir, 'missing', 'out.json'), 'x'))).toBe('IO_ERROR');
    expect(names()).toEqual(['replica.key', 'sub']);
  });

  it('refuseIrregularFile: a missing path or a regular file passes; a link or a device does not', () => {
    expect(codeOf(() => refuseIrregularFile(join(dir, 'absent')))).toBeUndefined();
    expect(codeOf(() => refuseIrregularFile(join(dir, 'replica.key')))).toBeUndefined();
    symlinkSync(join(dir, 'replica.key'), join(dir, 'link'));
    expect(codeOf(() => refuseIrregularFile(join(dir, 'link'), 'erase'))).toBe('NOT_A_REGULAR_FILE');
    expect(codeOf(() => refuseIrregularFile('/dev/null'))).toBe('NOT_A_REGULAR_FILE');
  });
});
