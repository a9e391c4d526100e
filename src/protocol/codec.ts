/**
 * The msgpack codec and its strict validators. Decoding never trusts the
 * peer: any frame that is not exactly one well-formed message of a known type
 * throws PROTOCOL_ERROR (and the receiver closes the connection). Before
 * msgpackr sees a frame, strict-msgpack.ts refuses everything outside the
 * protocol's subset (extensions, floats, integers over 64 bits, invalid UTF-8),
 * so every integer here is a number or a 64-bit bigint. Range checks
 * that the replica rules own (resource bytes, epoch range, ttl) are left to
 * the policy, which answers them with an `invalid` outcome instead.
 */
import { Packr } from 'msgpackr';
import { QuorumFenceError } from '../common/errors.js';
import { describe } from '../common/check.js';
import { checkStrictMsgpack } from './strict-msgpack.js';
import { MAX_EPOCH, MAX_MEMBERSHIP_VERSION, MAX_REPLICAS } from '../common/limits.js';
import {
  HOLDER_KEY_BYTES,
  HOLDER_SIGNATURE_BYTES,
  MAX_EVIDENCE_ENTRIES,
  MAX_LEASES_PER_REPLY,
  NONCE_BYTES,
  PARTIAL_BYTES,
  PROTOCOL_VERSION,
  SESSION_BYTES,
  type ClientMessage,
  type GrantEvidence,
  type OutcomeByRequest,
  type ActiveLease,
  type ServerMessage,
  type WireErrorCode,
  type WireRequest,
} from './messages.js';

/** The largest legitimate frame is an acquire with a 256-byte resource (~350 bytes); 16 KiB leaves room and bounds abuse. */
export const DEFAULT_MAX_FRAME_BYTES = 16 * 1024;
/** A resource string longer than this is not worth decoding into a policy refusal. */
const MAX_WIRE_STRING = 1024;
/** Request ids are u32 chosen by the client. */
const MAX_ID = 0xffff_ffff;
/** Lease times fit easily in 2^31 ms (24 days). */
const MAX_MS = 0x7fff_ffff;

const packr = new Packr({
  useRecords: false,
  mapsAsObjects: true,
  int64AsType: 'bigint',
  moreTypes: false,
  structuredClone: false,
  bundleStrings: false,
  copyBuffers: true,
});

type Fields = Record<string, unknown>;

function protocolError(message: string): never {
  throw new QuorumFenceError('PROTOCOL_ERROR', message);
}

/** Encodes one message, adding the protocol version. */
export function encodeMessage(message: ClientMessage | ServerMessage): Uint8Array {
  return packr.pack({ v: PROTOCOL_VERSION, ...message });
}

function decodeFrame(frame: Uint8Array, maxBytes: number): Fields {
  if (frame.length > maxBytes) protocolError(`frame of ${frame.length} bytes exceeds the ${maxBytes}-byte limit`);
  // Only the protocol's msgpack subset reaches msgpackr: no extensions (its BigInt included), no floats, strict UTF-8.
  checkStrictMsgpack(frame);
  let value: unknown;
  try {
    value = packr.unpack(frame);
  } catch (error) {
    // Truncated data, unknown extensions, trailing bytes and runaway nesting (RangeError) all land here.
    protocolError(`undecodable msgpack: ${(error as Error).message.slice(0, 100)}`);
  }
  if (
    typeof value !== 'object' ||
    value === null ||
    Array.isArray(value) ||
    Object.getPrototypeOf(value) !== Object.prototype
  ) {
    protocolError(`expected a map, got ${describe(value)}`);
  }
  const fields = value as Fields;
  if (fields.v !== PROTOCOL_VERSION)
    protocolError(`unsupported protocol version ${JSON.stringify(String(fields.v)).slice(0, 20)}`);
  return fields;
}

function onlyKeys(fields: Fields, allowed: readonly string[]): void {
  for (const key of Object.keys(fields)) {
    if (key !== 'v' && key !== 'type' && !allowed.includes(key))
      protocolError(`unexpected field "${key.slice(0, 40)}" in ${String(fields.type)}`);
  }
}

function int(fields: Fields, key: string, min: number, max: number): number {
  const value = fields[key];
  const n = typeof value === 'bigint' && value >= BigInt(min) && value <= BigInt(max) ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < min || n > max) {
    protocolError(`"${key}" expected an integer in ${min}..${max}, got ${describe(value)}`);
  }
  return n;
}

/** Any integer the wire can carry (at most 64 bits, see strict-msgpack.ts), as a bigint; range checks belong to the policy. */
function wideInteger(fields: Fields, key: string): bigint {
  const value = fields[key];
  if (typeof value === 'bigint') return value;
  if (typeof value === 'number' && Number.isSafeInteger(value)) return BigInt(value);
  protocolError(`"${key}" expected an integer, got ${describe(value)}`);
}

/** An epoch in a replica's answer: 0 (never signed) .. 2^63-1. */
function reportedEpoch(fields: Fields, key: string, min: bigint): bigint {
  const epoch = wideInteger(fields, key);
  if (epoch < min || epoch > MAX_EPOCH) protocolError(`"${key}" out of range: ${epoch}`);
  return epoch;
}

function bytes(fields: Fields, key: string, length: number): Uint8Array {
  const value = fields[key];
  if (!(value instanceof Uint8Array) || value.length !== length)
    protocolError(`"${key}" expected ${length} bytes, got ${describe(value)}`);
  return new Uint8Array(value);
}

function string(fields: Fields, key: string): string {
  const value = fields[key];
  if (typeof value !== 'string' || value.length > MAX_WIRE_STRING)
    protocolError(`"${key}" expected a string of at most ${MAX_WIRE_STRING} characters`);
  return value;
}

function bool(fields: Fields, key: string): boolean {
  const value = fields[key];
  if (typeof value !== 'boolean') protocolError(`"${key}" expected a boolean, got ${describe(value)}`);
  return value;
}

/**
 * A flag that is absent or `true` (`resume`, `quiet`): `false` is the absent field spelt out, refused so that each
 * request has one encoding. True when present.
 */
function trueIfPresent(fields: Fields, key: string): boolean {
  if (fields[key] === undefined) return false;
  if (fields[key] !== true) protocolError(`"${key}" expected true when present`);
  return true;
}

/** An acquire's (or a joining renew's) catch-up evidence: at most MAX_EVIDENCE_ENTRIES maps of exactly { replica, epoch, partial }. */
function grantEvidence(value: unknown): GrantEvidence[] {
  if (!Array.isArray(value) || value.length > MAX_EVIDENCE_ENTRIES)
    protocolError(`"evidence" expected an array of at most ${MAX_EVIDENCE_ENTRIES} entries, got ${describe(value)}`);
  return value.map((entry: unknown) => {
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry) || entry instanceof Uint8Array)
      protocolError(`"evidence" entries expected maps, got ${describe(entry)}`);
    const fields = entry as Fields;
    for (const key of Object.keys(fields))
      if (key !== 'replica' && key !== 'epoch' && key !== 'partial')
        protocolError(`unexpected field "${key.slice(0, 40)}" in evidence`);
    return {
      replica: int(fields, 'replica', 1, MAX_REPLICAS),
      epoch: reportedEpoch(fields, 'epoch', 1n),
      partial: bytes(fields, 'partial', PARTIAL_BYTES),
    };
  });
}

/**
 * Decodes a frame a replica received.
 * @throws QuorumFenceError PROTOCOL_ERROR
 */
export function decodeClientMessage(frame: Uint8Array, maxBytes = DEFAULT_MAX_FRAME_BYTES): ClientMessage {
  const f = decodeFrame(frame, maxBytes);
  switch (f.type) {
    case 'hello': {
      onlyKeys(f, ['id', 'holder', 'signature', 'session']);
      const hello = {
        type: 'hello' as const,
        id: int(f, 'id', 0, MAX_ID),
        holder: bytes(f, 'holder', HOLDER_KEY_BYTES),
        signature: bytes(f, 'signature', HOLDER_SIGNATURE_BYTES),
      };
      return f.session === undefined ? hello : { ...hello, session: bytes(f, 'session', SESSION_BYTES) };
    }
    case 'acquire': {
      onlyKeys(f, ['id', 'resource', 'epoch', 'ttlMs', 'waitMs', 'nextEpoch', 'evidence', 'resume']);
      const request = {
        type: f.type,
        id: int(f, 'id', 0, MAX_ID),
        resource: string(f, 'resource'),
        epoch: wideInteger(f, 'epoch'),
        ttlMs: int(f, 'ttlMs', 0, MAX_MS),
      };
      const waitMs = f.waitMs === undefined ? 0 : int(f, 'waitMs', 0, MAX_MS);
      const nextEpoch = f.nextEpoch === undefined ? false : bool(f, 'nextEpoch');
      const evidence = f.evidence === undefined ? [] : grantEvidence(f.evidence);
      const waiting = waitMs > 0 ? { ...request, waitMs, nextEpoch } : request;
      const withEvidence = evidence.length > 0 ? { ...waiting, evidence } : waiting;
      return trueIfPresent(f, 'resume') ? { ...withEvidence, resume: true } : withEvidence;
    }
    case 'renew': {
      onlyKeys(f, ['id', 'resource', 'epoch', 'ttlMs', 'evidence']);
      const renew = {
        type: f.type,
        id: int(f, 'id', 0, MAX_ID),
        resource: string(f, 'resource'),
        epoch: wideInteger(f, 'epoch'),
        ttlMs: int(f, 'ttlMs', 0, MAX_MS),
      };
      const evidence = f.evidence === undefined ? [] : grantEvidence(f.evidence);
      return evidence.length > 0 ? { ...renew, evidence } : renew;
    }
    case 'release': {
      onlyKeys(f, ['id', 'resource', 'epoch', 'quiet']);
      const release = {
        type: 'release' as const,
        id: int(f, 'id', 0, MAX_ID),
        resource: string(f, 'resource'),
        epoch: wideInteger(f, 'epoch'),
      };
      return trueIfPresent(f, 'quiet') ? { ...release, quiet: true } : release;
    }
    case 'status':
      onlyKeys(f, ['id', 'resource']);
      return { type: 'status', id: int(f, 'id', 0, MAX_ID), resource: string(f, 'resource') };
    case 'leases':
      // Any u32 limit decodes; one outside 1..MAX_LEASES_PER_REPLY is the replica's to answer `invalid`.
      onlyKeys(f, ['id', 'limit']);
      return { type: 'leases', id: int(f, 'id', 0, MAX_ID), limit: int(f, 'limit', 0, MAX_ID) };
    default:
      protocolError(`unknown message type ${JSON.stringify(String(f.type)).slice(0, 40)}`);
  }
}

const WIRE_ERROR_CODES: readonly WireErrorCode[] = [
  'RATE_LIMITED',
  'UNAUTHENTICATED',
  'INTERNAL',
  'PROTOCOL_ERROR',
  'REPLICA_FROZEN',
];

/**
 * Decodes a frame a client received. Replies keep their outcome raw until
 * `parseOutcome` checks it against the request that was sent.
 * @throws QuorumFenceError PROTOCOL_ERROR
 */
export function decodeServerMessage(frame: Uint8Array, maxBytes = DEFAULT_MAX_FRAME_BYTES): ServerMessage {
  const f = decodeFrame(frame, maxBytes);
  switch (f.type) {
    case 'challenge':
      onlyKeys(f, ['nonce', 'clusterId', 'replica']);
      return {
        type: 'challenge',
        nonce: bytes(f, 'nonce', NONCE_BYTES),
        clusterId: bytes(f, 'clusterId', 32),
        replica: int(f, 'replica', 1, 0xffff),
      };
    case 'welcome': {
      onlyKeys(f, ['id', 'replica', 'floor']);
      const welcome = { type: 'welcome', id: int(f, 'id', 0, MAX_ID), replica: int(f, 'replica', 1, 0xffff) } as const;
      // A floor of 0 is said by leaving the field out: one encoding per message.
      return f.floor === undefined ? welcome : { ...welcome, floor: reportedEpoch(f, 'floor', 1n) };
    }
    case 'reply': {
      onlyKeys(f, ['id', 'outcome']);
      const outcome = f.outcome;
      if (
        typeof outcome !== 'object' ||
        outcome === null ||
        Array.isArray(outcome) ||
        Object.getPrototypeOf(outcome) !== Object.prototype
      ) {
        protocolError('"outcome" expected a map');
      }
      return { type: 'reply', id: int(f, 'id', 0, MAX_ID), outcome: outcome as Fields };
    }
    case 'released':
      onlyKeys(f, ['resource']);
      return { type: 'released', resource: string(f, 'resource') };
    case 'turn':
      onlyKeys(f, ['resource', 'epoch']);
      return { type: 'turn', resource: string(f, 'resource'), epoch: reportedEpoch(f, 'epoch', 1n) };
    case 'error': {
      onlyKeys(f, ['id', 'code', 'message']);
      const code = f.code as WireErrorCode;
      if (!WIRE_ERROR_CODES.includes(code))
        protocolError(`unknown error code ${JSON.stringify(String(f.code)).slice(0, 40)}`);
      const message = string(f, 'message');
      return f.id === undefined
        ? { type: 'error', code, message }
        : { type: 'error', id: int(f, 'id', 0, MAX_ID), code, message };
    }
    default:
      protocolError(`unknown message type ${JSON.stringify(String(f.type)).slice(0, 40)}`);
  }
}

/**
 * Checks a reply's outcome against the kind of request it answers.
 * @throws QuorumFenceError PROTOCOL_ERROR
 */
export function parseOutcome<K extends WireRequest['type']>(kind: K, outcome: Readonly<Fields>): OutcomeByRequest[K] {
  const o = outcome as Fields;
  const status = o.status;
  const allowed: Record<WireRequest['type'], readonly string[]> = {
    acquire: ['granted', 'stale', 'busy', 'too_far', 'invalid', 'forbidden'],
    renew: ['renewed', 'not_holder', 'invalid', 'forbidden'],
    release: ['released', 'not_holder', 'invalid', 'forbidden'],
    status: ['ok', 'invalid', 'forbidden'],
    leases: ['leases', 'invalid', 'forbidden'],
  };
  if (typeof status !== 'string' || !allowed[kind].includes(status)) {
    protocolError(`${kind} reply has an unexpected status ${JSON.stringify(String(status)).slice(0, 40)}`);
  }
  const keys = (...k: string[]) => {
    for (const key of Object.keys(o))
      if (key !== 'status' && !k.includes(key))
        protocolError(`unexpected field "${key.slice(0, 40)}" in ${kind} reply`);
  };
  let parsed: object;
  switch (status) {
    case 'granted':
      keys('partial', 'epoch', 'generation', 'floor');
      parsed = {
        status,
        partial: bytes(o, 'partial', PARTIAL_BYTES),
        ...(o.epoch === undefined ? {} : { epoch: reportedEpoch(o, 'epoch', 1n) }),
        // Generation 0 is said by leaving the field out: one encoding per answer.
        ...(o.generation === undefined ? {} : { generation: int(o, 'generation', 1, MAX_MEMBERSHIP_VERSION) }),
        ...floorOf(o),
      };
      break;
    case 'stale':
    case 'too_far':
      keys('epoch', 'floor');
      parsed = { status, epoch: reportedEpoch(o, 'epoch', 0n), ...floorOf(o) };
      break;
    case 'not_holder':
      keys('epoch');
      parsed = { status, epoch: reportedEpoch(o, 'epoch', 0n) };
      break;
    case 'busy':
      keys('epoch', 'remainingMs', 'floor');
      parsed = {
        status,
        epoch: reportedEpoch(o, 'epoch', 1n),
        remainingMs: int(o, 'remainingMs', 0, MAX_MS),
        ...floorOf(o),
      };
      break;
    case 'renewed':
      keys('remainingMs');
      parsed = { status, remainingMs: int(o, 'remainingMs', 0, MAX_MS) };
      break;
    case 'released':
    case 'forbidden':
      keys();
      parsed = { status };
      break;
    case 'ok':
      keys('epoch', 'leased', 'remainingMs');
      parsed = {
        status,
        epoch: reportedEpoch(o, 'epoch', 0n),
        leased: bool(o, 'leased'),
        remainingMs: int(o, 'remainingMs', 0, MAX_MS),
      };
      break;
    case 'leases':
      keys('leases', 'more');
      parsed = { status, leases: activeLeases(o.leases), more: bool(o, 'more') };
      break;
    default: // 'invalid'
      keys('message');
      parsed = { status, message: string(o, 'message') };
  }
  return parsed as OutcomeByRequest[K];
}

/** An acquire answer's `floor` (docs/protocol.md, "Epoch choice"): absent means 0, so a present one is at least 1. */
function floorOf(o: Fields): { floor?: bigint } {
  return o.floor === undefined ? {} : { floor: reportedEpoch(o, 'floor', 1n) };
}

/** The list in a `leases` answer: at most MAX_LEASES_PER_REPLY entries, each exactly { resource, epoch, holder, remainingMs }. */
function activeLeases(value: unknown): ActiveLease[] {
  if (!Array.isArray(value) || value.length > MAX_LEASES_PER_REPLY)
    protocolError(`"leases" expected an array of at most ${MAX_LEASES_PER_REPLY} entries, got ${describe(value)}`);
  return value.map((entry: unknown) => {
    if (
      typeof entry !== 'object' ||
      entry === null ||
      Array.isArray(entry) ||
      Object.getPrototypeOf(entry) !== Object.prototype
    )
      protocolError('a "leases" entry expected a map');
    const e = entry as Fields;
    for (const key of Object.keys(e))
      if (!['resource', 'epoch', 'holder', 'remainingMs'].includes(key))
        protocolError(`unexpected field "${key.slice(0, 40)}" in a "leases" entry`);
    return {
      resource: string(e, 'resource'),
      epoch: reportedEpoch(e, 'epoch', 1n),
      holder: bytes(e, 'holder', HOLDER_KEY_BYTES),
      remainingMs: int(e, 'remainingMs', 0, MAX_MS),
    };
  });
}
