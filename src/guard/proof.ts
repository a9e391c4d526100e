/**
 * Proof of possession: a request signed by the token's holder key, so a token
 * copied off the wire is useless without the holder's secret key, plus a
 * replay window so a signed request copied off the wire is useless too.
 *
 *   transcript = "quorumfence/guard-request/v1"
 *                ‖ u16 len ‖ audience      the guard's name (binds the request to one guard)
 *                ‖ u8 len  ‖ method        e.g. PUT
 *                ‖ u16 len ‖ resource
 *                ‖ u16 len ‖ key
 *                ‖ bodyDigest (32)         SHA-256 of the request body
 *                ‖ tokenDigest (32)        SHA-256 of the token bytes (binds cluster, resource, epoch, holder)
 *                ‖ u64 counter             1 .. 2^63-1
 *   signature  = Ed25519(holder secret key, transcript)
 *
 * Why a counter and not a timestamp: the guard reads no clock (S6), so it
 * cannot bound a timestamp. Each token starts a fresh counter space; the guard
 * keeps, with the barrier, the highest counter seen for the token that set the
 * barrier plus a bitmap of the 64 below it (the IPsec anti-replay window), so
 * requests may arrive up to 64 out of order and the state per resource stays a
 * few bytes. Older tokens need no replay state: they are below the barrier and
 * refused as stale anyway.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { QuorumFenceError } from '../common/errors.js';
import { concatBytes, u16be, u64be } from '../common/bytes.js';
import { ED25519_SIGNATURE_BYTES, verifyEd25519 } from '../common/ed25519.js';
import { expectBytes } from '../common/check.js';
import { MAX_EPOCH } from '../common/limits.js';

const TRANSCRIPT_TAG = new TextEncoder().encode('quorumfence/guard-request/v1');
const utf8 = new TextEncoder();

export const PROOF_SIGNATURE_BYTES = ED25519_SIGNATURE_BYTES;
/** Counters share the epoch's range so every store can hold them as signed 64-bit integers. */
export const MAX_PROOF_COUNTER = MAX_EPOCH;
/** How far below the highest counter a request may still arrive: one 64-bit bitmap. */
export const REPLAY_WINDOW = 64n;

export interface RequestFields {
  /** The guard's name; '' when the guard has none. */
  readonly audience: string;
  readonly method: string;
  readonly resource: string;
  /** '' when the request names no key. */
  readonly key: string;
  /** SHA-256 of the request body (of zero bytes when there is none). */
  readonly bodyDigest: Uint8Array;
  /** SHA-256 of the binary token. */
  readonly tokenDigest: Uint8Array;
  readonly counter: bigint;
}

function lengthPrefixed(text: string, field: string, widthBytes: 1 | 2): Uint8Array {
  const bytes = utf8.encode(text);
  const max = widthBytes === 1 ? 0xff : 0xffff;
  if (bytes.length > max)
    throw new QuorumFenceError('INVALID_ARGUMENT', `"${field}" is longer than ${max} bytes`, { field });
  return concatBytes(widthBytes === 1 ? Uint8Array.of(bytes.length) : u16be(bytes.length), bytes);
}

/**
 * The bytes the holder signs for one request.
 * @throws QuorumFenceError INVALID_ARGUMENT (a field too long, a counter out of range), BAD_LENGTH (a digest not 32 bytes)
 */
export function requestTranscript(fields: RequestFields): Uint8Array {
  if (fields.counter < 1n || fields.counter > MAX_PROOF_COUNTER) {
    throw new QuorumFenceError('INVALID_ARGUMENT', '"counter" expected 1 .. 2^63-1', { field: 'counter' });
  }
  return concatBytes(
    TRANSCRIPT_TAG,
    lengthPrefixed(fields.audience, 'audience', 2),
    lengthPrefixed(fields.method, 'method', 1),
    lengthPrefixed(fields.resource, 'resource', 2),
    lengthPrefixed(fields.key, 'key', 2),
    expectBytes(fields.bodyDigest, 32, 'bodyDigest'),
    expectBytes(fields.tokenDigest, 32, 'tokenDigest'),
    u64be(fields.counter),
  );
}

/** SHA-256 of a request body: the `bodyDigest` of the transcript. */
export function bodyDigest(body: Uint8Array): Uint8Array {
  return sha256(body);
}

/** Anything that signs with the holder's Ed25519 key (the client SDK's Identity fits). */
export interface RequestSigner {
  sign(message: Uint8Array): Uint8Array;
}

export interface RequestProof {
  readonly counter: bigint;
  /** Ed25519, 64 bytes. */
  readonly signature: Uint8Array;
}

/** Signs one request: what a holder attaches next to its token. */
export function signRequest(signer: RequestSigner, fields: RequestFields): RequestProof {
  return { counter: fields.counter, signature: signer.sign(requestTranscript(fields)) };
}

/**
 * True when `signature` is the holder's Ed25519 signature over the request
 * (common/ed25519.ts: the key checks, then node's native Ed25519).
 * Never throws for bad input bytes.
 */
export function verifyRequestProof(holder: Uint8Array, fields: RequestFields, signature: Uint8Array): boolean {
  let transcript: Uint8Array;
  try {
    transcript = requestTranscript(fields);
  } catch {
    return false;
  }
  return verifyEd25519(holder, transcript, signature);
}

/**
 * Counters seen for the token that set the barrier: the highest, and bit i
 * set when `high - i` was seen (bit 0 is `high` itself).
 */
export interface ReplayWindow {
  readonly high: bigint;
  readonly seen: bigint;
}

const WINDOW_MASK = (1n << REPLAY_WINDOW) - 1n;

/** The window after the first request of a token. */
export function openReplayWindow(counter: bigint): ReplayWindow {
  return { high: counter, seen: 1n };
}

/**
 * Admits `counter` into the window or refuses it as a replay (already seen, or
 * more than REPLAY_WINDOW below the highest). Pure: returns the new window.
 */
export function admitCounter(
  window: ReplayWindow,
  counter: bigint,
): { ok: true; window: ReplayWindow } | { ok: false } {
  if (counter > window.high) {
    const shift = counter - window.high;
    const seen = shift >= REPLAY_WINDOW ? 1n : ((window.seen << shift) | 1n) & WINDOW_MASK;
    return { ok: true, window: { high: counter, seen } };
  }
  const offset = window.high - counter;
  if (offset >= REPLAY_WINDOW) return { ok: false };
  const bit = 1n << offset;
  if (window.seen & bit) return { ok: false };
  return { ok: true, window: { high: window.high, seen: window.seen | bit } };
}
