/**
 * `quorumfence replica init`: make this replica's node key (for the key
 * ceremony) in its data directory and print its member card.
 */
import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { refuseIrregularFile, writeFileDurably } from '../common/files.js';
import {
  createNodeKeyFile,
  loadNodeKeyFile,
  memberCardJson,
  nodeKeyExists,
  NODE_KEY_FILE,
} from '../ceremony/node-key.js';
import { parseFlags, required } from '../command/args.js';

export const INIT_USAGE = `init: make this replica's node key (Ed25519 for signing ceremony packets,
X25519 for receiving shares) in DIR/${NODE_KEY_FILE} (mode 0600) and print its member
card (public keys + endpoints, JSON) for "quorumfence dkg propose".

  --data DIR                 the replica's data directory, created if missing     (required)
  --endpoint URL             where the replica will serve clients (into cluster.json) (required)
  --ceremony-endpoint URL    where it listens during the ceremony     (default: --endpoint)
  --card FILE                also write the card to FILE
  --if-missing               keep an existing node key and print its card (default: refuse)
`;

export function initNode(argv: string[]): number {
  const { values } = parseFlags(argv, {
    data: { type: 'string' },
    endpoint: { type: 'string' },
    'ceremony-endpoint': { type: 'string' },
    card: { type: 'string' },
    'if-missing': { type: 'boolean' },
    json: { type: 'boolean' },
  });
  const dataDir = resolve(required(values.data, 'data'));
  const endpoint = required(values.endpoint, 'endpoint');
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const existing = nodeKeyExists(dataDir);
  if (existing && !values['if-missing']) {
    throw new QuorumFenceError(
      'FILE_EXISTS',
      `${resolve(dataDir, NODE_KEY_FILE)} already exists; refusing to replace a node key (add --if-missing to print its card)`,
    );
  }
  // Before a node key is made: a card path that is a link (to replica.key, say) is refused with nothing written.
  if (values.card) refuseIrregularFile(resolve(values.card));
  const key = existing ? loadNodeKeyFile(dataDir) : createNodeKeyFile(dataDir);
  let card;
  try {
    card = memberCardJson(key, endpoint, values['ceremony-endpoint'] ?? endpoint);
  } catch (error) {
    throw new QuorumFenceError('INVALID_OPTION', (error as Error).message);
  }
  const text = JSON.stringify(card, null, 2) + '\n';
  if (values.card) {
    mkdirSync(dirname(resolve(values.card)), { recursive: true });
    writeFileDurably(resolve(values.card), text);
  }
  if (!values.json && !existing) process.stderr.write(`wrote ${resolve(dataDir, NODE_KEY_FILE)} (secret, mode 0600)\n`);
  process.stdout.write(values.json ? JSON.stringify(card) + '\n' : text);
  return 0;
}
