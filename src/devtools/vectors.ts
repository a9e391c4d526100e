/**
 * `quorumfence-dev vectors`: writes the token conformance vectors (src/testing/conformance.ts) from a fixed
 * seed, so the committed file can be regenerated and compared byte for byte.
 */
import { resolve } from 'node:path';
import { fromHex } from '../common/bytes.js';
import { writeFileDurably } from '../common/files.js';
import { loadBackend } from '../crypto/load.js';
import { makeConformanceVectors } from '../testing/conformance.js';
import { parseFlags, type Command } from '../command/args.js';

/** The seed of the committed vectors (test/vectors/tokens-v1.json). */
export const VECTOR_SEED = '71756f72756d66656e63652f746f6b656e2d766563746f72732f76312f736565';

const usage = `usage: quorumfence-dev vectors [--out FILE] [--seed HEX]

Writes the admission-token conformance vectors: one cluster dealt from a fixed
seed, valid tokens, and tokens broken in every way a verifier must tell apart,
each with its expected verdict and error code (format quorumfence/token-vectors/v1).
Each case is checked against this repository's verifier before it is written.

options:
  --out FILE   where to write (default: stdout)
  --seed HEX   32-byte seed of the cluster (default: the committed vectors' seed)
`;

export const command: Command = {
  summary: 'write the token conformance vectors (test/vectors)',
  usage,
  run(argv) {
    const { values } = parseFlags(argv, { out: { type: 'string' }, seed: { type: 'string' } });
    const seed = fromHex(values.seed ?? VECTOR_SEED, 32, 'seed');
    const vectors = makeConformanceVectors(seed, loadBackend());
    const text = JSON.stringify(vectors, null, 2) + '\n';
    if (values.out === undefined) process.stdout.write(text);
    else {
      writeFileDurably(resolve(values.out), text);
      process.stderr.write(`vectors: ${vectors.cases.length} cases written to ${values.out}\n`);
    }
    return Promise.resolve(0);
  },
};
