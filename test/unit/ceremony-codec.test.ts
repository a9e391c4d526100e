/**
 * Ceremony inputs at the boundary: packets (another ceremony, a forged
 * signature, malformed bodies), relays, connection hellos, proposals, member
 * cards, node key files and sealed shares. Each bad input gets its error code and changes nothing.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Packr } from 'msgpackr';
import {
  createNodeKeyFile,
  generateNodeKey,
  loadNodeKeyFile,
  memberCardJson,
  parseMemberCard,
} from '../../src/ceremony/node-key.js';
import { decodePacket, encodePacket } from '../../src/ceremony/packets.js';
import {
  makeProposal,
  memberIndexOf,
  parseProposal,
  participantOf,
  type Proposal,
} from '../../src/ceremony/proposal.js';
import { ephemeralKey, openShare } from '../../src/ceremony/share-box.js';
import { decodeChallenge, encodeChallenge, encodeHello, newChallenge, verifyHello } from '../../src/ceremony/hello.js';
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

  it('a relay (kind 6) round-trips; more envelopes than broadcast instances, or a non-bytes envelope, is PROTOCOL_ERROR', () => {
    const complaint = encodePacket(p, 1, 'complaint', { against: [2] }, sign);
    const relay = decodePacket(encodePacket(p, 1, 'relay', { echoes: [complaint], readies: [] }, sign), p);
    expect(relay).toMatchObject({ phase: 'relay', from: 1, body: { readies: [] } });
    expect((relay.body as { echoes: Uint8Array[] }).echoes.map((e) => Buffer.from(e))).toEqual([
      Buffer.from(complaint),
    ]);
    // n complaints and n justifications: 8 instances at n = 4.
    const many = Array.from({ length: 9 }, () => complaint);
    expect(codeOf(() => decodePacket(encodePacket(p, 1, 'relay', { echoes: many, readies: [] }, sign), p))).toBe(
      'PROTOCOL_ERROR',
    );
    const wrong = { echoes: ['not bytes'], readies: [] } as unknown as { echoes: Uint8Array[]; readies: Uint8Array[] };
    expect(codeOf(() => decodePacket(encodePacket(p, 1, 'relay', wrong, sign), p))).toBe('PROTOCOL_ERROR');
  });
});

describe('ceremony connection hello', () => {
  const p = proposal();
  const challenge = newChallenge();
  const hello = (from: number, to: number, signer: number, c = challenge, of = p) =>
    encodeHello(of, from, to, c, (m) => keys[signer - 1]!.sign(m));

  it("names its sender when signed by that participant's node key over this challenge, to this listener", () => {
    expect(verifyHello(hello(2, 1, 2), p, 1, challenge)).toBe(2);
    expect(decodeChallenge(encodeChallenge(p, challenge), p)).toEqual(challenge);
  });

  it('refuses another challenge, another listener or another signer (UNAUTHENTICATED), another ceremony (CLUSTER_MISMATCH), and malformed or oversized frames (PROTOCOL_ERROR)', () => {
    expect(codeOf(() => verifyHello(hello(2, 1, 2, newChallenge()), p, 1, challenge))).toBe('UNAUTHENTICATED');
    expect(codeOf(() => verifyHello(hello(2, 3, 2), p, 1, challenge))).toBe('UNAUTHENTICATED');
    expect(codeOf(() => verifyHello(hello(2, 1, 3), p, 1, challenge))).toBe('UNAUTHENTICATED');
    expect(codeOf(() => verifyHello(hello(2, 1, 2, challenge, proposal()), p, 1, challenge))).toBe('CLUSTER_MISMATCH');
    expect(codeOf(() => verifyHello(hello(1, 1, 1), p, 1, challenge))).toBe('PROTOCOL_ERROR');
    expect(codeOf(() => verifyHello(hello(5, 1, 1), p, 1, challenge))).toBe('PROTOCOL_ERROR');
    expect(codeOf(() => verifyHello(new Uint8Array(600), p, 1, challenge))).toBe('PROTOCOL_ERROR');
    expect(codeOf(() => verifyHello(Uint8Array.of(0xc1), p, 1, challenge))).toBe('PROTOCOL_ERROR');
    expect(codeOf(() => verifyHello(packr.pack({ v: 1, c: p.digest, from: 2 }), p, 1, challenge))).toBe(
      'PROTOCOL_ERROR',
    );
    expect(codeOf(() => decodeChallenge(encodeChallenge(proposal(), challenge), p))).toBe('CLUSTER_MISMATCH');
    expect(codeOf(() => decodeChallenge(encodeChallenge(p, new Uint8Array(31)), p))).toBe('PROTOCOL_ERROR');
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

  it("a reshare's outside dealers (old index, node key, ceremony endpoint) are bound into the digest, become participants n+1.., and are checked", () => {
    const p = proposal();
    const leaving = [generateNodeKey(), generateNodeKey(), generateNodeKey()];
    const outside = (k: number, oldIndex: number) => ({
      oldIndex,
      nodeKey: Buffer.from(leaving[k]!.nodeKey).toString('hex'),
      ceremonyEndpoint: `ws://127.0.0.1:${7301 + k}`,
    });
    const terms = {
      oldClusterId: 'ab'.repeat(32),
      oldMembershipVersion: 1,
      dealers: [1, 2, 3, 5, 6],
      outsideDealers: [outside(0, 5), outside(1, 6)],
    };
    const removal = parseProposal({ ...p.json, reshare: terms });
    expect(removal.participants.map((q) => [q.sender, q.dealer, q.receives])).toEqual([
      [1, 1, true],
      [2, 2, true],
      [3, 3, true],
      [4, undefined, true],
      [5, 5, false],
      [6, 6, false],
    ]);
    expect(participantOf(removal, leaving[1]!.nodeKey)).toBe(6);
    expect(participantOf(removal, keys[1]!.nodeKey)).toBe(2);
    // An index moved to a new machine: old replica 2 deals from outside, member 2 does not deal.
    const moved = parseProposal({
      ...p.json,
      reshare: { ...terms, dealers: [1, 2, 3], outsideDealers: [outside(0, 2)] },
    });
    expect(moved.participants.map((q) => q.dealer)).toEqual([1, undefined, 3, undefined, 2]);
    const digests = [
      removal,
      parseProposal({
        ...p.json,
        reshare: {
          ...terms,
          outsideDealers: [outside(0, 5), { ...outside(2, 6), ceremonyEndpoint: 'ws://127.0.0.1:7302' }],
        },
      }),
      parseProposal({
        ...p.json,
        reshare: { ...terms, outsideDealers: [outside(0, 5), { ...outside(1, 6), ceremonyEndpoint: 'ws://h:1' }] },
      }),
      parseProposal({ ...p.json, reshare: { ...terms, dealers: [1, 2, 3, 4, 5, 6] } }),
    ].map((q) => Buffer.from(q.digest).toString('hex'));
    expect(new Set(digests).size).toBe(digests.length);
    for (const bad of [
      { ...terms, outsideDealers: [] },
      { ...terms, outsideDealers: {} },
      { ...terms, outsideDealers: [outside(1, 6), outside(0, 5)] },
      { ...terms, outsideDealers: [outside(0, 5), outside(1, 7)] },
      { ...terms, outsideDealers: [outside(0, 5), { ...outside(1, 6), nodeKey: 'ab' }] },
      { ...terms, outsideDealers: [outside(0, 5), { ...outside(1, 6), ceremonyEndpoint: 'tcp://h:1' }] },
      { ...terms, outsideDealers: [outside(0, 5), { ...outside(1, 6), nodeKey: p.json.members[0]!.nodeKey }] },
      { ...terms, outsideDealers: [outside(0, 5), { ...outside(1, 6), ceremonyEndpoint: 'ws://127.0.0.1:7202' }] },
      { ...terms, outsideDealers: [outside(0, 5)] },
      { ...terms, outsideDealers: [outside(0, 5), 'x'] },
    ])
      expect(codeOf(() => parseProposal({ ...p.json, reshare: bad }))).toBe('BAD_PROPOSAL');
    // A packet from an outside dealer verifies under its node key; one from beyond the participants does not decode.
    const sign = (m: Uint8Array) => leaving[0]!.sign(m);
    expect(decodePacket(encodePacket(removal, 5, 'complaint', { against: [] }, sign), removal).from).toBe(5);
    expect(codeOf(() => decodePacket(encodePacket(removal, 6, 'complaint', { against: [] }, sign), removal))).toBe(
      'UNAUTHENTICATED',
    );
    expect(codeOf(() => decodePacket(encodePacket(removal, 7, 'complaint', { against: [] }, sign), removal))).toBe(
      'PROTOCOL_ERROR',
    );
    // Complaints and confirmations name dealers by old index, above n here.
    expect(decodePacket(encodePacket(removal, 5, 'complaint', { against: [6] }, sign), removal).body).toEqual({
      against: [6],
    });
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

  it('refuses a node key of small order or not canonically encoded, in a card and as an outside dealer', () => {
    const good = memberCardJson(generateNodeKey(), 'ws://127.0.0.1:7401');
    expect(parseMemberCard(good, 'card').endpoint).toBe('ws://127.0.0.1:7401');
    // The identity point (its signature 01 00.. verifies every message under lenient rules), and y = p + 1.
    const smallOrder = '01' + '00'.repeat(31);
    const nonCanonical = 'ee' + 'ff'.repeat(30) + '7f';
    for (const nodeKey of [smallOrder, nonCanonical]) {
      expect(() => parseMemberCard({ ...good, nodeKey }, 'members[2]')).toThrow(/members\[2\].*nodeKey.*not a usable/);
      expect(codeOf(() => parseMemberCard({ ...good, nodeKey }, 'card'))).toBe('BAD_PROPOSAL');
    }
    const p = proposal();
    const terms = {
      oldClusterId: 'ab'.repeat(32),
      oldMembershipVersion: 1,
      dealers: [1, 2, 3, 5],
      outsideDealers: [{ oldIndex: 5, nodeKey: smallOrder, ceremonyEndpoint: 'ws://127.0.0.1:7402' }],
    };
    expect(codeOf(() => parseProposal({ ...p.json, reshare: terms }))).toBe('BAD_PROPOSAL');
    expect(() => parseProposal({ ...p.json, reshare: terms })).toThrow(/outsideDealers\[0\]\.nodeKey.*not a usable/);
    const honest = { ...terms.outsideDealers[0]!, nodeKey: Buffer.from(generateNodeKey().nodeKey).toString('hex') };
    expect(parseProposal({ ...p.json, reshare: { ...terms, outsideDealers: [honest] } }).participants).toHaveLength(5);
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
