/**
 * Ceremony inputs at the boundary: packets (another ceremony, a forged
 * signature, malformed bodies), proposals, member cards, node key files and
 * sealed shares. Each bad input gets its error code and changes nothing.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Packr } from 'msgpackr';
import { createNodeKeyFile, generateNodeKey, loadNodeKeyFile, parseMemberCard } from '../../src/ceremony/node-key.js';
import { decodePacket, encodePacket } from '../../src/ceremony/packets.js';
import { makeProposal, memberIndexOf, parseProposal, type Proposal } from '../../src/ceremony/proposal.js';
import { ephemeralKey, openShare } from '../../src/ceremony/share-box.js';
import { codeOf } from '../support/error-code.js';

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const keys = Array.from({ length: 4 }, () => generateNodeKey());
function proposal(ceremonyId?: Uint8Array): Proposal {
  return makeProposal(
    keys.map((k, i) => ({
      nodeKey: k.nodeKey,
      encryptionKey: k.encryptionKey,
      endpoint: `ws://127.0.0.1:${7101 + i}`,
      ceremonyEndpoint: `ws://127.0.0.1:${7201 + i}`,
    })),
    1,
    { ceremonyId },
  );
}
const packr = new Packr({ useRecords: false, mapsAsObjects: true });

describe('ceremony packets', () => {
  const p = proposal();
  const sign = (m: Uint8Array) => keys[0]!.sign(m);

  it('round-trips a signed packet of this ceremony', () => {
    const packet = decodePacket(encodePacket(p, 1, 'complaint', { against: [2] }, sign), p);
    expect(packet).toMatchObject({ phase: 'complaint', from: 1, body: { against: [2] } });
  });

  it('refuses a packet of another ceremony of the same members (CLUSTER_MISMATCH)', () => {
    const other = proposal();
    expect(codeOf(() => decodePacket(encodePacket(other, 1, 'accept', {}, sign), p))).toBe('CLUSTER_MISMATCH');
  });

  it('refuses a packet signed by another member than it claims (UNAUTHENTICATED)', () => {
    expect(codeOf(() => decodePacket(encodePacket(p, 2, 'accept', {}, sign), p))).toBe('UNAUTHENTICATED');
  });

  it('refuses malformed envelopes and bodies (PROTOCOL_ERROR)', () => {
    const good = packr.unpack(encodePacket(p, 1, 'accept', {}, sign)) as Record<string, unknown>;
    const cases: unknown[] = [
      { ...good, v: 2 },
      { ...good, p: 9 },
      { ...good, from: 5 },
      { ...good, sig: new Uint8Array(3) },
      'not a map',
      [1, 2, 3],
    ];
    for (const value of cases) expect(codeOf(() => decodePacket(packr.pack(value), p))).toBe('PROTOCOL_ERROR');
    expect(codeOf(() => decodePacket(new Uint8Array(600 * 1024), p))).toBe('PROTOCOL_ERROR');
    expect(codeOf(() => decodePacket(Uint8Array.of(0xc1), p))).toBe('PROTOCOL_ERROR');
    // A well-signed body of the wrong shape: complaint naming a non-member, a deal with too few commitments.
    expect(codeOf(() => decodePacket(encodePacket(p, 1, 'complaint', { against: [9] }, sign), p))).toBe(
      'PROTOCOL_ERROR',
    );
    expect(
      codeOf(() =>
        decodePacket(
          encodePacket(p, 1, 'deal', { commitments: [], ephemeral: new Uint8Array(32), shares: [] }, sign),
          p,
        ),
      ),
    ).toBe('PROTOCOL_ERROR');
  });
});

describe('ceremony proposals and cards', () => {
  it('the digest binds every field: changing the phase timeout changes it', () => {
    const p = proposal();
    const changed = parseProposal({ ...p.json, phaseTimeoutMs: p.phaseTimeoutMs + 1 });
    expect(Buffer.from(changed.digest).equals(Buffer.from(p.digest))).toBe(false);
  });

  it("a reshare's terms (old cluster id, its membership version, the dealers) are bound into the digest, and checked", () => {
    const p = proposal();
    const terms = { oldClusterId: 'ab'.repeat(32), oldMembershipVersion: 2, dealers: [1, 2, 3] };
    const reshare = parseProposal({ ...p.json, reshare: terms });
    expect(reshare.reshare?.dealers).toEqual([1, 2, 3]);
    const digests = [
      p,
      reshare,
      parseProposal({ ...p.json, reshare: { ...terms, dealers: [1, 2, 4] } }),
      parseProposal({ ...p.json, reshare: { ...terms, oldMembershipVersion: 3 } }),
      parseProposal({ ...p.json, reshare: { ...terms, oldClusterId: 'cd'.repeat(32) } }),
    ].map((q) => Buffer.from(q.digest).toString('hex'));
    expect(new Set(digests).size).toBe(digests.length);
    // Without terms the digest is the one it always was.
    expect(parseProposal(p.json).reshare).toBeUndefined();
    for (const bad of [
      { ...terms, oldClusterId: 'ab' },
      { ...terms, oldMembershipVersion: -1 },
      { ...terms, dealers: [] },
      { ...terms, dealers: [2, 1, 3] },
      { ...terms, dealers: [1, 1, 3] },
      { ...terms, dealers: [0, 1, 2] },
      [],
    ])
      expect(codeOf(() => parseProposal({ ...p.json, reshare: bad }))).toBe('BAD_PROPOSAL');
  });

  it('refuses bad proposals with BAD_PROPOSAL (or UNKNOWN_VERSION for the format)', () => {
    const p = proposal();
    expect(codeOf(() => parseProposal({ ...p.json, format: 'x' }))).toBe('UNKNOWN_VERSION');
    expect(codeOf(() => parseProposal({ ...p.json, t: 2 }))).toBe('BAD_PROPOSAL');
    expect(codeOf(() => parseProposal({ ...p.json, members: p.json.members.slice(0, 3) }))).toBe('BAD_PROPOSAL');
    expect(
      codeOf(() => parseProposal({ ...p.json, members: [p.json.members[0], ...p.json.members.slice(0, 3)] })),
    ).toBe('BAD_PROPOSAL');
    expect(codeOf(() => parseProposal({ ...p.json, ceremonyId: 'zz' }))).toBe('BAD_PROPOSAL');
    expect(codeOf(() => parseProposal({ ...p.json, phaseTimeoutMs: 0 }))).toBe('BAD_PROPOSAL');
    expect(codeOf(() => memberIndexOf(p, generateNodeKey().nodeKey))).toBe('BAD_PROPOSAL');
    expect(memberIndexOf(p, keys[2]!.nodeKey)).toBe(3);
  });

  it('refuses bad member cards with BAD_PROPOSAL', () => {
    expect(codeOf(() => parseMemberCard({ nodeKey: 'ab' }, 'card'))).toBe('BAD_PROPOSAL');
    expect(codeOf(() => parseMemberCard(null, 'card'))).toBe('BAD_PROPOSAL');
  });

  it('node key files: 0600, never replaced, corrupt ones refused with BAD_KEY_FILE', () => {
    const dir = mkdtempSync(join(tmpdir(), 'qf-node-key-'));
    dirs.push(dir);
    const made = createNodeKeyFile(dir);
    expect(Buffer.from(loadNodeKeyFile(dir).nodeKey).equals(Buffer.from(made.nodeKey))).toBe(true);
    expect(codeOf(() => createNodeKeyFile(dir))).toBe('FILE_EXISTS');
    const bad = mkdtempSync(join(tmpdir(), 'qf-node-key-'));
    dirs.push(bad);
    writeFileSync(join(bad, 'node.key'), JSON.stringify({ format: 'quorumfence/node-key/v1', signingKey: 'zz' }));
    expect(codeOf(() => loadNodeKeyFile(bad))).toBe('BAD_KEY_FILE');
  });
});

describe('sealed shares', () => {
  it('open only for their recipient, dealer and ceremony', () => {
    const ceremony = new Uint8Array(32).fill(1);
    const share = new Uint8Array(32).fill(5);
    const box = ephemeralKey();
    const sealed = box.seal(keys[1]!.encryptionKey, ceremony, 1, 2, share);
    const open = (k: number, dealer: number, recipient: number, c = ceremony) =>
      openShare((peer) => keys[k]!.sharedSecret(peer), box.publicKey, c, dealer, recipient, sealed);
    expect(open(1, 1, 2)).toEqual(share);
    expect(open(2, 1, 2)).toBeNull();
    expect(open(1, 3, 2)).toBeNull();
    expect(open(1, 1, 2, new Uint8Array(32))).toBeNull();
    const tampered = sealed.slice();
    tampered[0]! ^= 1;
    expect(openShare((peer) => keys[1]!.sharedSecret(peer), box.publicKey, ceremony, 1, 2, tampered)).toBeNull();
  });
});
