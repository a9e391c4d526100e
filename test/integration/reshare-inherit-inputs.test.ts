/**
 * `reshare inherit` checks its inputs (issue 30, finding 4): real processes, real LMDB records, real files.
 * The old set granted orders@5 to alice with replicas 2, 3 and 4; replica 1 only saw orders@4. Each old
 * replica is frozen and exports its record signed with its share. Refused, with nothing written: replica 1's
 * export relabelled as replicas 2 and 3 (which would let the new set grant epoch 5 again), exports taken
 * before the freeze (unsigned v2; `replica export --key` refuses to sign an unfrozen record), an export
 * changed after signing, another membership's export, and one replica's export twice. Honest signed
 * exports of any 2f_old+1 replicas carry orders@5 over. And finding 3: one old replica signing a floor of
 * 2^63-1 (which made every new name fail with EPOCH_OUT_OF_RANGE) is refused as a lie; a lie below 2^62 is
 * outvoted when every old replica reports, and with 2f_old+1 reporters it is refused when it lies further above
 * what f_old+1 reports back than 1/1024 of the epochs left below 2^62 (issue 43, finding 4).
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadClusterFile, type Cluster } from '../../src/cluster/description.js';
import { SigningRecord } from '../../src/replica/signing-record.js';
import { runCli, type CliResult } from '../support/cli.js';
import { initMemberCards, proposeCeremony } from '../support/ceremony-net.js';
import { recordGrant } from '../support/recorded-grant.js';

const root = mkdtempSync(join(tmpdir(), 'qf-inherit-inputs-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const alice = new Uint8Array(32).fill(0xa1);
const oldDir = join(root, 'old');
const oldCluster = join(oldDir, 'cluster.json');
const oldKey = (i: number) => join(oldDir, `replica-${i}.key`);
const record = (i: number) => join(root, `old-record-${i}`);
const frozen = (i: number) => join(root, `frozen-${i}.json`);
let old: Cluster;
let news = 0;

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const cli = (args: string[]) => runCli(args, { timeoutMs: 60_000 });

/** A copy of `path`'s JSON with `edit` applied, written to a new file. */
function edited(path: string, edit: (json: Json) => void): string {
  const json = JSON.parse(readFileSync(path, 'utf8')) as Json;
  edit(json);
  const out = join(root, `edited-${++news}.json`);
  writeFileSync(out, JSON.stringify(json, null, 2));
  return out;
}

function grant(i: number, epoch: bigint): Promise<void> {
  return recordGrant(record(i), { clusterId: old.id, replicaIndex: i }, { resource: 'orders', epoch, holder: alice });
}

/** `reshare inherit` into a fresh data directory of new member 4; returns the result and the directory. */
async function inherit(inputs: string[]): Promise<{ result: CliResult; data: string }> {
  const data = join(root, `new-record-${++news}`);
  const result = await cli([
    'reshare',
    'inherit',
    '--data',
    data,
    '--key',
    join(root, 'new-4', 'replica.key'),
    '--cluster',
    join(root, 'new-1', 'cluster.json'),
    '--old-cluster',
    oldCluster,
    ...inputs.flatMap((path) => ['--in', path]),
  ]);
  return { result, data };
}

/** Refused with `code`, naming `file`, and nothing written (the new record's directory was never made). */
async function expectRefused(inputs: string[], code: string, file: string, reason: RegExp) {
  const { result, data } = await inherit(inputs);
  expect([result.code, result.stderr]).toEqual([1, expect.stringContaining(`(${code})`)]);
  expect(result.stderr).toContain(file);
  expect(result.stderr).toMatch(reason);
  expect(existsSync(data)).toBe(false);
}

beforeAll(async () => {
  const keygen = await cli(['keygen', '--replicas', '4', '--out', oldDir]);
  expect(keygen.code, keygen.stderr).toBe(0);
  old = loadClusterFile(oldCluster);
  // orders@4 to alice by all four; orders@5 to alice by 2, 3 and 4: a token replica 1 never signed.
  for (const i of [1, 2, 3, 4]) await grant(i, 4n);
  // Exports taken before the freeze (and before the last grant): unsigned, and missing orders@5.
  for (const i of [2, 3]) {
    const early = await cli(['replica', 'export', '--data', record(i), '--out', join(root, `early-${i}.json`)]);
    expect(early.code, early.stderr).toBe(0);
  }
  for (const i of [2, 3, 4]) await grant(i, 5n);
  // The new set: a real reshare ceremony (replace-one shape, old members 1..3 dealing), one process per member.
  const cards = await initMemberCards(root, 4, (i) => `new-${i}`);
  const proposal = await proposeCeremony(cards, 1, join(root, 'public', 'proposal.json'), [
    '--old-cluster',
    oldCluster,
    '--dealers',
    '1,2,3',
  ]);
  const runs = await Promise.all(
    [1, 2, 3, 4].map((i) =>
      cli([
        'reshare',
        'run',
        '--data',
        join(root, `new-${i}`),
        '--proposal',
        proposal,
        '--old-cluster',
        oldCluster,
        ...(i <= 3 ? ['--old-key', oldKey(i)] : []),
      ]),
    ),
  );
  for (const r of runs) expect(r.code, r.stderr).toBe(0);
}, 120_000);

describe('reshare inherit takes only signed frozen exports of distinct old replicas', () => {
  it('an unfrozen record is not signed (EXPORT_NOT_FROZEN, no file); a key of another replica is refused before anything is frozen', async () => {
    const out = join(root, 'unfrozen.json');
    const unfrozen = await cli([
      'replica',
      'export',
      '--data',
      record(1),
      '--key',
      oldKey(1),
      '--cluster',
      oldCluster,
      '--out',
      out,
    ]);
    expect([unfrozen.code, unfrozen.stderr]).toEqual([
      1,
      expect.stringMatching(/is not frozen.*\(EXPORT_NOT_FROZEN\)/),
    ]);
    expect(existsSync(out)).toBe(false);
    const mixed = await cli(['reshare', 'freeze', '--data', record(1), '--key', oldKey(2), '--cluster', oldCluster]);
    expect([mixed.code, mixed.stderr]).toEqual([1, expect.stringMatching(/nothing frozen \(CLUSTER_MISMATCH\)/)]);
    const half = await cli(['reshare', 'freeze', '--data', record(1), '--key', oldKey(1)]);
    expect([half.code, half.stderr]).toEqual([2, expect.stringMatching(/--cluster.*\(INVALID_OPTION\)/)]);
    const reader = SigningRecord.open(record(1), undefined, { readOnly: true });
    expect(reader.frozen).toBeUndefined();
    await reader.close();
  });

  it('freezes and signs; honest exports of any 2f_old+1 replicas carry orders@5 over', async () => {
    for (const i of [1, 2, 3, 4]) {
      const r = await cli([
        'reshare',
        'freeze',
        '--data',
        record(i),
        '--key',
        oldKey(i),
        '--cluster',
        oldCluster,
        '--out',
        frozen(i),
      ]);
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(readFileSync(frozen(i), 'utf8'))).toMatchObject({
        format: 'quorumfence/signing-record/v3',
        replica: i,
        membershipVersion: 0,
        frozen: { reason: 'reshare' },
      });
    }
    for (const subset of [
      [1, 2, 3],
      [2, 3, 4],
      [1, 2, 3, 4],
    ]) {
      const { result, data } = await inherit(subset.map(frozen));
      expect(result.code, result.stderr).toBe(0);
      const store = SigningRecord.open(data, undefined, { readOnly: true });
      expect(store.get('orders')?.epoch).toBe(5n);
      await store.close();
    }
  });

  it("replica 1's export relabelled as replicas 2 and 3 is refused (EXPORT_SIGNATURE_INVALID), nothing written", async () => {
    const as2 = edited(frozen(1), (j) => (j.replica = 2));
    const as3 = edited(frozen(1), (j) => (j.replica = 3));
    await expectRefused([frozen(1), as2, as3], 'EXPORT_SIGNATURE_INVALID', as2, /relabelled from another replica/);
  });

  it('exports taken before the freeze are refused (EXPORT_UNSIGNED), and so is a v2 export of a frozen record', async () => {
    await expectRefused(
      [frozen(1), join(root, 'early-2.json'), join(root, 'early-3.json')],
      'EXPORT_UNSIGNED',
      join(root, 'early-2.json'),
      /unsigned export \(quorumfence\/signing-record\/v2\)/,
    );
    const unsigned = join(root, 'unsigned-4.json');
    expect((await cli(['replica', 'export', '--data', record(4), '--out', unsigned])).code).toBe(0);
    await expectRefused([frozen(2), frozen(3), unsigned], 'EXPORT_UNSIGNED', unsigned, /proves neither who wrote it/);
  });

  it('an export changed after signing, a stripped or zeroed signature, another membership, and one replica twice are refused', async () => {
    const cases: [string, string, RegExp][] = [
      [
        edited(frozen(2), (j) => (j.entries[0].epoch = '4')),
        'BAD_INTERCHANGE', // the entry's grant digest no longer matches its epoch
        /grantDigest/,
      ],
      [
        edited(frozen(2), (j) => {
          j.entries = [];
        }),
        'EXPORT_SIGNATURE_INVALID',
        /does not verify under old replica 2's public share/,
      ],
      [edited(frozen(2), (j) => (j.floor = '3')), 'EXPORT_SIGNATURE_INVALID', /does not verify/],
      [
        edited(frozen(2), (j) => (j.frozen.at = '2000-01-01T00:00:00.000Z')),
        'EXPORT_SIGNATURE_INVALID',
        /does not verify/,
      ],
      [edited(frozen(2), (j) => delete j.frozen), 'BAD_INTERCHANGE', /"frozen\.at" expected a string/],
      [edited(frozen(2), (j) => delete j.signature), 'EXPORT_SIGNATURE_INVALID', /signature/],
      [edited(frozen(2), (j) => (j.signature = '00'.repeat(96))), 'EXPORT_SIGNATURE_INVALID', /signature/],
      [edited(frozen(2), (j) => (j.membershipVersion = 1)), 'RESHARE_REFUSED', /membership 1, but the old cluster/],
      [edited(frozen(2), (j) => (j.replica = 9)), 'BAD_INTERCHANGE', /replica 9 is not in the old cluster/],
    ];
    for (const [file, code, reason] of cases) await expectRefused([frozen(1), file, frozen(3)], code, file, reason);
    const twice = await inherit([frozen(1), frozen(1), frozen(3)]);
    expect([twice.result.code, twice.result.stderr]).toEqual([1, expect.stringMatching(/\(RESHARE_REFUSED\)/)]);
    expect(existsSync(twice.data)).toBe(false);
  });
});

describe('one lying old replica cannot push the new set out of reach (issue 30, finding 3)', () => {
  /** Old replica 1 as a liar: its record raised to `floor` (replica import), then frozen and signed with its share. */
  async function lyingExport(floor: string): Promise<string> {
    const lie = join(root, `lie-${floor}.json`);
    writeFileSync(
      lie,
      JSON.stringify({ format: 'quorumfence/signing-record/v2', clusterId: old.idHex, replica: 1, floor, entries: [] }),
    );
    const data = join(root, `liar-record-${floor}`);
    const imported = await cli(['replica', 'import', '--data', data, '--in', lie, '--cluster', oldCluster]);
    expect(imported.code, imported.stderr).toBe(0);
    const out = join(root, `frozen-liar-${floor}.json`);
    const r = await cli([
      'reshare',
      'freeze',
      '--data',
      data,
      '--key',
      oldKey(1),
      '--cluster',
      oldCluster,
      '--out',
      out,
    ]);
    expect(r.code, r.stderr).toBe(0);
    return out;
  }

  /** The inherited floor and orders' epoch of a successful inherit. */
  async function inherited(inputs: string[]): Promise<[bigint, bigint | undefined]> {
    const { result, data } = await inherit(inputs);
    expect(result.code, result.stderr).toBe(0);
    const store = SigningRecord.open(data, undefined, { readOnly: true });
    try {
      return [store.floor, store.get('orders')?.epoch];
    } finally {
      await store.close();
    }
  }

  // Uses the frozen exports of replicas 2..4 made above.
  it('a signed floor of 2^63-1 is refused as a lie (EXPORT_IMPOSSIBLE_EPOCH) naming its file, with three reporters or all four', async () => {
    const liar = await lyingExport('9223372036854775807');
    for (const inputs of [
      [liar, frozen(2), frozen(3)],
      [liar, frozen(2), frozen(3), frozen(4)],
    ])
      await expectRefused(
        inputs,
        'EXPORT_IMPOSSIBLE_EPOCH',
        liar,
        /reports floor 9223372036854775807, at or above 2\^62/,
      );
  });

  it('a floor of 2^62 - 3 signed by old replica 1 (issue 43, finding 4): outvoted when all four report; with three, refused (EXPORT_UNBACKED_EPOCH) naming its file; a small lie is inherited', async () => {
    const liar = await lyingExport(String((1n << 62n) - 3n));
    expect(await inherited([liar, frozen(2), frozen(3), frozen(4)])).toEqual([0n, 5n]);
    // Before, the three were inherited: the floor went to 2^62 - 3, an honest acquire was granted at 2^62, and
    // every replica then looked impossible to the console and to the next reshare.
    await expectRefused(
      [liar, frozen(2), frozen(3)],
      'EXPORT_UNBACKED_EPOCH',
      liar,
      /reports floor 4611686018427387901, more than 4503599627370496 \(1\/1024 of the epochs left below 2\^62\) above the 0 that f_old\+1 = 2 of the 3 reports reach/,
    );
    // Within 1/1024 of what is left: inherited, and it costs that resource (here every one: a floor) 2^40 epochs.
    const small = await lyingExport(String(1n << 40n));
    expect(await inherited([small, frozen(2), frozen(3)])).toEqual([1n << 40n, undefined]);
  });
});
