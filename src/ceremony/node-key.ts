/**
 * A replica's long-term node identity for the key ceremony: an Ed25519 key
 * that signs every ceremony packet, and an X25519 key that dealers encrypt
 * its shares to. Made once by `quorumfence replica init`, kept 0600 in the
 * replica's data directory, never sent anywhere. The member card is its
 * public half plus the replica's endpoints, what an operator hands to whoever
 * writes the proposal.
 *
 * Node key file (JSON, mode 0600, never overwritten):
 *   { "format": "quorumfence/node-key/v1", "signingKey": hex(32), "encryptionKey": hex(32) }
 * Member card (JSON, public):
 *   { "format": "quorumfence/member-card/v1", "nodeKey": hex(32), "encryptionKey": hex(32),
 *     "endpoint": ws-url, "ceremonyEndpoint": ws-url }
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { x25519 } from '@noble/curves/ed25519.js';
import { QuorumFenceError } from '../common/errors.js';
import { ed25519Signer, isUsableEd25519Key, newEd25519Seed } from '../common/ed25519.js';
import { fromHex, toHex } from '../common/bytes.js';
import { readJsonFile, writeFileDurably } from '../common/files.js';
import { checkEndpoint } from '../cluster/description.js';

export const NODE_KEY_FORMAT = 'quorumfence/node-key/v1';
export const MEMBER_CARD_FORMAT = 'quorumfence/member-card/v1';
/** The file name of the node key inside a replica's data directory. */
export const NODE_KEY_FILE = 'node.key';

export interface NodeKey {
  /** Ed25519 public key, 32 bytes: names the member in proposals and packets. */
  readonly nodeKey: Uint8Array;
  /** X25519 public key, 32 bytes: shares are encrypted to it. */
  readonly encryptionKey: Uint8Array;
  sign(message: Uint8Array): Uint8Array;
  /** X25519 with this member's secret; the secret never leaves this object. */
  sharedSecret(peerPublicKey: Uint8Array): Uint8Array;
}

export interface MemberCard {
  readonly nodeKey: Uint8Array;
  readonly encryptionKey: Uint8Array;
  /** Where the replica serves clients: goes into cluster.json. */
  readonly endpoint: string;
  /** Where the member listens during the ceremony. */
  readonly ceremonyEndpoint: string;
}

export interface MemberCardJson {
  format: typeof MEMBER_CARD_FORMAT;
  nodeKey: string;
  encryptionKey: string;
  endpoint: string;
  ceremonyEndpoint: string;
}

function makeNodeKey(signingSecret: Uint8Array, encryptionSecret: Uint8Array): NodeKey {
  const signer = ed25519Signer(signingSecret); // keeps its own copy of the seed
  const encryption = encryptionSecret.slice();
  return {
    nodeKey: signer.publicKey,
    encryptionKey: x25519.getPublicKey(encryption),
    sign: signer.sign,
    sharedSecret: (peer) => x25519.getSharedSecret(encryption, peer),
  };
}

/** A fresh node key from the OS CSPRNG, not written anywhere (tests and benchmarks). */
export function generateNodeKey(): NodeKey {
  return makeNodeKey(newEd25519Seed(), x25519.utils.randomSecretKey());
}

/**
 * Makes the node key in `dataDir/node.key` (0600), refusing to replace one.
 * @throws QuorumFenceError FILE_EXISTS, IO_ERROR
 */
export function createNodeKeyFile(dataDir: string): NodeKey {
  const signing = newEd25519Seed();
  const encryption = x25519.utils.randomSecretKey();
  try {
    writeFileDurably(
      join(dataDir, NODE_KEY_FILE),
      JSON.stringify({ format: NODE_KEY_FORMAT, signingKey: toHex(signing), encryptionKey: toHex(encryption) }) + '\n',
      { mode: 0o600, exclusive: true },
    );
    return makeNodeKey(signing, encryption);
  } finally {
    signing.fill(0);
    encryption.fill(0);
  }
}

export function nodeKeyExists(dataDir: string): boolean {
  return existsSync(join(dataDir, NODE_KEY_FILE));
}

/**
 * Reads `dataDir/node.key`.
 * @throws QuorumFenceError IO_ERROR, BAD_KEY_FILE, UNKNOWN_VERSION
 */
export function loadNodeKeyFile(dataDir: string): NodeKey {
  const path = join(dataDir, NODE_KEY_FILE);
  const json = readJsonFile(
    path,
    'node key',
    'BAD_KEY_FILE',
    `make one with "quorumfence replica init --data ${dataDir}"`,
  );
  if (typeof json !== 'object' || json === null)
    throw new QuorumFenceError('BAD_KEY_FILE', `node key ${path}: expected a JSON object`);
  const k = json as Record<string, unknown>;
  if (k.format !== NODE_KEY_FORMAT) {
    throw new QuorumFenceError(
      'UNKNOWN_VERSION',
      `node key ${path}: "format" expected "${NODE_KEY_FORMAT}", got ${JSON.stringify(k.format)}`,
    );
  }
  try {
    const signing = fromHex(k.signingKey, 32, 'signingKey');
    const encryption = fromHex(k.encryptionKey, 32, 'encryptionKey');
    const key = makeNodeKey(signing, encryption);
    signing.fill(0);
    encryption.fill(0);
    return key;
  } catch (error) {
    throw new QuorumFenceError('BAD_KEY_FILE', `node key ${path}: ${(error as Error).message}`, { path });
  }
}

export function memberCardJson(key: NodeKey, endpoint: string, ceremonyEndpoint = endpoint): MemberCardJson {
  return {
    format: MEMBER_CARD_FORMAT,
    nodeKey: toHex(key.nodeKey),
    encryptionKey: toHex(key.encryptionKey),
    endpoint: checkEndpoint(endpoint, 'endpoint'),
    ceremonyEndpoint: checkEndpoint(ceremonyEndpoint, 'ceremonyEndpoint'),
  };
}

/**
 * A node key read from a card or a proposal: one of small order or not canonically encoded would let anyone sign
 * that member's packets (common/ed25519.ts), and no honest key is either.
 * @throws QuorumFenceError BAD_ENCODING naming the field
 */
export function usableNodeKey(key: Uint8Array, field: string): Uint8Array {
  if (!isUsableEd25519Key(key))
    throw new QuorumFenceError(
      'BAD_ENCODING',
      `"${field}" is not a usable Ed25519 public key (small order or not canonical)`,
      {
        field,
      },
    );
  return key;
}

/**
 * Checks a member card (from a file or inside a proposal).
 * @throws QuorumFenceError BAD_PROPOSAL naming the field
 */
export function parseMemberCard(json: unknown, field: string): MemberCard {
  const fail = (message: string): never => {
    throw new QuorumFenceError('BAD_PROPOSAL', `${field}: ${message}`, { field });
  };
  if (typeof json !== 'object' || json === null || Array.isArray(json)) fail('expected a member card object');
  const c = json as Record<string, unknown>;
  if (c.format !== undefined && c.format !== MEMBER_CARD_FORMAT)
    fail(`"format" expected "${MEMBER_CARD_FORMAT}", got ${JSON.stringify(c.format)}`);
  try {
    return {
      nodeKey: usableNodeKey(fromHex(c.nodeKey, 32, 'nodeKey'), 'nodeKey'),
      encryptionKey: fromHex(c.encryptionKey, 32, 'encryptionKey'),
      endpoint: checkEndpoint(c.endpoint, 'endpoint'),
      ceremonyEndpoint: checkEndpoint(c.ceremonyEndpoint, 'ceremonyEndpoint'),
    };
  } catch (error) {
    return fail((error as Error).message);
  }
}
