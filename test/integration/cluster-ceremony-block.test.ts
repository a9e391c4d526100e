/**
 * The `ceremony` block of a cluster.json is checked wherever a description is loaded (issue 30, finding 8):
 * a real ceremony's output (four `dkg run` processes over real sockets) loads, is followed once endorsed, and
 * checks tokens; doctored copies of it (a zeroed confirmation, a changed node key, the block moved onto
 * another cluster, too few confirmations, a small-order node key, malformed fields) are refused with
 * BAD_CLUSTER naming the field by the loader, by `quorumfence verify` and by `reshare follow` (as the
 * description held and as the candidate).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toHex } from '../../src/common/bytes.js';
import { generateNodeKey } from '../../src/ceremony/node-key.js';
import { loadClusterFile, parseCluster, type Cluster } from '../../src/cluster/description.js';
import { loadReplicaKeyFile } from '../../src/cluster/replica-key.js';
import { combinePartials } from '../../src/crypto/threshold.js';
import { encodeToken, tokenToText } from '../../src/token/admission-token.js';
import { grantMessage, makeGrant } from '../../src/token/grant.js';
import { runCli } from '../support/cli.js';
import { initMemberCards, proposeCeremony } from '../support/ceremony-net.js';
import { codeOf } from '../support/error-code.js';

const root = mkdtempSync(join(tmpdir(), 'qf-ceremony-block-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
let honest: Json;
let cluster: Cluster;
let token: string;
const keyOf = (i: number) => join(root, `replica-${i}`, 'replica.key');
let files = 0;

function write(json: Json): string {
  const path = join(root, `doctored-${++files}.json`);
  writeFileSync(path, JSON.stringify(json));
  return path;
}

/** A deep copy of the honest file with `edit` applied to it. */
function doctored(edit: (json: Json) => void, from: Json = honest): Json {
  const copy = structuredClone(from);
  edit(copy);
  return copy;
}

beforeAll(async () => {
  const cards = await initMemberCards(root, 4);
  const proposal = await proposeCeremony(cards, 1, join(root, 'public', 'proposal.json'));
  const runs = await Promise.all(
    [1, 2, 3, 4].map((i) =>
      runCli(['dkg', 'run', '--data', join(root, `replica-${i}`), '--proposal', proposal], { timeoutMs: 60_000 }),
    ),
  );
  for (const r of runs) expect(r.code, r.stderr).toBe(0);
  honest = JSON.parse(readFileSync(join(root, 'replica-1', 'cluster.json'), 'utf8')) as Json;
  cluster = loadClusterFile(join(root, 'replica-1', 'cluster.json'));
  // A token from three of the new shares, to check against each description.
  const grant = makeGrant({ clusterId: cluster.id, resource: 'orders', epoch: 3n, holder: new Uint8Array(32).fill(7) });
  const partials = [1, 2, 3].map((i) => ({
    index: i,
    signature: cluster.backend.sign(loadReplicaKeyFile(keyOf(i), cluster).secretKey, grantMessage(grant)),
  }));
  token = tokenToText(encodeToken(grant, combinePartials(cluster.backend, 4, partials)!));
}, 90_000);

/** Each way of doctoring the block, with the field the refusal must name. */
const doctorings: [string, (json: Json) => void, RegExp][] = [
  [
    'a zeroed confirmation',
    (j) => (j.ceremony.signatures[0].signature = '00'.repeat(64)),
    /"ceremony\.signatures\[0\]\.signature" does not verify under member 1's node key/,
  ],
  [
    'a changed node key',
    (j) => (j.ceremony.members[1].nodeKey = toHex(generateNodeKey().nodeKey)),
    /"ceremony\.signatures\[1\]\.signature" does not verify under member 2's node key/,
  ],
  [
    'a small-order node key',
    (j) => (j.ceremony.members[2].nodeKey = '01' + '00'.repeat(31)),
    /"ceremony\.members\[2\]\.nodeKey" is not a usable Ed25519 key/,
  ],
  [
    'fewer than t confirmations',
    (j) => (j.ceremony.signatures = j.ceremony.signatures.slice(0, 2)),
    /"ceremony\.signatures" expected the confirmations of at least t = 3 members, got 2/,
  ],
  [
    'another proposal digest',
    (j) => (j.ceremony.proposal = 'ab'.repeat(32)),
    /"ceremony\.signatures\[0\]\.signature" does not verify/,
  ],
  ['members out of order', (j) => j.ceremony.members.reverse(), /"ceremony\.members\[0\]\.index" expected 1/],
  ['a member missing', (j) => j.ceremony.members.pop(), /"ceremony\.members" expected n = 4 members, got 3/],
  ['no signatures array', (j) => (j.ceremony.signatures = 'none'), /"ceremony\.signatures" expected an array/],
  [
    'a confirmation of a non-member',
    (j) => (j.ceremony.signatures[3] = { ...j.ceremony.signatures[3], index: 5 }),
    /"ceremony\.signatures\[3\]\.index" expected a member index 1\.\.4/,
  ],
  [
    'an excluded dealer also qualified',
    (j) => (j.ceremony.excluded = [{ dealer: j.ceremony.qualified[0], reason: 'x' }]),
    /"ceremony\.excluded\[0\]\.dealer" is also listed as qualified/,
  ],
  ['a block that is not an object', (j) => (j.ceremony = null), /"ceremony" expected an object/],
];

describe('the ceremony block of cluster.json', () => {
  it('a real ceremony output loads, and every confirming member is checked', () => {
    expect(honest.ceremony.signatures.length).toBeGreaterThanOrEqual(3);
    expect(codeOf(() => parseCluster(honest))).toBeUndefined();
  });

  it.each(doctorings)('the loader refuses %s with BAD_CLUSTER naming the field', (_, edit, message) => {
    let thrown: unknown;
    try {
      parseCluster(doctored(edit));
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toMatchObject({ code: 'BAD_CLUSTER', message: expect.stringMatching(message) });
  });

  it('the block moved onto another cluster (its confirmations name another id) is refused', async () => {
    const other = await runCli(['keygen', '--replicas', '4', '--out', join(root, 'other')]);
    expect(other.code, other.stderr).toBe(0);
    const moved = {
      ...JSON.parse(readFileSync(join(root, 'other', 'cluster.json'), 'utf8')),
      ceremony: honest.ceremony,
    };
    expect(codeOf(() => parseCluster(moved))).toBe('BAD_CLUSTER');
  });

  it('quorumfence verify: the honest description checks the token; zeroed confirmations or a changed node key are refused', async () => {
    const ok = await runCli(['verify', token, '--cluster', join(root, 'replica-1', 'cluster.json')]);
    expect([ok.code, ok.stdout]).toEqual([0, expect.stringMatching(/^valid token/)]);
    for (const [, edit] of doctorings.slice(0, 2)) {
      const refused = await runCli(['verify', token, '--cluster', write(doctored(edit))]);
      expect([refused.code, refused.stderr]).toEqual([1, expect.stringMatching(/does not verify.*\(BAD_CLUSTER\)/)]);
    }
  });

  it('reshare follow: an endorsed membership with a doctored ceremony block is refused, as the candidate and as the description held', async () => {
    // Membership 1 of the same cluster (the block's confirmations name the cluster id, which it keeps).
    const next = write({ ...honest, membershipVersion: 1 });
    const partials = [1, 2, 3].map((i) => join(root, `partial-${i}.json`));
    for (const i of [1, 2, 3]) {
      const signed = await runCli([
        'reshare',
        'endorse',
        '--cluster',
        next,
        '--key',
        keyOf(i),
        '--out',
        partials[i - 1]!,
      ]);
      expect(signed.code, signed.stderr).toBe(0);
    }
    const endorsedPath = join(root, 'endorsed.json');
    const combined = await runCli([
      'reshare',
      'endorse',
      '--cluster',
      next,
      ...partials.flatMap((p) => ['--partial', p]),
      '--out',
      endorsedPath,
    ]);
    expect(combined.code, combined.stderr).toBe(0);
    const endorsed = JSON.parse(readFileSync(endorsedPath, 'utf8')) as Json;
    expect(endorsed.ceremony).toEqual(honest.ceremony);
    const held = join(root, 'replica-1', 'cluster.json');
    const follow = (current: string, candidate: string) =>
      runCli(['reshare', 'follow', '--cluster', current, '--candidate', candidate]);
    const followed = await follow(held, endorsedPath);
    expect(followed.code, followed.stderr).toBe(0);
    for (const [, edit] of doctorings.slice(0, 2)) {
      // The endorsement does not cover the block, so only the block's own check can refuse these.
      const candidate = await follow(held, write(doctored(edit, endorsed)));
      expect([candidate.code, candidate.stderr]).toEqual([
        1,
        expect.stringMatching(/does not verify.*\(BAD_CLUSTER\)/),
      ]);
      const current = await follow(write(doctored(edit)), endorsedPath);
      expect([current.code, current.stderr]).toEqual([1, expect.stringMatching(/does not verify.*\(BAD_CLUSTER\)/)]);
    }
  }, 60_000);
});
