/**
 * Randomness for key generation. Production uses the OS CSPRNG; known-answer
 * vectors use a seeded stream so a fixed seed reproduces a whole cluster.
 */
import { randomBytes as osRandomBytes } from 'node:crypto';
import { sha256 } from '@noble/hashes/sha2.js';
import { concatBytes, u64be } from '../common/bytes.js';

export type RandomSource = (length: number) => Uint8Array;

export const systemRandom: RandomSource = (length) => new Uint8Array(osRandomBytes(length));

/**
 * Deterministic bytes: SHA-256(tag ‖ seed ‖ counter) blocks. For test vectors
 * only: anyone who knows the seed knows every key made from it.
 */
export function seededRandom(seed: Uint8Array): RandomSource {
  const tag = new TextEncoder().encode('quorumfence/seeded-random/v1');
  let counter = 0n;
  let pool: Uint8Array = new Uint8Array(0);
  return (length) => {
    while (pool.length < length) {
      pool = concatBytes(pool, sha256(concatBytes(tag, seed, u64be(counter++))));
    }
    const out = pool.slice(0, length);
    pool = pool.slice(length);
    return out;
  };
}
