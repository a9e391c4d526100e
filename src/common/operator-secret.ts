/**
 * The operator secret: what unlocks the reference resource's full guard log, and a replica's admin
 * endpoint (POST /admin/freeze, docs/resharing.md). The log's
 * accepted entries carry the token itself (so a checker can verify it
 * again) and conflict entries carry the equal-epoch evidence; a token is a
 * bearer credential unless the guard requires proof of possession, so these
 * are served only to a request with `Authorization: Bearer <operator
 * secret>`. Everyone else gets the same entries with the tokens replaced by
 * null: the digests, epochs, holders and outcomes stay.
 *
 * The secret comes from `--operator-secret-file` or the environment variable
 * below; without one, no full entry is ever served over HTTP.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { sha256 } from '@noble/hashes/sha2.js';
import { QuorumFenceError } from './errors.js';

export const OPERATOR_SECRET_ENV = 'QUORUMFENCE_OPERATOR_SECRET';
/** 128 bits written as text is the least a guessable-by-network secret should carry. */
export const MIN_OPERATOR_SECRET_LENGTH = 22;

/**
 * @throws QuorumFenceError INVALID_ARGUMENT for a secret shorter than MIN_OPERATOR_SECRET_LENGTH or with whitespace
 */
export function checkOperatorSecret(secret: string, field = 'operatorSecret'): string {
  if (typeof secret !== 'string' || secret.length < MIN_OPERATOR_SECRET_LENGTH || /\s/.test(secret)) {
    throw new QuorumFenceError(
      'INVALID_ARGUMENT',
      `"${field}" expected at least ${MIN_OPERATOR_SECRET_LENGTH} characters without whitespace`,
      { field },
    );
  }
  return secret;
}

/**
 * The operator secret from a file named by a flag (one line), or else from $QUORUMFENCE_OPERATOR_SECRET;
 * undefined when neither gives one.
 * @throws QuorumFenceError INVALID_OPTION (unreadable file, or a secret checkOperatorSecret refuses)
 */
export function readOperatorSecret(file: string | undefined, flag = 'operator-secret-file'): string | undefined {
  let secret: string | undefined;
  let source: string;
  if (file !== undefined) {
    source = flag;
    try {
      secret = readFileSync(file, 'utf8').trim();
    } catch (error) {
      throw new QuorumFenceError('INVALID_OPTION', `--${flag} ${file}: ${(error as Error).message}`, {
        field: source,
      });
    }
  } else {
    source = OPERATOR_SECRET_ENV;
    secret = process.env[OPERATOR_SECRET_ENV];
    if (secret === undefined || secret === '') return undefined;
  }
  try {
    return checkOperatorSecret(secret, source);
  } catch (error) {
    if (error instanceof QuorumFenceError)
      throw new QuorumFenceError('INVALID_OPTION', error.message, { field: source });
    throw error;
  }
}

/** Whether an Authorization header presents `secret` (constant time: both sides are hashed first). */
export function presentsOperatorSecret(authorization: string | undefined, secret: string | undefined): boolean {
  if (secret === undefined || authorization === undefined) return false;
  const match = /^Bearer ([^\s]+)$/.exec(authorization);
  if (!match) return false;
  const utf8 = new TextEncoder();
  return timingSafeEqual(sha256(utf8.encode(match[1]!)), sha256(utf8.encode(secret)));
}

let localSecret: string | undefined;

/**
 * One random operator secret per process, for the resources this process
 * starts on this machine (the local launcher, the scenario cluster) and the
 * clients it reads their logs with (ResourceHttpClient, the demo).
 */
export function localOperatorSecret(): string {
  return (localSecret ??= randomBytes(32).toString('base64url'));
}
