/**
 * The guard log: one entry per attempt whose token was accepted (a refusal at
 * admission, the token or the proof, is answered and counted but never
 * written: GuardCore.refusedAtAdmission), accepted or refused, appended in the
 * same transaction as the decision it records. It is the evidence a history
 * checker reads afterwards (docs/protocol.md, Faults): accepted epochs never go down
 * per resource, one token per (resource, epoch), every accepted token
 * verifies, no acknowledged write is lost.
 *
 * Entries are plain JSON values (epochs as decimal strings, bytes as hex or
 * base64url) so that the same shape is stored by every adapter, served by the
 * reference resource at `/log`, and read back by `parseGuardLogEntry`.
 */
import { QuorumFenceError, type ErrorCode } from '../common/errors.js';
import { describe } from '../common/check.js';

/**
 * Why a guard refused an attempt. Every refusal changes nothing but the log.
 */
export const GUARD_REFUSAL_REASONS = [
  /** No token came with the request. */
  'missing_token',
  /** The token does not decode (bad encoding, length, version, point...); `errorCode` says which. */
  'malformed',
  /** The token decodes but its signature does not verify against the group key. */
  'bad_token',
  /** The token is for another cluster. */
  'wrong_cluster',
  /** The token is valid but for another resource. */
  'wrong_resource',
  /** The guard requires proof of possession and the request carries none. */
  'proof_required',
  /** The request's holder signature does not verify under the token's holder key. */
  'bad_proof',
  /** The request's proof counter was already used (or fell out of the replay window). */
  'replayed',
  /** The token's epoch is below the barrier. */
  'stale',
  /** A different token at the barrier's own epoch: proof that more than f replicas are faulty. */
  'conflict',
  /** A compare-and-set precondition (`ifVersion`) did not hold. */
  'version_mismatch',
  /** The caller's mutation threw; nothing of it was applied. */
  'aborted',
] as const;

export type GuardRefusalReason = (typeof GUARD_REFUSAL_REASONS)[number];

export type GuardOutcomeLabel = 'accepted' | GuardRefusalReason;

/** One attempt, as stored and served. Field order is the serialised order. */
export interface GuardLogEntry {
  /** 1, 2, 3, ... in decision order (see the adapter's readLog for how complete a live read is). */
  readonly seq: number;
  /** What the attempt was: `put`, `delete`, `get` at the reference resource, or the caller's own label. */
  readonly op: string;
  /** The resource the request named (not necessarily the token's: see `wrong_resource`). */
  readonly resource: string;
  /** The key within the resource, when the caller gave one. */
  readonly key: string | null;
  readonly accepted: boolean;
  readonly outcome: GuardOutcomeLabel;
  /** The token's epoch, decimal; null when the token did not decode. */
  readonly epoch: string | null;
  /** The token's holder, hex Ed25519 key; null when the token did not decode. */
  readonly holder: string | null;
  /** SHA-256 of the token bytes, hex; null when the token did not decode. */
  readonly tokenDigest: string | null;
  /** The token itself (base64url) on accepted and conflict entries, so a checker can verify it again. */
  readonly token: string | null;
  /** The barrier epoch before the decision, decimal; null when the resource had none. */
  readonly barrierBefore: string | null;
  /** The barrier epoch after it (equal to barrierBefore unless accepted above it). */
  readonly barrierAfter: string | null;
  /** The data version an accepted write stamped on the keys it changed (its own seq); null when it changed nothing, was refused, or the adapter keeps no versions. */
  readonly version: number | null;
  /** On `conflict`: the token (base64url) that had set the barrier at the same epoch. Evidence. */
  readonly conflictingToken: string | null;
  /** On `malformed`: the decoder's error code. */
  readonly errorCode: ErrorCode | null;
}

function bad(field: string, message: string): never {
  throw new QuorumFenceError('INVALID_ARGUMENT', `guard log entry: "${field}" ${message}`, { field });
}

const DECIMAL = /^(0|[1-9][0-9]{0,18})$/;
const HEX_32 = /^[0-9a-f]{64}$/;
const BASE64URL = /^[A-Za-z0-9_-]{1,1024}$/;

function nullableString(value: unknown, field: string, pattern?: RegExp): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value !== 'string') bad(field, `expected a string or null, got ${describe(value)}`);
  if (pattern && !pattern.test(value)) bad(field, 'has the wrong format');
  return value;
}

/**
 * Checks one entry read from outside (the `/log` endpoint, a file, a
 * database row). Field names in errors match the interface.
 * @throws QuorumFenceError INVALID_ARGUMENT naming the field.
 */
export function parseGuardLogEntry(json: unknown): GuardLogEntry {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) bad('(entry)', 'expected an object');
  const e = json as Record<string, unknown>;
  if (typeof e.seq !== 'number' || !Number.isSafeInteger(e.seq) || e.seq < 1) bad('seq', 'expected a positive integer');
  if (typeof e.op !== 'string' || e.op.length === 0 || e.op.length > 32) bad('op', 'expected 1..32 characters');
  if (typeof e.resource !== 'string') bad('resource', `expected a string, got ${describe(e.resource)}`);
  if (typeof e.accepted !== 'boolean') bad('accepted', `expected a boolean, got ${describe(e.accepted)}`);
  const outcome = e.outcome;
  if (outcome !== 'accepted' && !(GUARD_REFUSAL_REASONS as readonly unknown[]).includes(outcome))
    bad('outcome', 'is not a known outcome');
  if (e.accepted !== (outcome === 'accepted')) bad('accepted', 'disagrees with "outcome"');
  const version = e.version ?? null;
  if (version !== null && (typeof version !== 'number' || !Number.isSafeInteger(version) || version < 0))
    bad('version', 'expected a non-negative integer or null');
  return {
    seq: e.seq,
    op: e.op,
    resource: e.resource,
    key: nullableString(e.key, 'key'),
    accepted: e.accepted,
    outcome: outcome as GuardOutcomeLabel,
    epoch: nullableString(e.epoch, 'epoch', DECIMAL),
    holder: nullableString(e.holder, 'holder', HEX_32),
    tokenDigest: nullableString(e.tokenDigest, 'tokenDigest', HEX_32),
    token: nullableString(e.token, 'token', BASE64URL),
    barrierBefore: nullableString(e.barrierBefore, 'barrierBefore', DECIMAL),
    barrierAfter: nullableString(e.barrierAfter, 'barrierAfter', DECIMAL),
    version: version as number | null,
    conflictingToken: nullableString(e.conflictingToken, 'conflictingToken', BASE64URL),
    errorCode: nullableString(e.errorCode, 'errorCode') as ErrorCode | null,
  };
}

/**
 * The entry as anyone may read it: no token and no conflicting token (a
 * token is a bearer credential unless the guard requires proof of
 * possession). The digest, epoch, holder and outcome stay. Operators get the
 * full entry (see common/operator-secret.ts).
 */
export function withoutTokens(entry: GuardLogEntry): GuardLogEntry {
  return entry.token === null && entry.conflictingToken === null
    ? entry
    : { ...entry, token: null, conflictingToken: null };
}

/** A page of the log: entries with seq > `after`, at most `limit` of them. */
export interface GuardLogQuery {
  /** Return entries after this seq (default 0: from the start). */
  readonly after?: number;
  /** At most this many (default and cap: the adapter's `maxLogPage`). */
  readonly limit?: number;
}
