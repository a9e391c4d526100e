/**
 * What `npm pack` produces installs and works: the tarball goes into an empty temporary project (its own
 * dependencies come from npm's cache, or the registry when the cache lacks their metadata), every entry point
 * of `exports` imports, and through the installed copy alone a local cluster is started, a token gathered
 * and verified by both the Node verifier and the universal one. Build first (`npm test` does).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  version: string;
  exports: Record<string, unknown>;
  bin: Record<string, string>;
};
const work = mkdtempSync(join(tmpdir(), 'qf-package-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const npm = (args: string[], cwd: string) =>
  execFileSync('npm', args, { cwd, encoding: 'utf8', timeout: 240_000, stdio: ['ignore', 'pipe', 'pipe'] });

describe('the published package', () => {
  it('packs, installs into an empty project, imports every entry point, gathers and verifies a token', () => {
    npm(['pack', '--silent', '--pack-destination', work], ROOT);
    const tarball = join(work, `quorumfence-${pkg.version}.tgz`);
    const app = join(work, 'app');
    execFileSync('mkdir', ['-p', app]);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
    npm(['install', tarball, '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts'], app);

    const entries = Object.keys(pkg.exports)
      .filter((key) => key !== './package.json')
      .map((key) => `quorumfence${key.slice(1)}`);
    writeFileSync(
      join(app, 'run.mjs'),
      `import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
const imported = {};
for (const entry of ${JSON.stringify(entries)}) imported[entry] = Object.keys(await import(entry)).length;
const { dealLocalCluster, startLocalCluster } = await import('quorumfence/cluster/launcher');
const { QuorumFenceClient, generateIdentity } = await import('quorumfence/client');
const { checkToken } = await import('quorumfence/token');
const { clusterToJson } = await import('quorumfence/cluster');
const { createTokenVerifier } = await import('quorumfence/verify');
const dir = mkdtempSync(join(tmpdir(), 'qf-installed-'));
const local = (dealLocalCluster(join(dir, 'keys')), await startLocalCluster({ dir: join(dir, 'keys'), dataRoot: join(dir, 'data') }));
try {
  const client = await QuorumFenceClient.connect(local.cluster, generateIdentity());
  const acquired = await client.acquire('installed/orders', { ttlMs: 5000 });
  if (!acquired.ok) throw new Error('acquire: ' + acquired.reason);
  const token = acquired.lease.tokenText;
  await acquired.lease.release();
  await client.close();
  const node = checkToken(token, local.cluster);
  const universal = createTokenVerifier(clusterToJson(local.cluster)).check(token);
  console.log(JSON.stringify({ imported, node: node.ok, universal: universal.ok, epoch: String(node.ok && node.token.grant.epoch) }));
} finally {
  await local.close();
  rmSync(dir, { recursive: true, force: true });
}
`,
    );
    const out = execFileSync(process.execPath, ['run.mjs'], { cwd: app, encoding: 'utf8', timeout: 120_000 });
    const result = JSON.parse(out.trim().split('\n').at(-1)!) as {
      imported: Record<string, number>;
      node: boolean;
      universal: boolean;
      epoch: string;
    };
    expect(Object.keys(result.imported).sort()).toEqual([...entries].sort());
    for (const [entry, names] of Object.entries(result.imported)) expect(names, entry).toBeGreaterThan(0);
    expect(result).toMatchObject({ node: true, universal: true, epoch: '1' });
    // The installed command runs from the package's bin.
    const help = execFileSync(join(app, 'node_modules', '.bin', 'quorumfence'), ['--help'], { encoding: 'utf8' });
    expect(help).toMatch(/^usage: quorumfence <command>/);
  }, 400_000);
});
