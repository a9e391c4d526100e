/**
 * The reference resource's HTTP plumbing: status codes by guard refusal, reading a request's parts (method,
 * path segments, query, proof and If-Version headers, the body up to its limit) with the request errors
 * decided there, before the guard is reached, and the two response shapes (JSON, or a stored value with its
 * version).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { QuorumFenceError } from '../common/errors.js';
import { fromBase64Url } from '../common/bytes.js';
import { expectGuardKey, expectResource } from '../common/check.js';
import type { PresentedProof } from './core.js';
import type { GuardRefusalReason } from './log.js';
import type { StoredValue } from './lmdb-guard.js';
import { MAX_PROOF_COUNTER, PROOF_SIGNATURE_BYTES, bodyDigest } from './proof.js';

const DECIMAL = /^(0|[1-9][0-9]{0,18})$/;
const EMPTY = new Uint8Array(0);

/** The client went away before its request was read: its doing, not a failure of ours. */
export class ClientGone extends Error {}

export const CLIENT_ERROR_STATUS: Readonly<Record<string, string>> = {
  ERR_HTTP_REQUEST_TIMEOUT: '408 Request Timeout',
  HPE_HEADER_OVERFLOW: '431 Request Header Fields Too Large',
};

export const STATUS_BY_REASON: Readonly<Record<GuardRefusalReason, number>> = {
  missing_token: 401,
  malformed: 401,
  bad_token: 401,
  wrong_cluster: 401,
  proof_required: 401,
  bad_proof: 401,
  replayed: 401,
  wrong_resource: 403,
  stale: 409,
  conflict: 409,
  version_mismatch: 412,
  aborted: 500,
};

/** A response decided before the guard is reached: bad path, bad header, oversized body. */
export class BadRequest extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body, (_, v) => (typeof v === 'bigint' ? v.toString() : v));
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

export function sendValue(res: ServerResponse, value: StoredValue, headers: Record<string, string>): void {
  res.writeHead(200, {
    'content-type': 'application/octet-stream',
    'content-length': value.value.length,
    'quorumfence-version': String(value.version),
    ...headers,
  });
  res.end(value.value);
}

export function decodeSegment(segment: string, field: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new BadRequest(400, 'bad_request', `${field} is not valid percent-encoded UTF-8`);
  }
}

/** Refuses (405) a method the route does not take. */
export function expectMethod(method: string, allowed: readonly string[]): void {
  if (!allowed.includes(method)) throw new BadRequest(405, 'method_not_allowed', `use ${allowed.join(' or ')}`);
}

/** The resource named by a path segment, checked as every resource name is (400 otherwise). */
export function resourceSegment(segment: string): string {
  const resource = decodeSegment(segment, 'resource');
  try {
    expectResource(resource);
  } catch (error) {
    if (error instanceof QuorumFenceError) throw new BadRequest(400, 'bad_request', `${error.message} (${error.code})`);
    throw error;
  }
  return resource;
}

/** The key named by a path segment, checked against the guard's key limit (400 otherwise). */
export function keySegment(segment: string, maxKeyBytes: number): string {
  const key = decodeSegment(segment, 'key');
  try {
    return expectGuardKey(key, maxKeyBytes);
  } catch (error) {
    if (error instanceof QuorumFenceError) throw new BadRequest(400, 'bad_request', `${error.message} (${error.code})`);
    throw error;
  }
}

/** A non-negative integer query parameter, or `fallback` when absent (400 when malformed). */
export function queryInteger(query: URLSearchParams, name: string, fallback: number): number {
  const text = query.get(name);
  if (text === null) return fallback;
  if (!DECIMAL.test(text) || !Number.isSafeInteger(Number(text)))
    throw new BadRequest(400, 'bad_request', `"${name}" must be a non-negative integer`);
  return Number(text);
}

/** The `QuorumFence-Proof` header, if any, with the digest of the body received (400 when malformed). */
export function proofHeader(req: IncomingMessage, method: string, body: Uint8Array): PresentedProof | undefined {
  const header = req.headers['quorumfence-proof'];
  if (header === undefined) return undefined;
  const match = typeof header === 'string' ? /^(\d{1,19})\.([A-Za-z0-9_-]{86})$/.exec(header.trim()) : null;
  const counter = match ? BigInt(match[1]!) : 0n;
  if (!match || counter < 1n || counter > MAX_PROOF_COUNTER) {
    throw new BadRequest(
      400,
      'bad_request',
      'QuorumFence-Proof must be "<counter 1..2^63-1>.<base64url Ed25519 signature>"',
    );
  }
  let signature: Uint8Array;
  try {
    signature = fromBase64Url(match[2]!, 'proof signature');
  } catch {
    throw new BadRequest(400, 'bad_request', 'QuorumFence-Proof signature is not canonical base64url');
  }
  if (signature.length !== PROOF_SIGNATURE_BYTES)
    throw new BadRequest(400, 'bad_request', 'QuorumFence-Proof signature must be 64 bytes');
  // The digest of the body this server received, never one the client claims.
  return { method, bodyDigest: bodyDigest(body), counter, signature };
}

/** The `QuorumFence-If-Version` header, if any (400 when malformed). */
export function ifVersionHeader(req: IncomingMessage, key: string): { key: string; version: number } | undefined {
  const header = req.headers['quorumfence-if-version'];
  if (header === undefined) return undefined;
  if (typeof header !== 'string' || !DECIMAL.test(header.trim()) || !Number.isSafeInteger(Number(header.trim()))) {
    throw new BadRequest(400, 'bad_request', 'QuorumFence-If-Version must be a non-negative integer');
  }
  return { key, version: Number(header.trim()) };
}

/** Reads the body up to the limit; refuses more with 413 without buffering it. */
export async function readBody(req: IncomingMessage, maxBodyBytes: number): Promise<Uint8Array> {
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > maxBodyBytes) {
    throw new BadRequest(413, 'body_too_large', `the body limit is ${maxBodyBytes} bytes`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > maxBodyBytes) throw new BadRequest(413, 'body_too_large', `the body limit is ${maxBodyBytes} bytes`);
      chunks.push(chunk);
    }
  } catch (error) {
    // The peer closed or reset mid-body: nothing reached the guard, and nobody is left to answer.
    if (!(error instanceof BadRequest) && (req.readableAborted || req.socket.destroyed))
      throw new ClientGone('the client disconnected before sending the whole body', { cause: error });
    throw error;
  }
  return size === 0 ? EMPTY : new Uint8Array(Buffer.concat(chunks, size));
}
