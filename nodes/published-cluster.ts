#!/usr/bin/env node
/**
 * The compose deployment's cluster description for clients outside its network:
 * `node dist/nodes/published-cluster.js --cluster FILE --endpoints URL,URL,...` prints FILE with each
 * replica's endpoint replaced, in index order, by where the host publishes it (docker-compose.yml's
 * `host-cluster` service runs it). The cluster id does not cover endpoints, so the same tokens verify; a key
 * ceremony's record is kept; an endorsement is dropped, as it signs the old endpoints.
 */
import { QuorumFenceError } from '../src/common/errors.js';
import { readJsonFile } from '../src/common/files.js';
import { parseCluster, withEndpoints } from '../src/cluster/description.js';
import { parseFlags, required } from '../src/command/args.js';

const USAGE = `usage: published-cluster --cluster FILE --endpoints URL,URL,...

Prints the cluster description FILE with its replicas at the given endpoints
(one ws:// or wss:// URL per replica, in index order), for clients that reach
the replicas through published ports.
`;

function run(argv: string[]): number {
  const { values } = parseFlags(argv, {
    cluster: { type: 'string' },
    endpoints: { type: 'string' },
    help: { type: 'boolean' },
  });
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const path = required(values.cluster, 'cluster');
  const endpoints = required(values.endpoints, 'endpoints').split(',');
  const raw = readJsonFile(path, 'cluster description', 'BAD_CLUSTER') as Record<string, unknown>;
  const cluster = parseCluster(raw);
  if (endpoints.length !== cluster.n)
    throw new QuorumFenceError(
      'INVALID_OPTION',
      `--endpoints lists ${endpoints.length} URLs for ${cluster.n} replicas`,
    );
  const moved = withEndpoints(cluster, endpoints);
  const { endorsement: _signedTheOldEndpoints, ...rest } = raw;
  const published = {
    ...rest,
    replicas: (raw.replicas as Record<string, unknown>[]).map((entry, k) => ({
      ...entry,
      endpoint: moved.replicas[k]!.endpoint,
    })),
  };
  // What is printed must load as this cluster: same id, its ceremony record still checking.
  if (parseCluster(published).idHex !== cluster.idHex)
    throw new QuorumFenceError('CLUSTER_MISMATCH', 'the published description does not keep the cluster id');
  process.stdout.write(JSON.stringify(published, null, 2) + '\n');
  return 0;
}

try {
  process.exitCode = run(process.argv.slice(2));
} catch (error) {
  if (!(error instanceof QuorumFenceError)) throw error;
  process.stderr.write(`published-cluster: ${error.message} (${error.code})\n`);
  process.exitCode = error.code === 'INVALID_OPTION' ? 2 : 1;
}
