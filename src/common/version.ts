/**
 * This package's version, from its package.json (found by walking up from this file, so it works from the
 * sources under test and from the built dist/ alike). Shown by a replica's /healthz and the operator console.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

function readPackageVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const path = join(dir, 'package.json');
    if (existsSync(path)) {
      try {
        const json = JSON.parse(readFileSync(path, 'utf8')) as { name?: unknown; version?: unknown };
        if (json.name === 'quorumfence' && typeof json.version === 'string') return json.version;
      } catch {
        // An unreadable package.json further down: keep walking up.
      }
    }
    const parent = dirname(dir);
    if (parent === dir) return 'unknown';
    dir = parent;
  }
}

export const PACKAGE_VERSION: string = readPackageVersion();
