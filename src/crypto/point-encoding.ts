/**
 * Checks on compressed BLS12-381 point encodings that need no curve
 * arithmetic: length, flag bits, the identity encoding, coordinates below the
 * field modulus. Both backends run these first, so both give the same error
 * code for the same bad bytes; the backends then check curve and subgroup.
 */
import { QuorumFenceError } from '../common/errors.js';
import { bigIntToBytes, bytesToBigInt, copyBytes } from '../common/bytes.js';

/** The BLS12-381 base field modulus p. */
export const FIELD_MODULUS =
  0x1a0111ea397fe69a4b1ba7b6434bacd764774b84f38512bf6730d2a0f6b0f6241eabfffeb153ffffb9feffffffffaaabn;

const COMPRESSED_FLAG = 0x80;
const INFINITY_FLAG = 0x40;
const FIELD_ELEMENT_BYTES = 48;

/**
 * @param length 48 for G1, 96 for G2
 * @throws QuorumFenceError BAD_LENGTH, POINT_NOT_CANONICAL, POINT_IDENTITY
 */
export function checkCompressedPoint(bytes: Uint8Array, length: 48 | 96, field: string): void {
  if (!(bytes instanceof Uint8Array)) {
    throw new QuorumFenceError('INVALID_ARGUMENT', `"${field}" expected ${length} bytes`, { field });
  }
  if (bytes.length !== length) {
    throw new QuorumFenceError('BAD_LENGTH', `"${field}" expected ${length} bytes, got ${bytes.length}`, {
      field,
      expected: length,
      actual: bytes.length,
    });
  }
  const flags = bytes[0]!;
  if ((flags & COMPRESSED_FLAG) === 0) {
    throw new QuorumFenceError('POINT_NOT_CANONICAL', `"${field}" is not a compressed point encoding`, { field });
  }
  if (flags & INFINITY_FLAG) {
    // The identity has exactly one encoding (0xc0 then zeros); anything else with the flag is malformed.
    const restIsZero = (flags & 0x3f) === 0 && bytes.subarray(1).every((b) => b === 0);
    if (restIsZero) throw new QuorumFenceError('POINT_IDENTITY', `"${field}" is the point at infinity`, { field });
    throw new QuorumFenceError('POINT_NOT_CANONICAL', `"${field}" has the infinity flag with a non-zero payload`, {
      field,
    });
  }
  for (let offset = 0; offset < length; offset += FIELD_ELEMENT_BYTES) {
    // A real copy: clearing the flag bits must never touch the caller's bytes (Buffer#slice is a view).
    const coordinate = copyBytes(bytes.subarray(offset, offset + FIELD_ELEMENT_BYTES));
    if (offset === 0) coordinate[0]! &= 0x1f;
    if (bytesToBigInt(coordinate) >= FIELD_MODULUS) {
      throw new QuorumFenceError('POINT_NOT_CANONICAL', `"${field}" has a coordinate not below the field modulus`, {
        field,
      });
    }
  }
}

/**
 * The uncompressed encoding of -P from the uncompressed G2 encoding of a
 * non-identity P (x.c1 ‖ x.c0 ‖ y.c1 ‖ y.c0): y becomes p - y. Decoding an
 * uncompressed point needs no square root, so this is ten times cheaper than
 * flipping the sign flag of the compressed form and decompressing.
 */
export function negateUncompressedG2(bytes: Uint8Array): Uint8Array {
  const out = copyBytes(bytes);
  for (let offset = 2 * FIELD_ELEMENT_BYTES; offset < 4 * FIELD_ELEMENT_BYTES; offset += FIELD_ELEMENT_BYTES) {
    const y = bytesToBigInt(bytes.subarray(offset, offset + FIELD_ELEMENT_BYTES));
    out.set(bigIntToBytes(y === 0n ? 0n : FIELD_MODULUS - y, FIELD_ELEMENT_BYTES), offset);
  }
  return out;
}
