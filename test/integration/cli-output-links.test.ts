/**
 * Every command that writes (or erases) a file the user names refuses a symbolic link in its place, with
 * NOT_A_REGULAR_FILE, before anything is written: a link to a replica's key file named as the member card,
 * `--publish`, `endorse --out`, `follow --out`, `replica export --out` or `vectors --out` (or as the old key
 * `retire` erases) leaves the key file exactly as it was. Real processes, real files.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SigningRecord } from '../../src/replica/signing-record.js';
import { loadClusterFile } from '../../src/cluster/description.js';
import { runCli, runDevCli, type CliResult } from '../support/cli.js';
import { initMemberCards, proposeCeremony } from '../support/ceremony-net.js';

const root = mkdtempSync(join(tmpdir(), 'qf-output-links-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const keys = join(root, 'keys');
const keyFile = join(keys, 'replica-1.key');
let keyText: string;
let links = 0;

/** A fresh symbolic link to replica 1's key file. */
function linkToKey(): string {
  const link = join(root, `link-${++links}.json`);
  symlinkSync(keyFile, link);
  return link;
}

function expectRefused(result: CliResult) {
  expect([result.code, result.stderr]).toEqual([
    1,
    expect.stringMatching(/is a symbolic link.*\(NOT_A_REGULAR_FILE\)/),
  ]);
  expect(readFileSync(keyFile, 'utf8')).toBe(keyText);
}

beforeAll(async () => {
  const made = await runCli(['keygen', '--replicas', '4', '--out', keys]);
  expect(made.code, made.stderr).toBe(0);
  keyText = readFileSync(keyFile, 'utf8');
});

describe('outputs named by the user are never written through a symbolic link', () => {
  it('replica init --card: refused before a node key is made, and on the documented restart step (--if-missing)', async () => {
    const data = join(root, 'node');
    const init = (card: string, more: string[] = []) =>
      runCli(['replica', 'init', '--data', data, '--endpoint', 'ws://127.0.0.1:7101', '--card', card, ...more]);
    expectRefused(await init(linkToKey()));
    expect(existsSync(join(data, 'node.key'))).toBe(false);
    const first = await init(join(root, 'card.json'));
    expect(first.code, first.stderr).toBe(0);
    expectRefused(await init(linkToKey(), ['--if-missing']));
  });

  it('reshare endorse --out (signing and combining) and reshare follow --out', async () => {
    // Membership 1 of the same cluster, endorsed by t = 3 of its shares: something follow accepts.
    const next = JSON.parse(readFileSync(join(keys, 'cluster.json'), 'utf8'));
    const nextPath = join(root, 'cluster-v1.json');
    writeFileSync(nextPath, JSON.stringify({ ...next, membershipVersion: 1 }));
    expectRefused(await runCli(['reshare', 'endorse', '--cluster', nextPath, '--key', keyFile, '--out', linkToKey()]));
    // Refused before the endorsement record was made: the member can still endorse this description.
    expect(existsSync(`${keyFile}.endorsed-v1.json`)).toBe(false);
    const partials: string[] = [];
    for (const i of [1, 2, 3]) {
      partials.push(join(root, `partial-${i}.json`));
      const signed = await runCli([
        'reshare',
        'endorse',
        '--cluster',
        nextPath,
        '--key',
        join(keys, `replica-${i}.key`),
        '--out',
        partials[i - 1]!,
      ]);
      expect(signed.code, signed.stderr).toBe(0);
    }
    const combine = (out: string) =>
      runCli(['reshare', 'endorse', '--cluster', nextPath, ...partials.flatMap((p) => ['--partial', p]), '--out', out]);
    expectRefused(await combine(linkToKey()));
    const endorsed = join(root, 'cluster-endorsed.json');
    expect((await combine(endorsed)).code).toBe(0);
    const follow = (out: string) =>
      runCli(['reshare', 'follow', '--cluster', join(keys, 'cluster.json'), '--candidate', endorsed, '--out', out]);
    expectRefused(await follow(linkToKey()));
    const followed = await follow(join(root, 'followed.json'));
    expect(followed.code, followed.stderr).toBe(0);
  }, 60_000);

  it('replica export --out, quorumfence-dev vectors --out, and reshare retire --old-key', async () => {
    const cluster = loadClusterFile(join(keys, 'cluster.json'));
    const store = SigningRecord.open(
      join(root, 'record'),
      { clusterId: cluster.id, replicaIndex: 1 },
      { create: true },
    );
    await store.close();
    expectRefused(await runCli(['replica', 'export', '--data', join(root, 'record'), '--out', linkToKey()]));
    expectRefused(await runDevCli(['vectors', '--out', linkToKey()]));
    // retire would write zeros through the link into the key it points to.
    expectRefused(
      await runCli([
        'reshare',
        'retire',
        '--old-key',
        linkToKey(),
        '--old-cluster',
        join(keys, 'cluster.json'),
        '--cluster',
        join(keys, 'cluster.json'),
      ]),
    );
  });

  it('dkg run --publish: refused before the ceremony starts', async () => {
    const base = join(root, 'dkg');
    mkdirSync(base);
    const cards = await initMemberCards(base, 4);
    const proposal = await proposeCeremony(cards, 1, join(base, 'proposal.json'));
    const run = await runCli([
      'dkg',
      'run',
      '--data',
      join(base, 'replica-1'),
      '--proposal',
      proposal,
      '--publish',
      linkToKey(),
    ]);
    expectRefused(run);
    expect(run.stderr).not.toMatch(/listening for members/);
    expect(existsSync(join(base, 'replica-1', 'ceremony-attempts.json'))).toBe(false);
  });
});
