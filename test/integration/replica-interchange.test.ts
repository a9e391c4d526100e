/**
 * `quorumfence replica export` / `import` as commands on real stores: the
 * documented format, raise-only imports, and refusals that change nothing.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toHex } from '../../src/common/bytes.js';
import { dealLocalCluster, startLocalCluster } from '../../src/cluster/launcher.js';
import { grantDigest } from '../../src/token/grant.js';
import { loadClusterFile } from '../../src/cluster/description.js';
import { SigningRecord } from '../../src/replica/signing-record.js';
import { exportInterchange } from '../../src/replica/interchange.js';
import { newHolder, outcomeOf, RawClient } from '../support/raw-client.js';

const cli = join(process.cwd(), 'dist/nodes/quorumfence.js');
let root: string;
let keys: string;
let dataRoot: string;

function run(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, [cli, 'replica', ...args], { encoding: 'utf8', timeout: 30_000 });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** The store's content read in-process (the export command itself is tested above; this keeps the loop fast). */
async function contents(dir: string): Promise<string> {
  const store = SigningRecord.open(dir, undefined, { readOnly: true, probe: false });
  try {
    return JSON.stringify(exportInterchange(store));
  } finally {
    await store.close();
  }
}

interface Exported {
  format: string;
  clusterId: string;
  replica: number;
  floor: string;
  entries: { resource: string; epoch: string; holder: string; grantDigest: string }[];
}

const alice = newHolder();

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'qf-replica-interchange-'));
  keys = join(root, 'keys');
  dataRoot = join(root, 'data');
  dealLocalCluster(keys);
  const local = await startLocalCluster({ newStores: true, dir: keys, indices: [1], dataRoot });
  const client = await RawClient.open(local.replica(1).url, alice);
  for (const [resource, epoch] of [
    ['b', 4n],
    ['a', 2n],
    ['é', 7n],
    ['z', 1n],
  ] as const) {
    expect(outcomeOf(await client.acquire(resource, epoch)).status).toBe('granted');
  }
  await client.close();
  await local.close();
});

afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

describe('signing record interchange', () => {
  it('exports every watermark in resource order, in the documented format', () => {
    const out = run('export', '--data', join(dataRoot, 'replica-1'));
    expect(out.status, out.stderr).toBe(0);
    const doc = JSON.parse(out.stdout) as Exported;
    const cluster = loadClusterFile(join(keys, 'cluster.json'));
    expect(doc.format).toBe('quorumfence/signing-record/v2');
    expect(doc.floor).toBe('0');
    expect(doc.clusterId).toBe(cluster.idHex);
    expect(doc.replica).toBe(1);
    expect(doc.entries.map((e) => [e.resource, e.epoch])).toEqual([
      ['a', '2'],
      ['b', '4'],
      ['z', '1'],
      ['é', '7'],
    ]);
    for (const e of doc.entries) {
      expect(e.holder).toBe(toHex(alice.publicKey));
      expect(e.grantDigest).toBe(
        toHex(
          grantDigest({ clusterId: cluster.id, resource: e.resource, epoch: BigInt(e.epoch), holder: alice.publicKey }),
        ),
      );
    }
  });

  it('imports into an empty store, then only ever raises watermarks', () => {
    const file = join(root, 'export.json');
    expect(run('export', '--data', join(dataRoot, 'replica-1'), '--out', file).status).toBe(0);
    const target = join(root, 'restored');
    const first = run('import', '--data', target, '--in', file, '--cluster', join(keys, 'cluster.json'));
    expect(first.status, first.stderr).toBe(0);
    expect(first.stdout).toContain('4 watermark(s) raised');
    const restored = JSON.parse(run('export', '--data', target).stdout) as Exported;
    expect(restored).toEqual(JSON.parse(readFileSync(file, 'utf8')));

    // A file with lower epochs for some resources and a higher one for another.
    const cluster = loadClusterFile(join(keys, 'cluster.json'));
    const bob = newHolder().publicKey;
    const entry = (resource: string, epoch: bigint, holder: Uint8Array) => ({
      resource,
      epoch: epoch.toString(),
      holder: toHex(holder),
      grantDigest: toHex(grantDigest({ clusterId: cluster.id, resource, epoch, holder })),
    });
    const mixed = join(root, 'mixed.json');
    writeFileSync(
      mixed,
      JSON.stringify({ ...restored, entries: [entry('a', 1n, bob), entry('b', 9n, bob), entry('new', 3n, bob)] }),
    );
    const second = run('import', '--data', target, '--in', mixed, '--cluster', join(keys, 'cluster.json'));
    expect(second.status, second.stderr).toBe(0);
    const after = JSON.parse(run('export', '--data', target).stdout) as Exported;
    const byResource = Object.fromEntries(after.entries.map((e) => [e.resource, e]));
    expect(byResource.a).toMatchObject({ epoch: '2', holder: toHex(alice.publicKey) });
    expect(byResource.b).toMatchObject({ epoch: '9', holder: toHex(bob) });
    expect(byResource.new).toMatchObject({ epoch: '3', holder: toHex(bob) });
  });

  it('refuses, changing nothing, a conflict at an equal epoch, another cluster, another replica, a wrong digest, or disorder', async () => {
    const file = join(root, 'base.json');
    expect(run('export', '--data', join(dataRoot, 'replica-1'), '--out', file).status).toBe(0);
    const base = JSON.parse(readFileSync(file, 'utf8')) as Exported;
    const target = join(root, 'guarded');
    expect(run('import', '--data', target, '--in', file, '--cluster', join(keys, 'cluster.json')).status).toBe(0);
    const before = await contents(target);

    const cluster = loadClusterFile(join(keys, 'cluster.json'));
    const bob = newHolder().publicKey;
    const conflict = {
      resource: 'b',
      epoch: '4',
      holder: toHex(bob),
      grantDigest: toHex(grantDigest({ clusterId: cluster.id, resource: 'b', epoch: 4n, holder: bob })),
    };
    const raise = {
      resource: 'a',
      epoch: '50',
      holder: toHex(bob),
      grantDigest: toHex(grantDigest({ clusterId: cluster.id, resource: 'a', epoch: 50n, holder: bob })),
    };
    const otherCluster = loadClusterFile(
      join(
        (() => {
          const dir = join(root, 'other-keys');
          dealLocalCluster(dir);
          return dir;
        })(),
        'cluster.json',
      ),
    );
    const cases: [string, unknown, string][] = [
      ['conflict', { ...base, entries: [raise, conflict] }, 'BAD_INTERCHANGE'],
      ['other cluster', { ...base, clusterId: otherCluster.idHex }, 'CLUSTER_MISMATCH'],
      ['other replica', { ...base, replica: 2 }, 'CLUSTER_MISMATCH'],
      ['wrong digest', { ...base, entries: [{ ...raise, grantDigest: conflict.grantDigest }] }, 'BAD_INTERCHANGE'],
      ['disorder', { ...base, entries: [...base.entries].reverse() }, 'BAD_INTERCHANGE'],
      ['format', { ...base, format: 'quorumfence/signing-record/v0' }, 'UNKNOWN_VERSION'],
      ['epoch as number', { ...base, entries: [{ ...raise, epoch: 50 }] }, 'BAD_INTERCHANGE'],
    ];
    for (const [name, doc, code] of cases) {
      const path = join(root, `bad-${name.replace(/ /g, '-')}.json`);
      writeFileSync(path, JSON.stringify(doc));
      const result = run('import', '--data', target, '--in', path, '--cluster', join(keys, 'cluster.json'));
      expect(result.status, name).toBe(1);
      expect(result.stderr.trim().split('\n'), name).toHaveLength(1);
      expect(result.stderr, name).toContain(`(${code})`);
      expect(await contents(target), name).toBe(before);
    }
  });

  it('export: a --data without a store is INVALID_OPTION naming it; an existing --out is never replaced (issue 47, item 7)', () => {
    for (const [mistyped, why] of [
      [join(dataRoot, 'replica-l'), 'no such directory'],
      [root, 'no data.mdb there'],
    ] as const) {
      const result = run('export', '--data', mistyped);
      expect(result.status, mistyped).toBe(2);
      expect(result.stdout).toBe('');
      expect(result.stderr).toContain(`--data ${mistyped} holds no signing record (${why})`);
      expect(result.stderr.trim()).toMatch(/\(INVALID_OPTION\)$/);
    }
    // Stopped replica: no note on stderr.
    const file = join(root, 'kept-export.json');
    const first = run('export', '--data', join(dataRoot, 'replica-1'), '--out', file);
    expect(first.status, first.stderr).toBe(0);
    expect(first.stderr).toBe('');
    writeFileSync(file, 'an earlier export\n');
    const again = run('export', '--data', join(dataRoot, 'replica-1'), '--out', file);
    expect(again.status).toBe(1);
    expect(again.stderr).toContain('already exists; refusing to replace it');
    expect(again.stderr.trim()).toMatch(/\(FILE_EXISTS\)$/);
    expect(readFileSync(file, 'utf8')).toBe('an earlier export\n');
  });

  it('refuses to import into a store a running replica holds (STORE_LOCKED)', async () => {
    const file = join(root, 'locked.json');
    expect(run('export', '--data', join(dataRoot, 'replica-1'), '--out', file).status).toBe(0);
    const local = await startLocalCluster({ newStores: true, dir: keys, indices: [1], dataRoot });
    try {
      // Export works beside the running replica (read-only), and says the record may move on after it; import does not.
      const beside = run('export', '--data', join(dataRoot, 'replica-1'));
      expect(beside.status).toBe(0);
      expect(beside.stderr).toMatch(
        /^note: replica process \d+ runs on .*replica-1 and is not frozen: this export is its record as of now, and grants it signs later are not in it/,
      );
      const result = run(
        'import',
        '--data',
        join(dataRoot, 'replica-1'),
        '--in',
        file,
        '--cluster',
        join(keys, 'cluster.json'),
      );
      expect(result.status).toBe(1);
      expect(result.stderr).toContain('(STORE_LOCKED)');
    } finally {
      await local.close();
    }
  });
});
