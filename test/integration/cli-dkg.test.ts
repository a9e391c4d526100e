/**
 * The ceremony as operators run it: `replica init` per replica, `dkg
 * propose`, then one `dkg run` process per member over real sockets. Each
 * share lands 0600 in its own data directory and nowhere else (any encoding);
 * the cluster loads as a dealer's does; a replica starts from the output.
 */
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadClusterFile } from '../../src/cluster/description.js';
import { loadReplicaKeyFile } from '../../src/cluster/replica-key.js';
import { fromHex, toHex } from '../../src/common/bytes.js';
import { SigningRecord } from '../../src/replica/signing-record.js';
import { verifiedSigners, type CeremonyClusterJson } from '../../src/ceremony/output.js';
import { runCli } from '../support/cli.js';
import { initMemberCards, proposeCeremony } from '../support/ceremony-net.js';
import { filesHoldingShare, filesUnder } from '../support/share-scan.js';

const root = mkdtempSync(join(tmpdir(), 'qf-dkg-cli-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function propose(base: string, cards: string[], f: number, extra: string[] = []): Promise<string> {
  return proposeCeremony(cards, f, join(base, 'public', `proposal-${Date.now()}.json`), extra);
}

describe('quorumfence dkg (processes over real sockets)', () => {
  it('4 members: every share only in its own data directory, 0600; the cluster loads; every member signed it', async () => {
    const base = join(root, 'four');
    const cards = await initMemberCards(base, 4);
    const proposal = await propose(base, cards, 1);
    const runs = await Promise.all(
      [1, 2, 3, 4].map((i) =>
        runCli(
          [
            'dkg',
            'run',
            '--data',
            join(base, `replica-${i}`),
            '--proposal',
            proposal,
            '--json',
            ...(i === 1 ? ['--publish', join(base, 'public', 'cluster.json')] : []),
          ],
          { timeoutMs: 60_000 },
        ),
      ),
    );
    for (const r of runs) expect(r.code, r.stderr).toBe(0);
    // Progress went to stderr: phases and who sent, as JSON log lines with the documented fields
    // (docs/operations.md, "Logs").
    expect(runs[0]!.stderr).toMatch(/phase deal/);
    expect(runs[0]!.stderr).toMatch(/deal: from 1, 2, 3, 4/);
    const progress = runs[0]!.stderr
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    const ceremonyId = (JSON.parse(readFileSync(proposal, 'utf8')) as { ceremonyId: string }).ceremonyId;
    expect(progress.every((line) => line.name === 'ceremony' && line.member === 1)).toBe(true);
    expect(progress.every((line) => line.ceremonyId === ceremonyId)).toBe(true);
    expect(progress[0]).toMatchObject({ level: 30, event: 'ceremony', kind: 'start', n: 4, t: 3 });
    expect(progress).toContainEqual(expect.objectContaining({ event: 'ceremony', kind: 'phase', phase: 'deal' }));
    expect(progress).toContainEqual(
      expect.objectContaining({ kind: 'phase-closed', phase: 'deal', received: [1, 2, 3, 4], missing: [] }),
    );
    expect(progress).toContainEqual(
      expect.objectContaining({
        kind: 'done',
        clusterId: JSON.parse(runs[0]!.stdout).clusterId,
        qualified: [1, 2, 3, 4],
      }),
    );
    const summaries = runs.map((r) => JSON.parse(r.stdout) as { clusterId: string; index: number });
    expect(new Set(summaries.map((s) => s.clusterId)).size).toBe(1);

    const cluster = loadClusterFile(join(base, 'public', 'cluster.json'));
    const published = JSON.parse(readFileSync(join(base, 'public', 'cluster.json'), 'utf8')) as CeremonyClusterJson;
    expect(verifiedSigners(published)).toEqual([1, 2, 3, 4]);
    for (let i = 1; i <= 4; i++) {
      const dir = join(base, `replica-${i}`);
      expect(statSync(join(dir, 'replica.key')).mode & 0o777).toBe(0o600);
      expect(loadReplicaKeyFile(join(dir, 'replica.key'), cluster).index).toBe(i);
      expect(loadClusterFile(join(dir, 'cluster.json')).idHex).toBe(cluster.idHex);
      // dkg run made the replica's empty signing record beside its key (issue 43, finding 5).
      const record = SigningRecord.open(dir, undefined, { readOnly: true, probe: false });
      expect([record.identity.replicaIndex, toHex(record.identity.clusterId), record.size]).toEqual([
        i,
        cluster.idHex,
        0,
      ]);
      await record.close();
      const share = fromHex(
        (JSON.parse(readFileSync(join(dir, 'replica.key'), 'utf8')) as { secretShare: string }).secretShare,
        32,
        'share',
      );
      expect(filesHoldingShare(root, dir, share, 4)).toEqual([]);
      // The scan does find it where it belongs (so it would find it elsewhere).
      expect(filesHoldingShare(root, join(base, 'elsewhere'), share, 4)).toContain(join(dir, 'replica.key'));
    }
    expect(filesUnder(join(base, 'public')).length).toBeGreaterThan(0);

    // Running the same proposal again is refused: the key exists.
    const again = await runCli(['dkg', 'run', '--data', join(base, 'replica-1'), '--proposal', proposal]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/\(FILE_EXISTS\)/);
    const idempotent = await runCli([
      'dkg',
      'run',
      '--data',
      join(base, 'replica-1'),
      '--proposal',
      proposal,
      '--if-missing',
    ]);
    expect(idempotent.code, idempotent.stderr).toBe(0);
  });

  it('f+1 members absent: the others abort within the accept timeout naming them, write no key, and a fresh proposal succeeds', async () => {
    const base = join(root, 'absent');
    const cards = await initMemberCards(base, 4);
    const proposal = await propose(base, cards, 1, ['--accept-timeout', '2s', '--phase-timeout', '2s']);
    const started = Date.now();
    const runs = await Promise.all(
      [1, 2].map((i) => runCli(['dkg', 'run', '--data', join(base, `replica-${i}`), '--proposal', proposal])),
    );
    expect(Date.now() - started).toBeLessThan(10_000);
    for (const r of runs) {
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/members 3, 4 did not accept the proposal in time \(CEREMONY_ABORTED\)/);
    }
    for (let i = 1; i <= 2; i++)
      expect(
        filesUnder(join(base, `replica-${i}`))
          .map((p) => p.split('/').pop())
          .sort(),
      ).toEqual(['ceremony-attempts.json', 'node.key']);
    // The same proposal is not run twice (its packets could be replayed into the rerun).
    const rerunSame = await runCli(['dkg', 'run', '--data', join(base, 'replica-1'), '--proposal', proposal]);
    expect(rerunSame.stderr).toMatch(/\(BAD_PROPOSAL\)/);
    const fresh = await propose(base, cards, 1);
    const all = await Promise.all(
      [1, 2, 3, 4].map((i) => runCli(['dkg', 'run', '--data', join(base, `replica-${i}`), '--proposal', fresh])),
    );
    for (const r of all) expect(r.code, r.stderr).toBe(0);
  });

  it('bad input: one-line errors with codes', async () => {
    const base = join(root, 'bad');
    const cards = await initMemberCards(base, 4);
    const wrongF = await runCli(['dkg', 'propose', ...cards.flatMap((c) => ['--member', c]), '--f', '2']);
    expect(wrongF.code).toBe(2);
    expect(wrongF.stderr).toMatch(
      /needs 3f\+1 = 7 --member cards, got 4; run "quorumfence dkg --help" \(INVALID_OPTION\)\n$/,
    );
    const noKey = await runCli([
      'dkg',
      'run',
      '--data',
      join(base, 'nowhere'),
      '--proposal',
      join(base, 'nothing.json'),
    ]);
    expect(noKey.code).toBe(1);
    expect(noKey.stderr).toMatch(/\(IO_ERROR\)/);
    const reinit = await runCli([
      'replica',
      'init',
      '--data',
      join(base, 'replica-1'),
      '--endpoint',
      'ws://127.0.0.1:7101',
    ]);
    expect(reinit.stderr).toMatch(/\(FILE_EXISTS\)/);
    const noSub = await runCli(['dkg']);
    expect(noSub.code).toBe(2);
  });
});
