/** `quorumfence verify`: check an admission token against a cluster description, offline. */
import { readFileSync } from 'node:fs';
import { toHex } from '../common/bytes.js';
import { checkToken, tokenDigest } from '../token/admission-token.js';
import { parseFlags, type Command } from '../command/args.js';
import { loadClusterFile } from '../cluster/description.js';
import { CLUSTER_FLAG_USAGE, clusterPathOf } from './client-flags.js';

const usage = `usage: quorumfence verify TOKEN [--cluster FILE] [--json]

Checks an admission token (text form, or "-" to read it from stdin) against the
cluster's group public key, offline: no replica is contacted. Prints the
token's fields. Exit code 0 when valid, 1 when not.

options:
${CLUSTER_FLAG_USAGE}
  --json           print one JSON object instead of text
`;

export const command: Command = {
  summary: 'check an admission token offline and print its fields',
  usage,
  async run(argv) {
    const { values, positionals } = parseFlags(
      argv,
      { cluster: { type: 'string' }, json: { type: 'boolean' } },
      { min: 1, max: 1 },
    );
    const cluster = loadClusterFile(clusterPathOf(values));
    const text = positionals[0] === '-' ? readFileSync(0, 'utf8').trim() : positionals[0]!;
    const check = checkToken(text, cluster);
    const fields = check.ok
      ? {
          resource: check.token.grant.resource,
          epoch: check.token.grant.epoch.toString(),
          holder: toHex(check.token.grant.holder),
          clusterId: toHex(check.token.grant.clusterId),
          digest: toHex(tokenDigest(check.token)),
        }
      : undefined;
    if (values.json) {
      const result = check.ok
        ? { valid: true, ...fields }
        : {
            valid: false,
            reason: check.reason,
            ...('code' in check ? { code: check.code } : {}),
            message: check.message,
          };
      process.stdout.write(JSON.stringify(result) + '\n');
    } else if (fields) {
      process.stdout.write(
        `valid token\n  resource  ${fields.resource}\n  epoch     ${fields.epoch}\n  holder    ${fields.holder}\n  cluster   ${fields.clusterId}\n  digest    ${fields.digest}\n`,
      );
    } else if (!check.ok) {
      process.stdout.write(
        `invalid token: ${check.reason}${'code' in check ? ` (${check.code})` : ''}: ${check.message}\n`,
      );
    }
    return check.ok ? 0 : 1;
  },
};
