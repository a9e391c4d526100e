/**
 * Byte encodings shared by every codec: hex, base64url, big-endian integers.
 * Decoders are strict and throw QuorumFenceError with a code naming what is wrong.
 * Plain JavaScript on Uint8Array (no Buffer): the token decoder runs in browsers and edge runtimes too
 * (quorumfence/verify); only storeKey, which feeds LMDB, hands back a Buffer.
 */
import { QuorumFenceError } from './errors.js';

const HEX_PATTERN = /^(?:[0-9a-f]{2})*$/;

const HEX_DIGITS = Array.from({ length: 256 }, (_, byte) => byte.toString(16).padStart(2, '0'));

/** Lowercase hex, no prefix (the form docs/protocol.md fixes for cluster files). */
export function toHex(bytes: Uint8Array): string {
  let out = '';
  for (const byte of bytes) out += HEX_DIGITS[byte]!;
  return out;
}

/**
 * Decodes lowercase hex of exactly `length` bytes.
 * @throws QuorumFenceError BAD_ENCODING when not lowercase hex, BAD_LENGTH when the length differs.
 */
export function fromHex(text: unknown, length: number, field: string): Uint8Array {
  if (typeof text !== 'string' || !HEX_PATTERN.test(text)) {
    throw new QuorumFenceError('BAD_ENCODING', `"${field}" expected lowercase hex`, { field });
  }
  if (text.length !== length * 2) {
    throw new QuorumFenceError('BAD_LENGTH', `"${field}" expected ${length} bytes, got ${text.length / 2}`, {
      field,
      expected: length,
      actual: text.length / 2,
    });
  }
  const out = new Uint8Array(length);
  for (let i = 0; i < length; i++) out[i] = parseInt(text.slice(2 * i, 2 * i + 2), 16);
  return out;
}

const BASE64URL_PATTERN = /^[A-Za-z0-9_-]*$/;

const BASE64URL_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
const BASE64URL_VALUES = new Map([...BASE64URL_ALPHABET].map((c, value) => [c, value]));

/** base64url without padding. */
export function toBase64Url(bytes: Uint8Array): string {
  let out = '';
  for (let i = 0; i < bytes.length; i += 3) {
    const chunk = (bytes[i]! << 16) | ((bytes[i + 1] ?? 0) << 8) | (bytes[i + 2] ?? 0);
    const chars = Math.min(4, Math.ceil(((bytes.length - i) * 8) / 6));
    for (let k = 0; k < chars; k++) out += BASE64URL_ALPHABET[(chunk >> (18 - 6 * k)) & 63]!;
  }
  return out;
}

/**
 * Decodes base64url without padding, refusing any text that would not re-encode
 * to itself (so one token has exactly one text form).
 * @throws QuorumFenceError BAD_ENCODING
 */
export function fromBase64Url(text: unknown, field: string): Uint8Array {
  if (typeof text !== 'string' || !BASE64URL_PATTERN.test(text) || text.length % 4 === 1) {
    throw new QuorumFenceError('BAD_ENCODING', `"${field}" expected base64url without padding`, { field });
  }
  const bytes = new Uint8Array(Math.floor((text.length * 6) / 8));
  let bits = 0;
  let value = 0;
  let at = 0;
  for (const char of text) {
    value = ((value << 6) | BASE64URL_VALUES.get(char)!) & 0xffffff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes[at++] = (value >> bits) & 0xff;
    }
  }
  // Leftover bits must be zero, or two texts would decode to the same bytes.
  if (bits > 0 && (value & ((1 << bits) - 1)) !== 0) {
    throw new QuorumFenceError('BAD_ENCODING', `"${field}" is not canonical base64url`, { field });
  }
  return bytes;
}

/**
 * A copy of `bytes` in a fresh plain Uint8Array. Use it wherever caller
 * bytes are kept or changed: `Buffer#slice` (and `subarray` everywhere) is a
 * view on the caller's memory, not a copy.
 */
export function copyBytes(bytes: Uint8Array): Uint8Array {
  return new Uint8Array(bytes);
}

export function concatBytes(...parts: readonly Uint8Array[]): Uint8Array {
  let total = 0;
  for (const part of parts) total += part.length;
  const out = new Uint8Array(total);
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

export function u16be(value: number): Uint8Array {
  const out = new Uint8Array(2);
  new DataView(out.buffer).setUint16(0, value);
  return out;
}

/**
 * `bytes` preceded by their length as a big-endian u16: how the grant body
 * carries the resource name, and the part encoding of storeKey. At most
 * 65535 bytes (names are 256, keys 1024 at most).
 */
export function lengthPrefixed(bytes: Uint8Array): Uint8Array {
  if (bytes.length > 0xffff)
    throw new QuorumFenceError('INVALID_ARGUMENT', 'a length-prefixed field is over 65535 bytes');
  return concatBytes(u16be(bytes.length), bytes);
}

const utf8 = new TextEncoder();

/**
 * An injective key for an ordered binary store: each part's raw UTF-8 bytes,
 * length-prefixed as the grant body prefixes the resource. Two different
 * lists of strings never give the same bytes, whatever characters they hold
 * (the guards key (resource) and (resource, key) with it; a store's default
 * key encodings are not one-to-one for every string). All keys of one
 * first part share its prefix, so a range scan finds them.
 */
export function storeKey(...parts: readonly string[]): Buffer {
  const encoded = concatBytes(...parts.map((part) => lengthPrefixed(utf8.encode(part))));
  return Buffer.from(encoded.buffer, encoded.byteOffset, encoded.byteLength);
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * The parts of a storeKey. Strict: every length must fit and the parts must
 * fill the key exactly, as well-formed UTF-8.
 * @throws QuorumFenceError STORE_CORRUPT
 */
export function decodeStoreKey(key: Uint8Array): string[] {
  const parts: string[] = [];
  let offset = 0;
  while (offset < key.length) {
    if (offset + 2 > key.length) throw new QuorumFenceError('STORE_CORRUPT', 'a store key has a truncated length');
    const length = (key[offset]! << 8) | key[offset + 1]!;
    offset += 2;
    if (offset + length > key.length) throw new QuorumFenceError('STORE_CORRUPT', 'a store key part overruns the key');
    try {
      parts.push(strictUtf8.decode(key.subarray(offset, offset + length)));
    } catch {
      throw new QuorumFenceError('STORE_CORRUPT', 'a store key part is not UTF-8');
    }
    offset += length;
  }
  return parts;
}

export function u64be(value: bigint): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, value);
  return out;
}

/** Big-endian unsigned integer of any length, as a bigint. */
export function bytesToBigInt(bytes: Uint8Array): bigint {
  return bytes.length === 0 ? 0n : BigInt('0x' + toHex(bytes));
}

/** Big-endian encoding of a non-negative bigint in exactly `length` bytes. */
export function bigIntToBytes(value: bigint, length: number): Uint8Array {
  if (value < 0n || value >= 1n << BigInt(8 * length)) {
    throw new QuorumFenceError('INVALID_ARGUMENT', `integer does not fit in ${length} bytes`);
  }
  return fromHex(value.toString(16).padStart(length * 2, '0'), length, 'integer');
}
