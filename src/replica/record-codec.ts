/**
 * The bytes of one signing record as LMDB stores them (the value under the
 * resource's UTF-8 name). Version 2, written by this version:
 *   version(1)=2 ‖ flags(1)=0 ‖ epoch(8) ‖ holder(32) ‖ grantDigest(32) ‖ grantedAtMs(8)
 * (integers big-endian). `grantedAtMs` is the replica's wall-clock time when
 * it recorded the grant: compaction keeps a record at least the retention
 * window after it (docs/storage.md); safety never depends on it.
 *
 * Version 1 (74 bytes, no grant time) is still read, as granted at time 0:
 * such a record becomes compactable as soon as its lease has ended. Its
 * `flags` once carried a durable "released" flag; nothing writes it any more
 * and reading ignores it (the release is volatile, see policy.ts), which can
 * only make a lease count as running a little longer.
 */
import { MAX_EPOCH, MIN_EPOCH } from '../common/limits.js';
import type { SignedRecord } from './policy.js';
import { storeCorrupt } from './store-errors.js';

const V1 = { version: 1, bytes: 74 } as const;
const V2 = { version: 2, bytes: 82 } as const;
/** Written by version 1 stores only; accepted on read and ignored. */
const FLAG_RELEASED_LEGACY = 0x01;

export interface StoredRecord {
  readonly record: SignedRecord;
  /** Wall-clock ms when the grant was recorded (0 for version 1 records). */
  readonly grantedAtMs: number;
}

export function encodeRecord(record: SignedRecord, grantedAtMs: number): Uint8Array {
  const out = new Uint8Array(V2.bytes);
  const view = new DataView(out.buffer);
  out[0] = V2.version;
  out[1] = 0;
  view.setBigUint64(2, record.epoch);
  out.set(record.holder, 10);
  out.set(record.grantDigest, 42);
  view.setBigUint64(74, BigInt(Math.max(0, Math.floor(grantedAtMs))));
  return out;
}

/** @throws QuorumFenceError STORE_CORRUPT */
export function decodeStoredRecord(bytes: Uint8Array, where: string): StoredRecord {
  const version = bytes[0];
  const known =
    (version === V1.version && bytes.length === V1.bytes && (bytes[1]! & ~FLAG_RELEASED_LEGACY) === 0) ||
    (version === V2.version && bytes.length === V2.bytes && bytes[1] === 0);
  if (!known) {
    throw storeCorrupt(
      where,
      `a record has an unknown layout (${bytes.length} bytes, version ${version}); this version reads record versions 1 and 2`,
    );
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const epoch = view.getBigUint64(2);
  if (epoch < MIN_EPOCH || epoch > MAX_EPOCH)
    throw storeCorrupt(where, `a record has epoch ${epoch} outside 1 .. 2^63-1`);
  const grantedAt = version === V2.version ? view.getBigUint64(74) : 0n;
  if (grantedAt > BigInt(Number.MAX_SAFE_INTEGER)) throw storeCorrupt(where, 'a record has a grant time out of range');
  return {
    record: {
      epoch,
      // Plain Uint8Array copies: LMDB hands out Buffers over its own memory.
      holder: Uint8Array.from(bytes.subarray(10, 42)),
      grantDigest: Uint8Array.from(bytes.subarray(42, 74)),
    },
    grantedAtMs: Number(grantedAt),
  };
}

/** @throws QuorumFenceError STORE_CORRUPT */
export function decodeRecord(bytes: Uint8Array, where: string): SignedRecord {
  return decodeStoredRecord(bytes, where).record;
}

/** The floor as the meta table stores it: a decimal string, 0 .. 2^63-1. @throws QuorumFenceError STORE_CORRUPT */
export function parseFloor(text: string | undefined, where: string): bigint {
  if (text === undefined) return 0n;
  if (!/^(0|[1-9][0-9]{0,18})$/.test(text)) throw storeCorrupt(where, 'its epoch floor is not a decimal number');
  const floor = BigInt(text);
  if (floor > MAX_EPOCH) throw storeCorrupt(where, `its epoch floor ${floor} is above 2^63-1`);
  return floor;
}
