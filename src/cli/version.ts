/** `quorumfence version`: this package's version, node's, and the BLS backend this machine loads. */
import { PACKAGE_VERSION } from '../common/version.js';
import { loadBackend } from '../crypto/load.js';
import { parseFlags, type Command } from '../command/args.js';

const usage = `usage: quorumfence version [--json]

Prints the quorumfence version, the Node.js version and platform, and the BLS
backend this machine loads (blst, the native one, or noble, the pure-JavaScript
reference; $QUORUMFENCE_BLS_BACKEND forces one).

options:
  --json   print one JSON object: { "quorumfence", "node", "platform", "backend" }
`;

export const command: Command = {
  summary: 'print the version, the Node.js version and the BLS backend',
  usage,
  async run(argv) {
    const { values } = parseFlags(argv, { json: { type: 'boolean' } });
    const fields = {
      quorumfence: PACKAGE_VERSION,
      node: process.versions.node,
      platform: `${process.platform}-${process.arch}`,
      backend: loadBackend().name,
    };
    process.stdout.write(
      values.json
        ? JSON.stringify(fields) + '\n'
        : `quorumfence ${fields.quorumfence}\nnode        ${fields.node} (${fields.platform})\nbackend     ${fields.backend}\n`,
    );
    return 0;
  },
};
