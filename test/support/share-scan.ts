/**
 * Looks for a secret share in every file under a folder, in every encoding a
 * careless write could use: raw bytes, hex (both cases), base64, base64url,
 * decimal; both the Δ-scaled share the key file holds and the unscaled one.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { bytesToBigInt, bigIntToBytes } from '../../src/common/bytes.js';
import { delta, SCALAR_ORDER } from '../../src/crypto/threshold.js';

function encodings(scaledShare: Uint8Array, n: number): Buffer[] {
  const scaled = bytesToBigInt(scaledShare);
  const unscaled = (scaled * delta(n)) % SCALAR_ORDER;
  return [scaled, unscaled].flatMap((value) => {
    const raw = Buffer.from(bigIntToBytes(value, 32));
    const hex = raw.toString('hex');
    return [
      raw,
      Buffer.from(hex),
      Buffer.from(hex.toUpperCase()),
      Buffer.from(raw.toString('base64')),
      Buffer.from(raw.toString('base64url')),
      Buffer.from(value.toString(10)),
    ];
  });
}

export function filesUnder(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string, depth: number) => {
    if (depth > 20) return;
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      const stat = statSync(path);
      if (stat.isDirectory()) walk(path, depth + 1);
      else if (stat.isFile()) out.push(path);
    }
  };
  walk(root, 0);
  return out;
}

/** The files under `root`, outside `allowedDir`, that contain the share in some encoding. */
export function filesHoldingShare(root: string, allowedDir: string, scaledShare: Uint8Array, n: number): string[] {
  const needles = encodings(scaledShare, n);
  return filesUnder(root)
    .filter((path) => !path.startsWith(allowedDir + '/'))
    .filter((path) => {
      const content = readFileSync(path);
      return needles.some((needle) => content.includes(needle));
    });
}
