/**
 * Opening a signing record's data directory, before there is a SigningRecord: refuse a missing store unless told
 * to create it (then create the directory), take its pid lock, probe the store in a child process, open LMDB and
 * its two tables, and check or initialise the store's identity, so that a store of another cluster or replica, a
 * reset or missing LMDB file, a store nobody said to create, or a store in use by a live process is refused with
 * its code. The record's operations are in signing-record.ts.
 *
 * The data directory holds, besides LMDB's files, `signing-record.json` (the
 * cluster id and replica index, written at creation) and `replica.lock` (the
 * pid of the process that has the store open for writing).
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import { QuorumFenceError } from '../common/errors.js';
import { bytesEqual, toHex } from '../common/bytes.js';
import { writeFileDurably } from '../common/files.js';
import type { SigningRecordOptions } from './signing-record.js';
import { storeCorrupt as corrupt, storeMissing } from './store-errors.js';
import { identityText, parseIdentity, type StoreIdentity } from './store-identity.js';
import { takeLock } from './store-lock.js';
import { probeStore } from './store-probe.js';

const IDENTITY_FILE = 'signing-record.json';
const IDENTITY_KEY = 'identity';

/** An opened store: its checked identity, LMDB's environment and tables, and how to release its lock. */
export interface OpenedStore {
  readonly identity: StoreIdentity;
  readonly env: RootDatabase;
  readonly records: Database<Buffer, Buffer>;
  readonly meta: Database<string, string>;
  /** Undefined for a read-only open (it takes no lock). */
  readonly releaseLock: (() => void) | undefined;
}

/**
 * Opens (creating when empty and writable) the store in `dir`, checking its identity against `expected`; on
 * any failure nothing stays open or locked.
 * @throws QuorumFenceError as SigningRecord.open
 */
export function openStore(
  dir: string,
  expected: StoreIdentity | undefined,
  options: Pick<SigningRecordOptions, 'readOnly' | 'probe' | 'create'>,
): OpenedStore {
  const readOnly = options.readOnly ?? false;
  const create = !readOnly && (options.create ?? false);
  prepareDirectory(dir, expected, readOnly, create);
  const releaseLock = readOnly ? undefined : takeLock(dir);
  let env: RootDatabase | undefined;
  try {
    const fileIdentityPath = join(dir, IDENTITY_FILE);
    const fileIdentity = readFileIdentity(dir, fileIdentityPath);
    if ((options.probe ?? true) && existsSync(join(dir, 'data.mdb'))) probeStore(dir);
    const tables = openTables(dir, readOnly);
    env = tables.env;
    const identity = storeIdentityOf(dir, tables, fileIdentity, create ? expected : undefined);
    checkExpected(dir, identity, expected);
    if (!readOnly && !fileIdentity) writeFileDurably(fileIdentityPath, identityText(identity) + '\n', { mode: 0o600 });
    return { identity, ...tables, releaseLock };
  } catch (error) {
    void env?.close().catch(() => undefined);
    releaseLock?.();
    throw error;
  }
}

/** Whether `dir` holds a signing record, or the remains of one (its identity file says one was made). */
export function signingRecordExists(dir: string): boolean {
  return existsSync(join(dir, 'data.mdb')) || existsSync(join(dir, IDENTITY_FILE));
}

/** Refuses what cannot be opened as asked, and creates the directory of a store to be created. */
function prepareDirectory(dir: string, expected: StoreIdentity | undefined, readOnly: boolean, create: boolean): void {
  if (!readOnly && !expected)
    throw new QuorumFenceError('INVALID_ARGUMENT', 'a writable signing record needs its cluster id and replica index');
  if (readOnly && !existsSync(join(dir, 'data.mdb')))
    throw corrupt(dir, 'no signing record here (data.mdb is missing)');
  if (readOnly) return;
  if (!create && !signingRecordExists(dir)) throw storeMissing(dir);
  if (!create) return;
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (error) {
    throw new QuorumFenceError(
      'IO_ERROR',
      `cannot create data directory ${dir}: ${(error as Error).message}`,
      { dir },
      { cause: error },
    );
  }
}

/** The identity file, when there is one; a store it says was created must still have its data. */
function readFileIdentity(dir: string, path: string): StoreIdentity | undefined {
  const fileIdentity = existsSync(path) ? parseIdentity(readFileSync(path, 'utf8'), dir) : undefined;
  if (fileIdentity && !existsSync(join(dir, 'data.mdb'))) {
    throw corrupt(
      dir,
      `data.mdb is missing but ${IDENTITY_FILE} says a store was created here; refusing to start from empty watermarks`,
    );
  }
  return fileIdentity;
}

interface Tables {
  readonly env: RootDatabase;
  readonly records: Database<Buffer, Buffer>;
  readonly meta: Database<string, string>;
}

function openTables(dir: string, readOnly: boolean): Tables {
  let env: RootDatabase;
  try {
    // overlappingSync: false makes a commit's promise mean "flushed" (S3): the argument from lmdb-js's
    // source is at the top of signing-record.ts.
    env = open({ path: dir, overlappingSync: false, readOnly, maxDbs: 4 });
  } catch (error) {
    throw corrupt(dir, `LMDB cannot open it: ${(error as Error).message}`, error);
  }
  try {
    const records = env.openDB<Buffer, Buffer>('records', { encoding: 'binary', keyEncoding: 'binary' });
    const meta = env.openDB<string, string>('meta', { encoding: 'string' });
    return { env, records, meta };
  } catch (error) {
    void env.close().catch(() => undefined);
    throw corrupt(dir, `LMDB cannot open its tables: ${(error as Error).message}`, error);
  }
}

/**
 * The identity LMDB holds, checked against the file's; a new, empty store is given `initialise` (absent unless the
 * open was told to create the store: a read-only open never initialises).
 */
function storeIdentityOf(
  dir: string,
  { records, meta }: Tables,
  fileIdentity: StoreIdentity | undefined,
  initialise: StoreIdentity | undefined,
): StoreIdentity {
  let storedText: string | undefined;
  try {
    storedText = meta.get(IDENTITY_KEY);
  } catch (error) {
    throw corrupt(dir, `cannot read its identity: ${(error as Error).message}`, error);
  }
  if (storedText === undefined) {
    if (fileIdentity)
      throw corrupt(
        dir,
        `its LMDB data was reset (${IDENTITY_FILE} exists but the store has no identity); refusing to start from empty watermarks`,
      );
    let empty: boolean;
    try {
      empty = records.getKeysCount() === 0;
    } catch (error) {
      throw corrupt(dir, `cannot read it: ${(error as Error).message}`, error);
    }
    if (!empty) throw corrupt(dir, 'it holds records but no identity');
    // An empty LMDB file without an identity: a creation that stopped halfway, to be made again by what made it.
    if (!initialise) throw storeMissing(dir);
    // Identity in LMDB first, then the file: a crash in between leaves a store the next open completes.
    meta.putSync(IDENTITY_KEY, identityText(initialise));
    return initialise;
  }
  const identity = parseIdentity(storedText, dir);
  if (
    fileIdentity &&
    (!bytesEqual(fileIdentity.clusterId, identity.clusterId) || fileIdentity.replicaIndex !== identity.replicaIndex)
  ) {
    throw corrupt(dir, `${IDENTITY_FILE} and the LMDB identity disagree`);
  }
  return identity;
}

/** A store of another cluster or replica is refused. */
function checkExpected(dir: string, identity: StoreIdentity, expected: StoreIdentity | undefined): void {
  if (expected && !bytesEqual(identity.clusterId, expected.clusterId)) {
    throw new QuorumFenceError(
      'CLUSTER_MISMATCH',
      `data directory ${dir} holds the signing record of cluster ${toHex(identity.clusterId).slice(0, 16)}…, not of this cluster ${toHex(expected.clusterId).slice(0, 16)}…`,
      { dir },
    );
  }
  if (expected && identity.replicaIndex !== expected.replicaIndex) {
    throw new QuorumFenceError(
      'CLUSTER_MISMATCH',
      `data directory ${dir} holds the signing record of replica ${identity.replicaIndex}, not of replica ${expected.replicaIndex}`,
      { dir },
    );
  }
}
