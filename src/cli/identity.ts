/** `quorumfence identity new|show FILE`: make a client key, or print its public key. */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { createIdentityFile, loadIdentityFile } from '../client/identity.js';
import { parseFlags, type Command } from '../command/args.js';

const usage = `usage: quorumfence identity new FILE [--if-missing]
       quorumfence identity show FILE [--json]

new   makes a fresh Ed25519 client identity and writes it to FILE (mode 0600).
      Refuses to overwrite an existing file. Prints the public key.
      --if-missing: keep an existing identity in FILE (it must load) and print its
      public key, for deployments that run this at every start.
show  prints the public key of the identity in FILE.

The public key (64 hex characters) is the holder name in every grant this
identity obtains; replicas' access configs (--config) list it to give the
identity its resource prefixes.

options:
  --json   print one JSON object: { "file", "publicKey" } (new: also "created",
           false when --if-missing kept an existing file)
`;

export const command: Command = {
  summary: 'make a client identity key file, or show its public key',
  usage,
  async run(argv) {
    const { values, positionals } = parseFlags(
      argv,
      { json: { type: 'boolean' }, 'if-missing': { type: 'boolean' } },
      { min: 2, max: 2 },
    );
    const [sub, file] = positionals as [string, string];
    const path = resolve(file);
    let publicKey: string;
    /** With --if-missing, whether this run made the file (false: it kept the one there). */
    let created = sub === 'new';
    if (values['if-missing'] && sub !== 'new')
      throw new QuorumFenceError('INVALID_OPTION', '--if-missing goes with "identity new"');
    if (sub === 'new' && values['if-missing'] && existsSync(path)) {
      publicKey = loadIdentityFile(path).publicKeyHex;
      created = false;
    } else if (sub === 'new') {
      try {
        publicKey = createIdentityFile(path).publicKeyHex;
      } catch (error) {
        if (error instanceof QuorumFenceError && error.code === 'FILE_EXISTS') {
          throw new QuorumFenceError(
            'FILE_EXISTS',
            `${path} already exists; refusing to replace an identity (choose another FILE, or "identity show ${file}")`,
          );
        }
        throw error;
      }
    } else if (sub === 'show') {
      publicKey = loadIdentityFile(path).publicKeyHex;
    } else {
      throw new QuorumFenceError('INVALID_OPTION', `unknown subcommand "${sub}" (new, show)`);
    }
    if (values.json)
      process.stdout.write(JSON.stringify({ file: path, publicKey, ...(sub === 'new' ? { created } : {}) }) + '\n');
    else if (created) process.stdout.write(`wrote ${path} (secret, mode 0600)\npublic key ${publicKey}\n`);
    else if (sub === 'new') process.stdout.write(`kept ${path} (it exists; --if-missing)\npublic key ${publicKey}\n`);
    else process.stdout.write(`${publicKey}\n`);
    return 0;
  },
};
