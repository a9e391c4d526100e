/**
 * The universal verifier where the native binding and Node are not: the bundle `npm run build` makes
 * (dist/verify/quorumfence-verify.js) loaded by a real headless Chromium from a loopback page verifies a
 * token a local cluster of replica processes issued, refuses a tampered one, and reaches every verdict of the
 * conformance vectors; and Node runs the same bundle from a folder with no node_modules at all.
 *
 * Needs Debian's chromium (.ci/run installs it); without it the test is skipped, saying so
 * in its name, unless CI's QUORUMFENCE_TEST_REQUIRE_SYSTEM=1 (test/support/system-tools.ts).
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium } from '../support/chromium.js';
import { lacks, needs } from '../support/system-tools.js';
import { QuorumFenceClient, generateIdentity } from '../../src/client/index.js';
import { clusterToJson } from '../../src/cluster/description.js';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import type { ConformanceVectors } from '../../src/testing/conformance.js';

const BUNDLE = fileURLToPath(new URL('../../dist/verify/quorumfence-verify.js', import.meta.url));
/** The minified bundle, `quorumfence/verify/bundle.min`: held to the same vectors. */
const MINIFIED = fileURLToPath(new URL('../../dist/verify/quorumfence-verify.min.js', import.meta.url));
const vectors = JSON.parse(
  readFileSync(new URL('../vectors/tokens-v1.json', import.meta.url), 'utf8'),
) as ConformanceVectors;

const root = mkdtempSync(join(tmpdir(), 'qf-verify-browser-'));
let server: Server;
let base: string;
let browser: Browser;
let cluster: LocalCluster;
let issued: { token: string; pinned: { clusterId: string; groupPublicKey: string } };

beforeAll(async () => {
  if (lacks('chromium')) return; // its tests are skipped: nothing to set up
  const html = '<!doctype html><meta charset="utf-8"><title>quorumfence verify</title>';
  server = createServer((req, res) => {
    if (req.url === '/quorumfence-verify.js' || req.url === '/quorumfence-verify.min.js') {
      res.writeHead(200, { 'content-type': 'text/javascript' });
      res.end(readFileSync(req.url.endsWith('.min.js') ? MINIFIED : BUNDLE));
    } else {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(html);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;

  dealLocalCluster(join(root, 'keys'));
  cluster = await startLocalCluster({ newStores: true, dir: join(root, 'keys'), dataRoot: join(root, 'data') });
  const client = await QuorumFenceClient.connect(cluster.cluster, generateIdentity());
  try {
    const acquired = await client.acquire('browser/orders', { ttlMs: 5_000 });
    if (!acquired.ok) throw new Error(`acquire failed: ${acquired.reason}`);
    const json = clusterToJson(cluster.cluster);
    issued = {
      token: acquired.lease.tokenText,
      pinned: { clusterId: json.clusterId, groupPublicKey: json.groupPublicKey },
    };
    await acquired.lease.release();
  } finally {
    await client.close();
  }
  browser = await launchChromium(root);
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await cluster?.close();
  await new Promise((resolve) => server?.close(resolve));
  rmSync(root, { recursive: true, force: true });
});

/** Runs checks in the page: each [pinned cluster, token] gives a verdict in the vectors' form. */
async function checkInBrowser(
  checks: readonly { pinned: { clusterId: string; groupPublicKey: string }; token: string }[],
  bundle = '/quorumfence-verify.js',
): Promise<unknown[]> {
  const page = await browser.newPage();
  try {
    await page.goto(base + '/');
    // The page script is a string so the test runner's module transform never rewrites its import().
    const script = `(async (list) => {
      const { createTokenVerifier } = await import(${JSON.stringify(bundle)});
      return list.map(({ pinned, token }) => {
        const result = createTokenVerifier(pinned).check(token);
        if (result.ok) return { ok: true };
        return result.reason === 'malformed'
          ? { ok: false, reason: 'malformed', code: result.code }
          : { ok: false, reason: result.reason };
      });
    })(${JSON.stringify(checks)})`;
    return (await page.evaluate(script)) as unknown[];
  } finally {
    await page.close();
  }
}

describe.skipIf(lacks('chromium'))(`the universal verifier in a browser ${needs('chromium')}`, () => {
  it('verifies a token the local cluster issued and refuses it tampered, in Chromium', async () => {
    const tampered = issued.token.slice(0, 60) + (issued.token[60] === 'A' ? 'B' : 'A') + issued.token.slice(61);
    const results = await checkInBrowser([
      { pinned: issued.pinned, token: issued.token },
      { pinned: issued.pinned, token: tampered },
    ]);
    expect(results[0]).toEqual({ ok: true });
    expect(results[1]).toMatchObject({ ok: false });
    expect(results[1]).not.toEqual({ ok: true });
  }, 60_000);

  it.each(['/quorumfence-verify.js', '/quorumfence-verify.min.js'])(
    'reaches every verdict of the conformance vectors in Chromium (%s)',
    async (bundle) => {
      expect(statSync(bundle.endsWith('.min.js') ? MINIFIED : BUNDLE).size).toBeGreaterThan(0);
      const checks = vectors.cases.map((c) => ({ pinned: vectors.cluster, token: c.token }));
      const results = await checkInBrowser(checks, bundle);
      vectors.cases.forEach((c, k) => expect(results[k], c.name).toEqual(c.expected));
    },
    60_000,
  );

  it('the minified bundle is smaller than the readable one', () => {
    expect(statSync(MINIFIED).size).toBeLessThan(statSync(BUNDLE).size * 0.7);
  });

  it('runs in Node from a folder with no node_modules (no native binding to load)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'qf-verify-bare-'));
    try {
      copyFileSync(BUNDLE, join(dir, 'quorumfence-verify.mjs'));
      writeFileSync(join(dir, 'vectors.json'), JSON.stringify(vectors));
      writeFileSync(
        join(dir, 'run.mjs'),
        `import { readFileSync } from 'node:fs';
import { createTokenVerifier } from './quorumfence-verify.mjs';
const v = JSON.parse(readFileSync(new URL('./vectors.json', import.meta.url), 'utf8'));
const verifier = createTokenVerifier(v.cluster);
let wrong = 0;
for (const c of v.cases) {
  const r = verifier.check(c.token);
  const got = r.ok ? { ok: true } : r.reason === 'malformed' ? { ok: false, reason: 'malformed', code: r.code } : { ok: false, reason: r.reason };
  if (JSON.stringify(got) !== JSON.stringify(c.expected)) { wrong++; console.error(c.name, JSON.stringify(got)); }
}
console.log(JSON.stringify({ cases: v.cases.length, wrong }));
`,
      );
      const out = execFileSync(process.execPath, [join(dir, 'run.mjs')], {
        cwd: dir,
        encoding: 'utf8',
        timeout: 60_000,
      });
      expect(JSON.parse(out)).toEqual({ cases: vectors.cases.length, wrong: 0 });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
