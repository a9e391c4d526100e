/**
 * Byte encodings shared by every codec: hex, base64url, big-endian integers.
 * Decoders are strict and throw QuorumFenceError with a code naming what is wrong.
 */
import { QuorumFenceError } from './errors.js';

const HEX_PATTERN = /^(?:[0-9a-f]{2})*$/;

/** Lowercase hex, no prefix (the form DESIGN.md fixes for cluster files). */
export function toHex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex');
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
  return new Uint8Array(Buffer.from(text, 'hex'));
}

const BASE64URL_PATTERN = /^[A-Za-z0-9_-]*$/;

/** base64url without padding. */
export function toBase64Url(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64url');
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
  const bytes = Buffer.from(text, 'base64url');
  if (bytes.toString('base64url') !== text) {
    throw new QuorumFenceError('BAD_ENCODING', `"${field}" is not canonical base64url`, { field });
  }
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
