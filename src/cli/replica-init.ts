/**
 * `quorumfence replica init`: make this replica's node key (for the key
 * ceremony) in its data directory and print its member card; or, given the
 * cluster and its key, make a new replica's empty signing record.
 */
import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { refuseIrregularFile, writeFileDurably } from '../common/files.js';
import { loadClusterFile } from '../cluster/description.js';
import { loadReplicaKeyFile } from '../cluster/replica-key.js';
import { createSigningRecord } from '../replica/signing-record.js';
import {
  createNodeKeyFile,
  loadNodeKeyFile,
  memberCardJson,
  nodeKeyExists,
  NODE_KEY_FILE,
} from '../ceremony/node-key.js';
import { parseFlags, required } from '../command/args.js';

export const INIT_USAGE = `init --endpoint: make this replica's node key (Ed25519 for signing ceremony packets,
X25519 for receiving shares) in DIR/${NODE_KEY_FILE} (mode 0600) and print its member
card (public keys + endpoints, JSON) for "quorumfence dkg propose". ("dkg run"
then makes the replica's signing record in DIR with its key.)

  --data DIR                 the replica's data directory, created if missing     (required)
  --endpoint URL             where the replica will serve clients (into cluster.json) (required)
  --ceremony-endpoint URL    where it listens during the ceremony     (default: --endpoint)
  --card FILE                also write the card to FILE
  --if-missing               keep an existing node key and print its card (default: refuse)

init --cluster --key: make a NEW replica's empty signing record in DIR, for a
key that has signed nothing yet (a key "keygen" dealt without --data, say).
A replica never makes its own record: it refuses to start without one
(STORE_MISSING), since an empty record would sign again what it signed before.
So run this once, when the replica is new, never in a start script. Refused
when DIR holds a record already (FILE_EXISTS), and for a reshared membership
(membershipVersion above 0), whose new replicas get their record from
"quorumfence reshare inherit".

  --data DIR                 the signing record's directory ("replica run --data") (required)
  --cluster FILE             the cluster description                              (required)
  --key FILE                 this replica's key file                              (required)
`;

export async function initNode(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, {
    data: { type: 'string' },
    endpoint: { type: 'string' },
    'ceremony-endpoint': { type: 'string' },
    card: { type: 'string' },
    'if-missing': { type: 'boolean' },
    json: { type: 'boolean' },
    cluster: { type: 'string' },
    key: { type: 'string' },
  });
  if (values.cluster !== undefined || values.key !== undefined) return initRecord(values);
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

/**
 * `replica init --cluster --key`: the empty signing record of a new replica of a fresh key.
 * @throws QuorumFenceError INVALID_OPTION (node-key flags given too, or a reshared membership), FILE_EXISTS, and the
 *   loaders' errors
 */
async function initRecord(values: {
  data?: string;
  cluster?: string;
  key?: string;
  endpoint?: string;
  'ceremony-endpoint'?: string;
  card?: string;
  'if-missing'?: boolean;
}): Promise<number> {
  const misplaced = (['endpoint', 'ceremony-endpoint', 'card', 'if-missing'] as const).find(
    (flag) => values[flag] !== undefined,
  );
  if (misplaced)
    throw new QuorumFenceError(
      'INVALID_OPTION',
      `--${misplaced} is for the node key; "replica init --cluster --key" makes a signing record (run them separately)`,
    );
  const dataDir = resolve(required(values.data, 'data'));
  const cluster = loadClusterFile(resolve(required(values.cluster, 'cluster')));
  const key = loadReplicaKeyFile(resolve(required(values.key, 'key')), cluster);
  if (cluster.membershipVersion > 0)
    throw new QuorumFenceError(
      'INVALID_OPTION',
      `this cluster description is membership ${cluster.membershipVersion}, made by a reshare: its replicas must ` +
        `not start from an empty record (the old set's grants would be signed again); make it with ` +
        `"quorumfence reshare inherit --data ${dataDir} ..." from the old replicas' frozen exports`,
    );
  await createSigningRecord(dataDir, { clusterId: cluster.id, replicaIndex: key.index });
  process.stderr.write(
    `made the empty signing record of replica ${key.index} of cluster ${cluster.idHex.slice(0, 16)}… in ${dataDir}\n`,
  );
  return 0;
}
