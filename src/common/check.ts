/**
 * Boundary checks. Every value from the network, a file or a caller is checked
 * once, here, with a message that names the field; inside, types are trusted.
 */
import { QuorumFenceError, type ErrorCode } from './errors.js';
import { MAX_EPOCH, MAX_RESOURCE_BYTES, MIN_EPOCH } from './limits.js';

const utf8 = new TextEncoder();
const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function fail(code: ErrorCode, field: string, message: string, details?: Record<string, unknown>): never {
  throw new QuorumFenceError(code, `"${field}" ${message}`, { field, ...details });
}

/** @throws QuorumFenceError INVALID_ARGUMENT unless `value` is a Uint8Array of `length` bytes (BAD_LENGTH when only the length is wrong). */
export function expectBytes(value: unknown, length: number, field: string): Uint8Array {
  if (!(value instanceof Uint8Array))
    fail('INVALID_ARGUMENT', field, `expected ${length} bytes, got ${describe(value)}`);
  if (value.length !== length) {
    fail('BAD_LENGTH', field, `expected ${length} bytes, got ${value.length}`, {
      expected: length,
      actual: value.length,
    });
  }
  return value;
}

/** @throws QuorumFenceError INVALID_ARGUMENT unless `value` is an integer in [min, max]. */
export function expectInteger(value: unknown, min: number, max: number, field: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
    fail('INVALID_ARGUMENT', field, `expected an integer, got ${describe(value)}`);
  }
  if (value < min || value > max)
    fail('INVALID_ARGUMENT', field, `expected ${min}..${max}, got ${value}`, { min, max });
  return value;
}

/** @throws QuorumFenceError INVALID_ARGUMENT unless `value` is a string of at most `maxLength` characters. */
export function expectString(value: unknown, field: string, maxLength = 4096): string {
  if (typeof value !== 'string') fail('INVALID_ARGUMENT', field, `expected a string, got ${describe(value)}`);
  if (value.length > maxLength)
    fail('INVALID_ARGUMENT', field, `expected at most ${maxLength} characters, got ${value.length}`);
  return value;
}

/**
 * An epoch: a bigint (or a safe integer number, as msgpack and JSON may carry
 * small ones) in 1 .. 2^63-1.
 * @throws QuorumFenceError INVALID_ARGUMENT for a wrong type, EPOCH_OUT_OF_RANGE outside the range.
 */
export function expectEpoch(value: unknown, field = 'epoch'): bigint {
  let epoch: bigint;
  if (typeof value === 'bigint') epoch = value;
  else if (typeof value === 'number' && Number.isSafeInteger(value)) epoch = BigInt(value);
  else fail('INVALID_ARGUMENT', field, `expected an integer epoch, got ${describe(value)}`);
  if (epoch < MIN_EPOCH || epoch > MAX_EPOCH) {
    fail('EPOCH_OUT_OF_RANGE', field, `expected 1 .. 2^63-1, got ${epoch}`);
  }
  return epoch;
}

/**
 * A resource name given as a string: well-formed (no lone surrogates), 1..256 UTF-8 bytes,
 * no control character (checkNameCharacters).
 * Returns its UTF-8 bytes, which is what the token and the stores key on.
 * @throws QuorumFenceError INVALID_ARGUMENT, RESOURCE_NOT_UTF8, RESOURCE_EMPTY, RESOURCE_TOO_LONG, NAME_CONTROL_CHARACTER
 */
export function expectResource(value: unknown, field = 'resource'): Uint8Array {
  if (typeof value !== 'string') fail('INVALID_ARGUMENT', field, `expected a string, got ${describe(value)}`);
  if (!value.isWellFormed()) fail('RESOURCE_NOT_UTF8', field, 'is not well-formed Unicode (lone surrogate)');
  const bytes = utf8.encode(value);
  checkResourceLength(bytes.length, field);
  checkNameCharacters(value, field);
  return bytes;
}

/**
 * A resource name given as bytes: 1..256 bytes of well-formed UTF-8 holding no
 * control character. Returns the decoded string.
 *
 * `storedBeforeNameContract` is for one caller only: the replica's signing
 * record, which may hold watermarks for names granted before control
 * characters were refused. Those watermarks must still load (a forgotten
 * watermark is a second signature waiting to happen); no request can name
 * them any more.
 * @throws QuorumFenceError RESOURCE_EMPTY, RESOURCE_TOO_LONG, RESOURCE_NOT_UTF8, NAME_CONTROL_CHARACTER
 */
export function decodeResource(
  bytes: Uint8Array,
  field = 'resource',
  options: { readonly storedBeforeNameContract?: boolean } = {},
): string {
  checkResourceLength(bytes.length, field);
  let name: string;
  try {
    name = strictUtf8.decode(bytes);
  } catch {
    fail('RESOURCE_NOT_UTF8', field, 'is not well-formed UTF-8');
  }
  if (options.storedBeforeNameContract !== true) checkNameCharacters(name, field);
  return name;
}

/**
 * The name contract, for resource names and guard data keys alike: no C0
 * control character (U+0000..U+001F) and no DEL (U+007F). Such characters
 * have no place in a name, are invisible in logs and terminals, and are what
 * store key encodings, C strings and PostgreSQL `text` (no U+0000) treat
 * specially; refusing them everywhere means every store and every language
 * sees the same set of names. C1 controls (U+0080..U+009F) and other
 * Unicode are allowed: they are ordinary multi-byte UTF-8 to every store.
 * This function is the one place the rule lives.
 * @throws QuorumFenceError NAME_CONTROL_CHARACTER, naming the first one and its position
 */
export function checkNameCharacters(value: string, field: string): void {
  for (let index = 0; index < value.length; index++) {
    const unit = value.charCodeAt(index);
    if (unit <= 0x1f || unit === 0x7f) {
      fail(
        'NAME_CONTROL_CHARACTER',
        field,
        `must not contain control characters (U+0000..U+001F, U+007F): U+${unit.toString(16).padStart(4, '0').toUpperCase()} at character ${index}`,
        { index },
      );
    }
  }
}

/**
 * A guard data key: a string of 1..`maxBytes` UTF-8 bytes, well-formed, under the name contract.
 * @throws QuorumFenceError INVALID_ARGUMENT, NAME_CONTROL_CHARACTER
 */
export function expectGuardKey(value: unknown, maxBytes: number, field = 'key'): string {
  if (
    typeof value !== 'string' ||
    value.length === 0 ||
    !value.isWellFormed() ||
    utf8.encode(value).length > maxBytes
  ) {
    fail('INVALID_ARGUMENT', field, `expected 1..${maxBytes} UTF-8 bytes of well-formed text`, { max: maxBytes });
  }
  checkNameCharacters(value, field);
  return value;
}

function checkResourceLength(length: number, field: string): void {
  if (length === 0) fail('RESOURCE_EMPTY', field, 'must not be empty');
  if (length > MAX_RESOURCE_BYTES) {
    fail('RESOURCE_TOO_LONG', field, `expected at most ${MAX_RESOURCE_BYTES} UTF-8 bytes, got ${length}`, {
      max: MAX_RESOURCE_BYTES,
      actual: length,
    });
  }
}

/** A short description of a value's type for error messages (never the value itself: it may be large or secret). */
export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (value instanceof Uint8Array) return `${value.length} bytes`;
  if (Array.isArray(value)) return 'an array';
  return typeof value;
}
