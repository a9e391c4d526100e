/**
 * A replica's signing record over a simulated disk (disk.ts), for the replica's real service (RecordStore,
 * src/replica/record-store.ts). Decisions go through the replica's own critical sections (CheckAndRecord, with
 * its `mayReplace` refusal); a record is appended and the disk flushed before the decision resolves (S3), unless
 * a planted mutation acknowledges it first. Compaction and imports are durable at once, as LMDB's synchronous
 * transactions are. Opening replays the disk's log, so a restart sees exactly what survived the crash.
 */
import { QuorumFenceError } from '../common/errors.js';
import { CheckAndRecord, type RecordChange } from '../replica/check-and-record.js';
import { frozenError, type FrozenState } from '../replica/freeze-marker.js';
import type { SignedRecord } from '../replica/policy.js';
import type { RecordStore } from '../replica/record-store.js';
import { decodeStoredRecord, encodeRecord } from '../replica/record-codec.js';
import type { CompactionStep, CompactionTest, RecordEntry } from '../replica/signing-record.js';
import type { SimDisk } from './disk.js';

const PUT = 1;
const COMPACT = 2;
const IMPORT = 3;
const FREEZE = 4;

interface Stored {
  readonly record: SignedRecord;
  readonly grantedAtMs: number;
}

export interface SimStoreOptions {
  /** Wall-clock milliseconds stamped on records (the run's virtual wall clock). */
  readonly wallClock: () => number;
  /** A mutation: acknowledge a write before its flush completed. */
  readonly acknowledgeBeforeFlush?: boolean;
  /** Told when a flush begins (a fault may crash the machine right then). */
  readonly onFlushStart?: () => void;
}

export class SimRecordStore implements RecordStore {
  readonly openedWith: { readonly resources: number };
  readonly #disk: SimDisk;
  readonly #options: SimStoreOptions;
  readonly #records = new Map<string, Stored>();
  readonly #sections: CheckAndRecord;
  #floor = 0n;
  #frozen: FrozenState | undefined;
  #closed = false;
  /** A torn tail was dropped when this store was opened. */
  readonly recoveredTorn: boolean;

  /** Opens the store on `disk`, replaying what survived. @throws QuorumFenceError STORE_CORRUPT */
  constructor(disk: SimDisk, options: SimStoreOptions) {
    this.#disk = disk;
    this.#options = options;
    const recovered = disk.recover();
    this.recoveredTorn = recovered.torn;
    for (const entry of recovered.entries) this.#replay(entry);
    this.openedWith = { resources: this.#records.size };
    this.#sections = new CheckAndRecord({
      read: (resource) => this.get(resource),
      floor: () => this.#floor,
      refuseIfFrozen: () => {
        if (this.#frozen) throw frozenError(this.#frozen);
      },
      writeDurably: (resource, record) => this.#writeDurably(resource, record),
    });
  }

  get floor(): bigint {
    return this.#floor;
  }

  get size(): number {
    return this.#records.size;
  }

  get frozen(): FrozenState | undefined {
    return this.#frozen;
  }

  get(resource: string): SignedRecord | undefined {
    if (this.#closed) throw new QuorumFenceError('CLOSED', 'the signing record is closed');
    return this.#records.get(resource)?.record;
  }

  /** Every record (for a reshare's export). */
  entries(): RecordEntry[] {
    return [...this.#records].map(([resource, stored]) => ({ resource, record: stored.record }));
  }

  checkAndRecord<T>(resource: string, decide: (current: SignedRecord | undefined) => RecordChange<T>): Promise<T> {
    if (this.#closed) return Promise.reject(new QuorumFenceError('CLOSED', 'the signing record is closed'));
    return this.#sections.run(resource, decide);
  }

  async #writeDurably(resource: string, record: SignedRecord): Promise<void> {
    const grantedAtMs = this.#options.wallClock();
    this.#disk.append(encodeEntry(PUT, resource, encodeRecord(record, grantedAtMs)));
    const flushed = this.#disk.flush(this.#options.onFlushStart);
    // Visible once durable, as an LMDB commit with a synchronous flush is.
    if (!this.#options.acknowledgeBeforeFlush) await flushed;
    this.#records.set(resource, { record, grantedAtMs });
  }

  compactStep(from: Buffer | undefined, limit: number, test: CompactionTest): CompactionStep {
    if (this.#closed) throw new QuorumFenceError('CLOSED', 'the signing record is closed');
    const keys = [...this.#records.keys()]
      .map((resource) => Buffer.from(resource, 'utf8'))
      .sort(Buffer.compare)
      .filter((key) => !from || Buffer.compare(key, from) >= 0);
    let scanned = 0;
    let floor = this.#floor;
    const doomed: string[] = [];
    for (const key of keys.slice(0, limit)) {
      scanned++;
      const resource = key.toString('utf8');
      if (this.#sections.isBusy(resource)) continue;
      const stored = this.#records.get(resource)!;
      if (!test(resource, stored.record, stored.grantedAtMs)) continue;
      doomed.push(resource);
      if (stored.record.epoch > floor) floor = stored.record.epoch;
    }
    if (doomed.length > 0) {
      this.#disk.append(encodeCompaction(floor, doomed));
      this.#disk.syncNow();
      for (const resource of doomed) this.#records.delete(resource);
      this.#floor = floor;
    }
    return { compacted: doomed.length, scanned, next: keys[limit] };
  }

  /** A reshare's inherited records and floor, durable at once (the new member's import). */
  importInherited(entries: readonly RecordEntry[], floor: bigint): void {
    const grantedAtMs = this.#options.wallClock();
    this.#disk.append(encodeImport(floor, entries, grantedAtMs));
    this.#disk.syncNow();
    this.#replayImport(entries, floor, grantedAtMs);
  }

  freeze(reason: string): Promise<FrozenState> {
    if (this.#frozen) return Promise.resolve(this.#frozen);
    const state: FrozenState = { at: String(this.#options.wallClock()), reason };
    this.#frozen = state;
    return (async () => {
      while (!this.#sections.idle) await this.#sections.drain();
      this.#disk.append(Uint8Array.of(FREEZE, ...new TextEncoder().encode(reason)));
      await this.#disk.flush();
      return state;
    })();
  }

  async close(): Promise<void> {
    this.#closed = true;
  }

  #replay(entry: Uint8Array): void {
    const view = new DataView(entry.buffer, entry.byteOffset, entry.byteLength);
    switch (entry[0]) {
      case PUT: {
        const { resource, rest } = readResource(entry, 1);
        const stored = decodeStoredRecord(rest, 'simulated disk');
        this.#records.set(resource, { record: stored.record, grantedAtMs: stored.grantedAtMs });
        return;
      }
      case COMPACT: {
        this.#floor = view.getBigUint64(1);
        let at = 13;
        for (let k = 0; k < view.getUint32(9); k++) {
          const { resource, end } = readResource(entry, at);
          this.#records.delete(resource);
          at = end;
        }
        return;
      }
      case IMPORT:
        return this.#replayImport(decodeImport(entry), view.getBigUint64(1), view.getFloat64(9));
      case FREEZE:
        this.#frozen = { at: 'before the restart', reason: new TextDecoder().decode(entry.subarray(1)) };
        return;
      default:
        throw new QuorumFenceError('STORE_CORRUPT', 'an unknown entry on the simulated disk');
    }
  }

  #replayImport(entries: readonly RecordEntry[], floor: bigint, grantedAtMs: number): void {
    for (const { resource, record } of entries) this.#records.set(resource, { record, grantedAtMs });
    if (floor > this.#floor) this.#floor = floor;
  }
}

const encoder = new TextEncoder();

function resourceBytes(resource: string): Uint8Array {
  const bytes = encoder.encode(resource);
  const out = new Uint8Array(2 + bytes.length);
  new DataView(out.buffer).setUint16(0, bytes.length);
  out.set(bytes, 2);
  return out;
}

function readResource(entry: Uint8Array, at: number): { resource: string; end: number; rest: Uint8Array } {
  const length = new DataView(entry.buffer, entry.byteOffset + at).getUint16(0);
  const end = at + 2 + length;
  return { resource: new TextDecoder().decode(entry.subarray(at + 2, end)), end, rest: entry.subarray(end) };
}

function encodeEntry(type: number, resource: string, record: Uint8Array): Uint8Array {
  const name = resourceBytes(resource);
  const out = new Uint8Array(1 + name.length + record.length);
  out[0] = type;
  out.set(name, 1);
  out.set(record, 1 + name.length);
  return out;
}

function encodeCompaction(floor: bigint, resources: readonly string[]): Uint8Array {
  const names = resources.map(resourceBytes);
  const out = new Uint8Array(13 + names.reduce((sum, name) => sum + name.length, 0));
  const view = new DataView(out.buffer);
  out[0] = COMPACT;
  view.setBigUint64(1, floor);
  view.setUint32(9, names.length);
  let at = 13;
  for (const name of names) {
    out.set(name, at);
    at += name.length;
  }
  return out;
}

function encodeImport(floor: bigint, entries: readonly RecordEntry[], grantedAtMs: number): Uint8Array {
  const parts = entries.map(({ resource, record }) => {
    const name = resourceBytes(resource);
    const bytes = encodeRecord(record, grantedAtMs);
    const part = new Uint8Array(name.length + 2 + bytes.length);
    part.set(name);
    new DataView(part.buffer).setUint16(name.length, bytes.length);
    part.set(bytes, name.length + 2);
    return part;
  });
  const out = new Uint8Array(21 + parts.reduce((sum, part) => sum + part.length, 0));
  const view = new DataView(out.buffer);
  out[0] = IMPORT;
  view.setBigUint64(1, floor);
  view.setFloat64(9, grantedAtMs);
  view.setUint32(17, parts.length);
  let at = 21;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

function decodeImport(entry: Uint8Array): RecordEntry[] {
  const view = new DataView(entry.buffer, entry.byteOffset, entry.byteLength);
  const entries: RecordEntry[] = [];
  let at = 21;
  for (let k = 0; k < view.getUint32(17); k++) {
    const { resource, end } = readResource(entry, at);
    const length = view.getUint16(end);
    const record = decodeStoredRecord(entry.subarray(end + 2, end + 2 + length), 'simulated disk').record;
    entries.push({ resource, record });
    at = end + 2 + length;
  }
  return entries;
}
