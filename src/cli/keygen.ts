/** `quorumfence keygen`: deal a fresh cluster key and write the public description and one key file per replica. */
import { existsSync, mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { writeFileDurably } from '../common/files.js';
import { MAX_REPLICAS, MIN_REPLICAS } from '../common/limits.js';
import { checkEndpoint, describeDealtKey, localEndpoints } from '../cluster/description.js';
import { replicaKeyJson } from '../cluster/replica-key.js';
import { fromHex } from '../common/bytes.js';
import { createSigningRecord, signingRecordExists } from '../replica/signing-record.js';
import { systemRandom } from '../crypto/random.js';
import { dealKey } from '../crypto/threshold.js';
import { integerFlag, parseFlags, required, type Command } from '../command/args.js';

const usage = `usage: quorumfence keygen --replicas N --out DIR [--endpoints URL,URL,...] [--base-port PORT] [--host HOST] [--data ROOT]

Deals a fresh BLS12-381 threshold key for N = 3f+1 replicas (threshold t = 2f+1)
and writes:
  DIR/cluster.json       public cluster description (share it with clients and guards)
  DIR/replica-<i>.key    replica i's secret share, mode 0600 (give each to its replica only)
  ROOT/replica-<i>/      with --data: replica i's empty signing record ("replica --data ROOT/replica-<i>")
The group secret exists only in memory during the call and is never written.
Refuses to overwrite existing files. A replica never makes its own signing
record (an empty one would sign again what it signed before): a key just dealt
has signed nothing, so --data makes them here; without it, make each replica's
with "quorumfence replica init --data DIR --cluster FILE --key FILE" on its machine.

options:
  --replicas N        number of replicas: 4, 7, 10, ... 31 (N = 3f+1)      (required)
  --out DIR           output folder, created if missing                     (required)
  --endpoints LIST    comma-separated ws:// or wss:// URLs, one per replica
  --base-port PORT    without --endpoints: ws://HOST:PORT, PORT+1, ...      (default 7101)
  --host HOST         without --endpoints: the host for every replica       (default 127.0.0.1)
  --if-missing        do nothing (exit 0) when DIR already holds a complete key set
                      for N replicas; still refuses a partial one
  --data ROOT         also make each replica's empty signing record in ROOT/replica-<i>
                      (refused, before any key is dealt, when one exists there)
`;

export const command: Command = {
  summary: 'make a cluster key: cluster.json and one key file per replica',
  usage,
  async run(argv) {
    const { values } = parseFlags(argv, {
      replicas: { type: 'string' },
      out: { type: 'string' },
      endpoints: { type: 'string' },
      'base-port': { type: 'string' },
      host: { type: 'string' },
      'if-missing': { type: 'boolean' },
      data: { type: 'string' },
    });
    const n = integerFlag(required(values.replicas, 'replicas'), 'replicas', 0, MIN_REPLICAS, MAX_REPLICAS);
    if ((n - 1) % 3 !== 0) {
      throw new QuorumFenceError('INVALID_OPTION', `--replicas must be 3f+1 (4, 7, 10, ..., 31), got ${n}`);
    }
    const out = resolve(required(values.out, 'out'));
    const endpoints = values.endpoints
      ? values.endpoints.split(',').map((e, k) => {
          try {
            return checkEndpoint(e.trim(), `endpoints[${k}]`);
          } catch (error) {
            throw new QuorumFenceError('INVALID_OPTION', `--endpoints: ${(error as Error).message}`);
          }
        })
      : localEndpoints(
          n,
          integerFlag(values['base-port'], 'base-port', 7101, 1, 65535 - n),
          values.host ?? '127.0.0.1',
        );
    if (endpoints.length !== n)
      throw new QuorumFenceError('INVALID_OPTION', `--endpoints lists ${endpoints.length} URLs for ${n} replicas`);

    const files = [
      join(out, 'cluster.json'),
      ...Array.from({ length: n }, (_, k) => join(out, `replica-${k + 1}.key`)),
    ];
    const existing = files.filter((file) => existsSync(file));
    if (values['if-missing'] && existing.length === files.length) {
      process.stdout.write(`keys for ${n} replicas already in ${out}; nothing to do\n`);
      return 0;
    }
    if (existing.length > 0) {
      throw new QuorumFenceError(
        'FILE_EXISTS',
        `${existing[0]} already exists; refusing to overwrite keys (choose another --out)`,
      );
    }
    const stores = values.data
      ? Array.from({ length: n }, (_, k) => join(resolve(values.data!), `replica-${k + 1}`))
      : [];
    const taken = stores.find((dir) => signingRecordExists(dir));
    if (taken)
      throw new QuorumFenceError(
        'FILE_EXISTS',
        `${taken} already holds a signing record; a new key's replicas start from new ones (choose another --data)`,
      );
    mkdirSync(out, { recursive: true, mode: 0o700 });

    const f = (n - 1) / 3;
    const key = dealKey(n, 2 * f + 1, systemRandom);
    const description = describeDealtKey(key, endpoints);
    // Key files first, exclusively: if anything fails halfway, no cluster.json points at missing keys.
    for (const share of key.shares) {
      writeFileDurably(
        files[share.index]!,
        JSON.stringify(replicaKeyJson(description.clusterId, share), null, 2) + '\n',
        {
          mode: 0o600,
          exclusive: true,
        },
      );
    }
    writeFileDurably(files[0]!, JSON.stringify(description, null, 2) + '\n', { exclusive: true });
    // The key has signed nothing: the one moment its replicas' records are known to be new.
    const clusterId = fromHex(description.clusterId, 32, 'clusterId');
    for (const [k, dir] of stores.entries()) await createSigningRecord(dir, { clusterId, replicaIndex: k + 1 });

    process.stdout.write(
      `cluster ${description.clusterId}\n` +
        `  n = ${n}, f = ${f}, t = ${description.t}\n` +
        `  wrote ${files[0]} (public)\n` +
        key.shares
          .map((s) => `  wrote ${files[s.index]} (secret, mode 0600) for ${endpoints[s.index - 1]}\n`)
          .join('') +
        stores.map((dir, k) => `  made replica ${k + 1}'s signing record in ${dir}\n`).join(''),
    );
    return 0;
  },
};
