/**
 * A client identity: an Ed25519 key pair. The public key is the `holder` in
 * every grant the client obtains, and replicas' access configs name it; the
 * secret key only ever signs authentication transcripts (one per connection).
 *
 * Key file (JSON, mode 0600, never overwritten):
 *   { "format": "quorumfence/identity/v1", "publicKey": hex(32), "secretKey": hex(32) }
 */
import { QuorumFenceError } from '../common/errors.js';
import { bytesEqual, fromHex, toHex } from '../common/bytes.js';
import { ED25519_SEED_BYTES, ed25519Signer, newEd25519Seed } from '../common/ed25519.js';
import { expectBytes } from '../common/check.js';
import { readJsonFile, writeFileDurably } from '../common/files.js';
import { HOLDER_KEY_BYTES } from '../protocol/messages.js';

export const IDENTITY_FORMAT = 'quorumfence/identity/v1';
const SECRET_KEY_BYTES = ED25519_SEED_BYTES;

export interface IdentityJson {
  format: typeof IDENTITY_FORMAT;
  publicKey: string;
  /** 32-byte Ed25519 seed, hex. Secret. */
  secretKey: string;
}

/** A client key pair. The secret stays inside `sign`. */
export interface Identity {
  /** Ed25519 public key, 32 bytes: the holder in grants. */
  readonly publicKey: Uint8Array;
  readonly publicKeyHex: string;
  /** Ed25519 signature (64 bytes) over `message`. */
  sign(message: Uint8Array): Uint8Array;
}

/** Signs with node's native Ed25519 (common/ed25519.ts): once per replica connection, and per guarded request with a proof-of-possession guard. */
function makeIdentity(secretKey: Uint8Array): Identity {
  const signer = ed25519Signer(secretKey);
  return { publicKey: signer.publicKey, publicKeyHex: toHex(signer.publicKey), sign: signer.sign };
}

/** A fresh identity from the OS CSPRNG. */
export function generateIdentity(): Identity {
  const secretKey = newEd25519Seed();
  try {
    return makeIdentity(secretKey);
  } finally {
    secretKey.fill(0);
  }
}

/**
 * An identity from a 32-byte Ed25519 secret key (seed).
 * @throws QuorumFenceError INVALID_ARGUMENT, BAD_LENGTH
 */
export function identityFromSecretKey(secretKey: Uint8Array): Identity {
  return makeIdentity(expectBytes(secretKey, SECRET_KEY_BYTES, 'secretKey'));
}

function bad(path: string, message: string): never {
  throw new QuorumFenceError('BAD_KEY_FILE', `identity ${path}: ${message}`, { path });
}

/**
 * Parses the JSON form, checking that the public key matches the secret key.
 * @throws QuorumFenceError BAD_KEY_FILE, UNKNOWN_VERSION
 */
export function parseIdentity(json: unknown, path = '(identity)'): Identity {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) bad(path, 'expected a JSON object');
  const k = json as Record<string, unknown>;
  if (k.format !== IDENTITY_FORMAT) {
    throw new QuorumFenceError(
      'UNKNOWN_VERSION',
      `identity ${path}: "format" expected "${IDENTITY_FORMAT}", got ${JSON.stringify(k.format)}`,
      {
        path,
        field: 'format',
      },
    );
  }
  let secretKey: Uint8Array;
  let publicKey: Uint8Array;
  try {
    secretKey = fromHex(k.secretKey, SECRET_KEY_BYTES, 'secretKey');
    publicKey = fromHex(k.publicKey, HOLDER_KEY_BYTES, 'publicKey');
  } catch (error) {
    bad(path, (error as Error).message);
  }
  const identity = makeIdentity(secretKey);
  secretKey.fill(0);
  if (!bytesEqual(identity.publicKey, publicKey)) bad(path, '"publicKey" does not match "secretKey"');
  return identity;
}

/**
 * Reads an identity key file.
 * @throws QuorumFenceError IO_ERROR (missing or unreadable), BAD_KEY_FILE, UNKNOWN_VERSION
 */
export function loadIdentityFile(path: string): Identity {
  return parseIdentity(
    readJsonFile(path, 'identity', 'BAD_KEY_FILE', `make one with "quorumfence identity new ${path}"`),
    path,
  );
}

/**
 * Makes a fresh identity and writes it to `path` with mode 0600, durably.
 * Refuses to replace an existing file: a lost key is a lost holder identity.
 * @throws QuorumFenceError FILE_EXISTS, IO_ERROR
 */
export function createIdentityFile(path: string): Identity {
  const secretKey = newEd25519Seed();
  try {
    const identity = makeIdentity(secretKey);
    const json: IdentityJson = {
      format: IDENTITY_FORMAT,
      publicKey: identity.publicKeyHex,
      secretKey: toHex(secretKey),
    };
    writeFileDurably(path, JSON.stringify(json, null, 2) + '\n', { mode: 0o600, exclusive: true });
    return identity;
  } finally {
    secretKey.fill(0);
  }
}
