/**
 * Issue 43, finding 5: a replica signed from a store nobody created. After `reshare inherit` refused its inputs,
 * starting the new replicas anyway on the (missing) data folders created empty stores silently, and they
 * re-granted epochs the old set had granted; so did a mistyped --data, or an empty volume restored on f+1
 * replicas. Now a replica never creates its record (STORE_MISSING, naming the ways one is made), and only the
 * commands that know a replica is new make one: `replica init --cluster --key`, `keygen --data`, `dkg run`,
 * `reshare inherit` (and `replica import`, which moves a record). Real replica processes and the real CLI.
 */
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { isQuorumFenceError } from '../../src/common/errors.js';
import { SigningRecord } from '../../src/replica/signing-record.js';
import { runCli } from '../support/cli.js';
import { newHolder, outcomeOf, RawClient } from '../support/raw-client.js';

const root = mkdtempSync(join(tmpdir(), 'qf-finding43-5-'));
const keys = join(root, 'keys');
const dataRoot = join(root, 'data');
let local: LocalCluster;

beforeAll(async () => {
  dealLocalCluster(keys);
  local = await startLocalCluster({ newStores: true, dir: keys, dataRoot });
}, 60_000);

afterAll(async () => {
  await local?.close();
  rmSync(root, { recursive: true, force: true });
});

const cli = (args: string[]) => runCli(args, { timeoutMs: 60_000 });

/** Why starting `replica` failed: the launcher's error carries its stderr. */
async function startFailure(index: number): Promise<string> {
  try {
    await local.replica(index).start();
  } catch (error) {
    if (!isQuorumFenceError(error)) throw error;
    return error.message;
  }
  await local.replica(index).stop();
  throw new Error(`replica ${index} started`);
}

describe('finding 43/5: no replica signs from a store nobody made', { timeout: 180_000 }, () => {
  it('f+1 replicas whose volumes come back empty refuse to start (STORE_MISSING, naming the ways a record is made) and make nothing', async () => {
    const alice = newHolder();
    for (const index of [1, 2, 3, 4]) {
      const client = await RawClient.open(local.replica(index).url, alice);
      expect(outcomeOf(await client.acquire('orders', 7n, 200)).status).toBe('granted');
      await client.close();
    }
    for (const index of [3, 4]) {
      await local.replica(index).stop();
      // The empty volume: the directory is there (a mount point), its files are not.
      rmSync(local.replica(index).dataDir, { recursive: true, force: true });
      mkdirSync(local.replica(index).dataDir);
    }
    for (const index of [3, 4]) {
      const why = await startFailure(index);
      expect(why).toMatch(/\(?STORE_MISSING\)?|no signing record in/);
      expect(why).toMatch(/replica init.*reshare inherit/s);
      expect(existsSync(join(local.replica(index).dataDir, 'data.mdb'))).toBe(false);
    }
    // Before the fix both started from empty records: epoch 7 of "orders" was signable again, for anyone (two of
    // the three partials a second token needs; a Byzantine replica gives the third).
  });

  it('after inherit refuses its inputs, the new replica does not start on the missing folder; replica init refuses a reshared membership', async () => {
    // A membership 1 of the same key (as a reshare would make), and replica 1's export frozen beside it.
    const gen1 = join(root, 'gen1');
    mkdirSync(gen1);
    const json = JSON.parse(readFileSync(join(keys, 'cluster.json'), 'utf8')) as Record<string, unknown>;
    writeFileSync(join(gen1, 'cluster.json'), JSON.stringify({ ...json, membershipVersion: 1 }));
    copyFileSync(join(keys, 'replica-1.key'), join(gen1, 'replica-1.key'));
    await local.replica(1).stop();
    const frozen = join(root, 'frozen-1.json');
    const freeze = await cli([
      'reshare',
      'freeze',
      '--data',
      local.replica(1).dataDir,
      '--key',
      join(keys, 'replica-1.key'),
      '--cluster',
      join(keys, 'cluster.json'),
      '--out',
      frozen,
    ]);
    expect(freeze.code, freeze.stderr).toBe(0);
    const newData = join(root, 'gen1-data', 'replica-1');
    const inherit = await cli([
      'reshare',
      'inherit',
      '--data',
      newData,
      '--key',
      join(gen1, 'replica-1.key'),
      '--cluster',
      join(gen1, 'cluster.json'),
      '--old-cluster',
      join(keys, 'cluster.json'),
      '--in',
      frozen,
    ]);
    expect(inherit.stderr).toMatch(/\(RESHARE_REFUSED\)/);
    expect(existsSync(newData)).toBe(false);
    // Started anyway on the folder inherit never made: refused, nothing made.
    const gen1Cluster = await startLocalCluster({ dir: gen1, indices: [1], dataRoot: join(root, 'gen1-data') }).then(
      async (started) => {
        await started.close();
        return 'started';
      },
      (error: unknown) => (error as Error).message,
    );
    expect(gen1Cluster).toMatch(/STORE_MISSING/);
    expect(existsSync(join(newData, 'data.mdb'))).toBe(false);
    // Nor does `replica init` make a reshared member's record: inherit does.
    const init = await cli([
      'replica',
      'init',
      '--data',
      newData,
      '--cluster',
      join(gen1, 'cluster.json'),
      '--key',
      join(gen1, 'replica-1.key'),
    ]);
    expect([init.code, init.stderr]).toEqual([
      2,
      expect.stringMatching(/membership 1.*reshare inherit.*\(INVALID_OPTION\)/s),
    ]);
    expect(existsSync(join(newData, 'data.mdb'))).toBe(false);
  });

  it('replica init --cluster --key makes a new replica’s record once; a second time, or over a record, is refused (FILE_EXISTS)', async () => {
    const dir = join(root, 'init-once');
    const args = ['replica', 'init', '--data', dir, '--cluster', join(keys, 'cluster.json')];
    const made = await cli([...args, '--key', join(keys, 'replica-2.key')]);
    expect(made.code, made.stderr).toBe(0);
    const store = SigningRecord.open(dir, undefined, { readOnly: true, probe: false });
    expect(store.identity.replicaIndex).toBe(2);
    expect(store.size).toBe(0);
    await store.close();
    const again = await cli([...args, '--key', join(keys, 'replica-2.key')]);
    expect([again.code, again.stderr]).toEqual([
      1,
      expect.stringMatching(/already holds a signing record.*\(FILE_EXISTS\)/),
    ]);
    const mixed = await cli([...args, '--key', join(keys, 'replica-2.key'), '--endpoint', 'ws://127.0.0.1:7102']);
    expect([mixed.code, mixed.stderr]).toEqual([
      2,
      expect.stringMatching(/--endpoint is for the node key.*\(INVALID_OPTION\)/),
    ]);
  });

  it('keygen --data makes every replica’s record, and refuses before dealing a key when one is already there', async () => {
    const out = join(root, 'keygen-keys');
    const stores = join(root, 'keygen-data');
    const made = await cli(['keygen', '--replicas', '4', '--out', out, '--data', stores]);
    expect(made.code, made.stderr).toBe(0);
    for (let i = 1; i <= 4; i++) {
      const store = SigningRecord.open(join(stores, `replica-${i}`), undefined, { readOnly: true, probe: false });
      expect(store.identity.replicaIndex).toBe(i);
      await store.close();
    }
    const other = join(root, 'keygen-keys-2');
    const refused = await cli(['keygen', '--replicas', '4', '--out', other, '--data', stores]);
    expect([refused.code, refused.stderr]).toEqual([
      1,
      expect.stringMatching(/replica-1 already holds a signing record.*\(FILE_EXISTS\)/),
    ]);
    expect(existsSync(join(other, 'cluster.json'))).toBe(false);
  });
});
