/**
 * The bytes of one signing record as LMDB stores them (the value under the
 * resource's UTF-8 name):
 *   version(1) ‖ flags(1) ‖ epoch(8, big-endian) ‖ holder(32) ‖ grantDigest(32)
 * Version 1 stores once had a durable "released" flag in `flags`; nothing
 * writes it any more and reading ignores it (the release is volatile, see
 * policy.ts), which can only make a lease count as running a little longer.
 */
import { MAX_EPOCH, MIN_EPOCH } from '../common/limits.js';
import type { SignedRecord } from './policy.js';
import { storeCorrupt } from './store-errors.js';

const RECORD_VERSION = 1;
const RECORD_BYTES = 74;
/** Written by older versions only; accepted on read and ignored. */
const FLAG_RELEASED_LEGACY = 0x01;

export function encodeRecord(record: SignedRecord): Uint8Array {
  const out = new Uint8Array(RECORD_BYTES);
  const view = new DataView(out.buffer);
  out[0] = RECORD_VERSION;
  out[1] = 0;
  view.setBigUint64(2, record.epoch);
  out.set(record.holder, 10);
  out.set(record.grantDigest, 42);
  return out;
}

/** @throws QuorumFenceError STORE_CORRUPT */
export function decodeRecord(bytes: Uint8Array, where: string): SignedRecord {
  if (bytes.length !== RECORD_BYTES || bytes[0] !== RECORD_VERSION || (bytes[1]! & ~FLAG_RELEASED_LEGACY) !== 0) {
    throw storeCorrupt(where, `a record has an unknown layout (${bytes.length} bytes, version ${bytes[0]})`);
  }
  const epoch = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getBigUint64(2);
  if (epoch < MIN_EPOCH || epoch > MAX_EPOCH)
    throw storeCorrupt(where, `a record has epoch ${epoch} outside 1 .. 2^63-1`);
  return {
    epoch,
    // Plain Uint8Array copies: LMDB hands out Buffers over its own memory.
    holder: Uint8Array.from(bytes.subarray(10, 42)),
    grantDigest: Uint8Array.from(bytes.subarray(42, 74)),
  };
}
