/**
 * The reference resource's HTTP plumbing: status codes by guard refusal, the request errors decided before
 * the guard is reached, and the two response shapes (JSON, or a stored value with its version).
 */
import type { ServerResponse } from 'node:http';
import type { GuardRefusalReason } from './log.js';
import type { StoredValue } from './lmdb-guard.js';

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
