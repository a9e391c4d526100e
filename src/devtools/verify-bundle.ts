/**
 * Build step (`npm run build`, after tsc): the universal verifier (dist/src/verify) bundled into one file for
 * browsers, readable and minified, each with a declaration file beside it. The bundle exports exactly what
 * `quorumfence/verify` does, so its declarations re-export that entry point's.
 *   node dist/src/devtools/verify-bundle.js
 */
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

/** dist/, two levels above this compiled file (dist/src/devtools). */
const DIST = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const ENTRY = join(DIST, 'src', 'verify', 'index.js');
const DECLARATIONS = "export * from '../src/verify/index.js';\n";

for (const [file, minify] of [
  ['quorumfence-verify.js', false],
  ['quorumfence-verify.min.js', true],
] as const) {
  const outfile = join(DIST, 'verify', file);
  await build({
    entryPoints: [ENTRY],
    bundle: true,
    format: 'esm',
    platform: 'browser',
    minify,
    logLevel: 'warning',
    outfile,
  });
  writeFileSync(outfile.replace(/\.js$/, '.d.ts'), DECLARATIONS);
}
