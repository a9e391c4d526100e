/**
 * The child-process probe run before a signing record is opened (see below).
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { storeCorrupt } from './store-errors.js';

/**
 * LMDB trusts its pages: opening or reading a damaged data.mdb can crash the
 * whole process (a segfault, not an exception). So before this process opens
 * an existing store, a throwaway child process opens it read-only and reads
 * every page we will touch; if that child dies by a signal, the store is
 * reported corrupt with a clear error instead of taking the replica down.
 */
const PROBE_SCRIPT = `
const { open } = require(process.argv[1]);
const env = open({ path: process.argv[2], readOnly: true, maxDbs: 4 });
for (const name of ['records', 'meta']) {
  const db = env.openDB(name, { encoding: 'binary', keyEncoding: 'binary' });
  if (db) for (const entry of db.getRange({})) void entry;
}
`;
/** Reading every record of even a large store takes seconds at most; a minute means something is wrong. */
const PROBE_TIMEOUT_MS = 60_000;

function probeArgs(dir: string): string[] {
  return ['-e', PROBE_SCRIPT, createRequire(import.meta.url).resolve('lmdb'), dir];
}

function probeVerdict(dir: string, signal: NodeJS.Signals | null, error: Error | undefined): void {
  if (error) throw storeCorrupt(dir, `cannot check it: ${error.message}`, error);
  // A JS-level error (a missing table, say) is left to the real open, which reports it precisely.
  if (signal)
    throw storeCorrupt(dir, `LMDB crashed (${signal}) reading data.mdb: the file is damaged or not an LMDB file`);
}

export function probeStore(dir: string): void {
  const probe = spawnSync(process.execPath, probeArgs(dir), { stdio: 'ignore', timeout: PROBE_TIMEOUT_MS });
  probeVerdict(dir, probe.signal, probe.error);
}

/**
 * The same check as the `probe` option of SigningRecord.open, in the
 * background, so a starting replica can overlap it with loading its key;
 * then open with `probe: false`. Resolves at once when there is no store yet.
 * @throws QuorumFenceError STORE_CORRUPT
 */
export function probeSigningRecord(dir: string): Promise<void> {
  if (!existsSync(join(dir, 'data.mdb'))) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, probeArgs(dir), { stdio: 'ignore', timeout: PROBE_TIMEOUT_MS });
    let failure: Error | undefined;
    child.once('error', (error) => (failure = error));
    child.once('close', (_code, signal) => {
      try {
        probeVerdict(dir, signal, failure);
        resolve();
      } catch (error) {
        reject(error);
      }
    });
  });
}
