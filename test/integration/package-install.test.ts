/**
 * What `npm pack` produces installs and works as a consumer meets it. The tarball's contents are listed
 * (`npm pack --dry-run --json`): every entry point's files, the LICENSE, nothing from test/, the bench or the
 * development tools, no source maps. Then it goes into an empty project that denies the install scripts of
 * lmdb and msgpackr-extract (their prebuilt binaries need none; npm prints no warning), without pg: every
 * entry point imports and requires, `tsc --noEmit --strict` without skipLibCheck passes on a file importing
 * every entry point, the PostgreSQL guard says pg is missing, and through the installed copy alone a local
 * cluster is started and a token gathered and verified by both verifiers. Build first (`npm test` does).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
type ExportTarget = string | Readonly<Record<string, string>>;
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  version: string;
  exports: Record<string, ExportTarget>;
  bin: Record<string, string>;
  devDependencies: Record<string, string>;
};
const work = mkdtempSync(join(tmpdir(), 'qf-package-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const npm = (args: string[], cwd: string) =>
  execFileSync('npm', args, { cwd, encoding: 'utf8', timeout: 240_000, stdio: ['ignore', 'pipe', 'pipe'] });

/** Every entry point a consumer can name: `quorumfence`, `quorumfence/client`, ... */
const entries = Object.keys(pkg.exports)
  .filter((key) => key !== './package.json')
  .map((key) => `quorumfence${key.slice(1)}`);

describe('the published package', () => {
  it('holds every entry point, its types and the LICENSE; nothing from test/, the bench or the development tools; no source maps', () => {
    const [packed] = JSON.parse(npm(['pack', '--dry-run', '--json', '--ignore-scripts'], ROOT)) as [
      { files: { path: string }[] },
    ];
    const files = new Set(packed.files.map((f) => f.path));
    const targets = Object.values(pkg.exports).flatMap((target) =>
      typeof target === 'string' ? [target] : Object.values(target),
    );
    for (const target of [...targets, ...Object.values(pkg.bin)])
      expect(files.has(target.replace(/^\.\//, '')), target).toBe(true);
    for (const condition of Object.entries(pkg.exports).filter(([key]) => key !== './package.json'))
      expect(Object.keys(condition[1] as object), condition[0]).toEqual(['types', 'import', 'default']);
    expect(files.has('LICENSE')).toBe(true);
    expect(readFileSync(join(ROOT, 'LICENSE'), 'utf8')).toMatch(/^\s*Apache License\s+Version 2\.0, January 2004/);
    const unwanted = [...files].filter(
      (path) =>
        path.endsWith('.map') ||
        /^(test|src|bench-results|deploy|nodes)\//.test(path) ||
        /^dist\/(test|src\/bench|src\/devtools)\//.test(path) ||
        /^dist\/nodes\/(demo|quorumfence-dev)\./.test(path),
    );
    expect(unwanted).toEqual([]);
    // What the documented entry points need is there: the Byzantine replica and the testing tools.
    expect(files.has('dist/nodes/byzantine-replica.js')).toBe(true);
    expect(files.has('dist/src/testing/index.js')).toBe(true);
  });

  it('installs into an empty project without warnings, imports, requires and type-checks every entry point, gathers and verifies a token', () => {
    npm(['pack', '--silent', '--pack-destination', work], ROOT);
    const tarball = join(work, `quorumfence-${pkg.version}.tgz`);
    const app = join(work, 'app');
    mkdirSync(app);
    writeFileSync(
      join(app, 'package.json'),
      JSON.stringify({
        name: 'app',
        private: true,
        type: 'module',
        // As README.md ("Installing the package") advises: the prebuilt binaries need no install script.
        allowScripts: { lmdb: false, 'msgpackr-extract': false },
      }),
    );
    const installed = spawnSync(
      'npm',
      [
        'install',
        tarball,
        `typescript@${pkg.devDependencies.typescript}`,
        `@types/node@${pkg.devDependencies['@types/node']}`,
        '--prefer-offline',
        '--no-audit',
        '--no-fund',
      ],
      { cwd: app, encoding: 'utf8', timeout: 300_000 },
    );
    expect(installed.status, installed.stderr).toBe(0);
    expect(installed.stderr).not.toMatch(/install-scripts|allow-scripts|ERESOLVE|peer dep/i);
    // pg is an optional peer: not installed, and neither are its types.
    expect(existsSync(join(app, 'node_modules', 'pg'))).toBe(false);
    expect(existsSync(join(app, 'node_modules', '@types', 'pg'))).toBe(false);

    writeFileSync(
      join(app, 'check.ts'),
      entries.map((entry, k) => `import * as entry${k} from '${entry}';`).join('\n') +
        `\nexport const names: number = ${entries.map((_, k) => `Object.keys(entry${k}).length`).join(' + ')};\n`,
    );
    writeFileSync(
      join(app, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          noEmit: true,
          skipLibCheck: false,
          module: 'nodenext',
          moduleResolution: 'nodenext',
          target: 'es2022',
          types: ['node'],
        },
        files: ['check.ts'],
      }),
    );
    const typecheck = spawnSync(join(app, 'node_modules', '.bin', 'tsc'), ['-p', '.'], {
      cwd: app,
      encoding: 'utf8',
      timeout: 120_000,
    });
    expect(typecheck.status, typecheck.stdout + typecheck.stderr).toBe(0);

    writeFileSync(
      join(app, 'run.mjs'),
      `import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
const require = createRequire(import.meta.url);
const imported = {};
const required = {};
for (const entry of ${JSON.stringify(entries)}) {
  imported[entry] = Object.keys(await import(entry)).length;
  try {
    required[entry] = Object.keys(require(entry)).length;
  } catch (error) {
    required[entry] = error.code ?? String(error);
  }
}
const { dealLocalCluster, startLocalCluster } = await import('quorumfence/cluster/launcher');
const { QuorumFenceClient, generateIdentity } = await import('quorumfence/client');
const { checkToken } = await import('quorumfence/token');
const { clusterToJson } = await import('quorumfence/cluster');
const { createTokenVerifier } = await import('quorumfence/verify');
const { PostgresGuard } = await import('quorumfence/guard/postgres');
const dir = mkdtempSync(join(tmpdir(), 'qf-installed-'));
const local = (dealLocalCluster(join(dir, 'keys')), await startLocalCluster({ newStores: true, dir: join(dir, 'keys'), dataRoot: join(dir, 'data') }));
try {
  const postgres = await PostgresGuard.open({}, local.cluster).then(() => 'opened', (error) => error.code);
  const client = await QuorumFenceClient.connect(local.cluster, generateIdentity());
  const acquired = await client.acquire('installed/orders', { ttlMs: 5000 });
  if (!acquired.ok) throw new Error('acquire: ' + acquired.reason);
  const token = acquired.lease.tokenText;
  await acquired.lease.release();
  await client.close();
  const node = checkToken(token, local.cluster);
  const universal = createTokenVerifier(clusterToJson(local.cluster)).check(token);
  console.log(JSON.stringify({ imported, required, postgres, node: node.ok, universal: universal.ok, epoch: String(node.ok && node.token.grant.epoch) }));
} finally {
  await local.close();
  rmSync(dir, { recursive: true, force: true });
}
`,
    );
    const out = execFileSync(process.execPath, ['run.mjs'], { cwd: app, encoding: 'utf8', timeout: 120_000 });
    const result = JSON.parse(out.trim().split('\n').at(-1)!) as {
      imported: Record<string, number>;
      required: Record<string, number | string>;
      postgres: string;
      node: boolean;
      universal: boolean;
      epoch: string;
    };
    expect(Object.keys(result.imported).sort()).toEqual([...entries].sort());
    for (const [entry, names] of Object.entries(result.imported)) expect(names, entry).toBeGreaterThan(0);
    // require() of an ES module works where node loads them synchronously (20.19+, 22.12+): every entry point.
    if (process.features.require_module)
      for (const [entry, names] of Object.entries(result.required)) expect(names, entry).toBe(result.imported[entry]);
    expect(result).toMatchObject({ postgres: 'DEPENDENCY_MISSING', node: true, universal: true, epoch: '1' });
    // The installed command runs from the package's bin; the development tools' is not in the package.
    const help = execFileSync(join(app, 'node_modules', '.bin', 'quorumfence'), ['--help'], { encoding: 'utf8' });
    expect(help).toMatch(/^usage: quorumfence <command>/);
    expect(existsSync(join(app, 'node_modules', '.bin', 'quorumfence-dev'))).toBe(false);
  }, 600_000);
});
