/**
 * The ceremony proposal: who takes part (node keys, encryption keys,
 * endpoints), f and t, a fresh ceremony id and the phase timeouts. Every
 * member signs its digest (the accept phase) before anything is dealt, and
 * every packet of the ceremony is bound to that digest, so a packet from
 * another ceremony, or from the same one under other terms, is refused.
 */
import { randomBytes } from 'node:crypto';
import { sha256 } from '@noble/hashes/sha2.js';
import { QuorumFenceError } from '../common/errors.js';
import { bytesEqual, concatBytes, fromHex, toHex, u16be } from '../common/bytes.js';
import { MAX_MEMBERSHIP_VERSION, MAX_REPLICAS, MIN_REPLICAS } from '../common/limits.js';
import { checkEndpoint } from '../cluster/description.js';
import { parseMemberCard, usableNodeKey, type MemberCard, type MemberCardJson } from './node-key.js';

export const PROPOSAL_FORMAT = 'quorumfence/dkg-proposal/v1';

/** Members start by hand or by an orchestrator: a minute for all of them to be up. */
export const DEFAULT_ACCEPT_TIMEOUT_MS = 60_000;
/**
 * Each later phase is one round of small messages (three for complaints and justifications: the reliable
 * broadcast's send, echo and ready); 10 s is far above that on a WAN plus the crypto at N = 31.
 */
export const DEFAULT_PHASE_TIMEOUT_MS = 10_000;
const MAX_TIMEOUT_MS = 3_600_000;

export interface ProposalJson {
  format: typeof PROPOSAL_FORMAT;
  ceremonyId: string;
  n: number;
  f: number;
  t: number;
  acceptTimeoutMs: number;
  phaseTimeoutMs: number;
  members: (Omit<MemberCardJson, 'format'> & { index: number })[];
  /** Present for a reshare (docs/resharing.md): which cluster, at which membership, and which old members deal. */
  reshare?: ReshareTermsJson;
}

export interface ReshareTermsJson {
  /** The cluster id of the description being reshared (hex, 32 bytes). */
  oldClusterId: string;
  /** Its membershipVersion; the new description's is this plus 1. */
  oldMembershipVersion: number;
  /** Old replica indices that deal, ascending, distinct (at least t_old: checked against the old cluster). */
  dealers: number[];
  /**
   * Dealers that are not in the new set (removing replicas, or moving an index to a new machine): each deals
   * its old share and receives nothing. Ascending by old index; each is one of `dealers`. Absent when every
   * dealer is a new member at its old index.
   */
  outsideDealers?: OutsideDealerJson[];
}

export interface OutsideDealerJson {
  /** Its index in the old cluster: the dealer number its deal is checked and interpolated under. */
  oldIndex: number;
  /** Its node key (Ed25519, hex): signs its packets. */
  nodeKey: string;
  /** Where it listens during the ceremony. */
  ceremonyEndpoint: string;
}

export interface OutsideDealer {
  readonly oldIndex: number;
  readonly nodeKey: Uint8Array;
  readonly ceremonyEndpoint: string;
}

export interface ReshareTerms {
  readonly oldClusterId: Uint8Array;
  readonly oldMembershipVersion: number;
  readonly dealers: readonly number[];
  /** Dealers outside the new set, ascending by old index; empty when there are none. */
  readonly outsideDealers: readonly OutsideDealer[];
}

/**
 * One party of the ceremony, by its sender number (the `from` of its packets): the n members first (sender =
 * member index), then the outside dealers of a reshare (n+1, n+2, ... in their listed order).
 */
export interface Participant {
  readonly sender: number;
  readonly nodeKey: Uint8Array;
  readonly ceremonyEndpoint: string;
  /** The dealer number it deals under, if it is a dealer (a fresh key: every member, its own index). */
  readonly dealer: number | undefined;
  /** Members receive shares and a result; outside dealers only deal. */
  readonly receives: boolean;
}

export interface Member extends MemberCard {
  /** 1..n, the replica index this member's share will have. */
  readonly index: number;
}

export interface Proposal {
  readonly ceremonyId: Uint8Array;
  readonly n: number;
  readonly f: number;
  readonly t: number;
  readonly acceptTimeoutMs: number;
  readonly phaseTimeoutMs: number;
  /** members[i - 1].index === i */
  readonly members: readonly Member[];
  /** A reshare's terms, bound into the digest; undefined for a fresh key. */
  readonly reshare: ReshareTerms | undefined;
  /** Everyone who sends packets: members 1..n, then the outside dealers (n+1..). */
  readonly participants: readonly Participant[];
  /** SHA-256 of the canonical encoding: what accept packets sign and every packet is bound to. */
  readonly digest: Uint8Array;
  readonly json: ProposalJson;
}

const TAG = new TextEncoder().encode(PROPOSAL_FORMAT);
const utf8 = new TextEncoder();

function u32be(value: number): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, value);
  return out;
}

function text(value: string): Uint8Array {
  const bytes = utf8.encode(value);
  return concatBytes(u16be(bytes.length), bytes);
}

function digestOf(p: Omit<Proposal, 'digest' | 'json' | 'participants'>): Uint8Array {
  return sha256(
    concatBytes(
      TAG,
      p.ceremonyId,
      u16be(p.n),
      u16be(p.t),
      u32be(p.acceptTimeoutMs),
      u32be(p.phaseTimeoutMs),
      ...p.members.flatMap((m) => [m.nodeKey, m.encryptionKey, text(m.endpoint), text(m.ceremonyEndpoint)]),
      // After the members (whose length n fixes), so a proposal without terms keeps its digest, and one with
      // them can never encode like one without.
      ...(p.reshare
        ? [
            RESHARE_TAG,
            p.reshare.oldClusterId,
            u32be(p.reshare.oldMembershipVersion),
            u16be(p.reshare.dealers.length),
            ...p.reshare.dealers.map(u16be),
            // Only when present, so terms without outside dealers keep their digest; the dealer count fixes
            // where this begins.
            ...(p.reshare.outsideDealers.length > 0
              ? [
                  OUTSIDE_TAG,
                  u16be(p.reshare.outsideDealers.length),
                  ...p.reshare.outsideDealers.flatMap((d) => [u16be(d.oldIndex), d.nodeKey, text(d.ceremonyEndpoint)]),
                ]
              : []),
          ]
        : []),
    ),
  );
}

const RESHARE_TAG = new TextEncoder().encode('quorumfence/reshare-terms/v1');
const OUTSIDE_TAG = new TextEncoder().encode('quorumfence/reshare-outside-dealers/v1');

function outsideDealers(value: unknown, dealers: readonly number[]): OutsideDealer[] {
  if (value === undefined) return [];
  const field = 'reshare.outsideDealers';
  if (!Array.isArray(value) || value.length === 0 || value.length > MAX_REPLICAS)
    bad(`"${field}" expected a non-empty list of at most ${MAX_REPLICAS} dealers`, field);
  return value.map((entry: unknown, k) => {
    const at = `${field}[${k}]`;
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) bad(`"${at}" expected an object`, at);
    const e = entry as Record<string, unknown>;
    const oldIndex = e.oldIndex;
    if (typeof oldIndex !== 'number' || !dealers.includes(oldIndex))
      bad(`"${at}.oldIndex" expected one of the dealers ${dealers.join(', ')}, got ${JSON.stringify(oldIndex)}`, at);
    const previous = k > 0 ? (value[k - 1] as Record<string, unknown>).oldIndex : undefined;
    if (typeof previous === 'number' && oldIndex <= previous)
      bad(`"${field}" expected ascending, distinct old indices`, field);
    try {
      return {
        oldIndex,
        nodeKey: usableNodeKey(fromHex(e.nodeKey, 32, `${at}.nodeKey`), `${at}.nodeKey`),
        ceremonyEndpoint: checkEndpoint(e.ceremonyEndpoint, `${at}.ceremonyEndpoint`),
      };
    } catch (error) {
      return bad((error as Error).message, at);
    }
  });
}

/**
 * Members first (their index), then the outside dealers. A member deals under its own index unless an outside
 * dealer holds that old index (the index moved to a new machine); a dealer above n must be an outside one.
 */
function participantsOf(n: number, members: readonly Member[], reshare: ReshareTerms | undefined): Participant[] {
  const outside = reshare?.outsideDealers ?? [];
  const dealers = reshare?.dealers;
  for (const d of dealers ?? []) {
    if (d > n && !outside.some((o) => o.oldIndex === d))
      bad(`dealer ${d} is not a new member (n = ${n}); name it in "reshare.outsideDealers"`, 'reshare.outsideDealers');
  }
  return [
    ...members.map((m) => ({
      sender: m.index,
      nodeKey: m.nodeKey,
      ceremonyEndpoint: m.ceremonyEndpoint,
      dealer:
        dealers === undefined || (dealers.includes(m.index) && !outside.some((o) => o.oldIndex === m.index))
          ? m.index
          : undefined,
      receives: true,
    })),
    ...outside.map((o, k) => ({
      sender: n + k + 1,
      nodeKey: o.nodeKey,
      ceremonyEndpoint: o.ceremonyEndpoint,
      dealer: o.oldIndex,
      receives: false,
    })),
  ];
}

/** The sender number of the participant that deals under `dealer`, if any. */
export function senderOfDealer(proposal: Proposal, dealer: number): number | undefined {
  return proposal.participants.find((p) => p.dealer === dealer)?.sender;
}

/** The largest dealer number of the proposal (old indices may exceed n when replicas are removed). */
export function largestDealer(proposal: Proposal): number {
  return Math.max(proposal.n, ...(proposal.reshare?.dealers ?? []));
}

function reshareTerms(value: unknown): ReshareTerms | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    bad('"reshare" expected an object', 'reshare');
  const r = value as Record<string, unknown>;
  let oldClusterId: Uint8Array;
  try {
    oldClusterId = fromHex(r.oldClusterId, 32, 'reshare.oldClusterId');
  } catch (error) {
    bad((error as Error).message, 'reshare.oldClusterId');
  }
  const version = r.oldMembershipVersion;
  if (typeof version !== 'number' || !Number.isInteger(version) || version < 0 || version >= MAX_MEMBERSHIP_VERSION)
    bad(`"reshare.oldMembershipVersion" expected an integer in 0..${MAX_MEMBERSHIP_VERSION - 1}`, 'reshare');
  const dealers = r.dealers;
  if (
    !Array.isArray(dealers) ||
    dealers.length === 0 ||
    dealers.some((d, k) => !Number.isInteger(d) || d < 1 || d > MAX_REPLICAS || (k > 0 && d <= dealers[k - 1]))
  )
    bad(`"reshare.dealers" expected old replica indices 1..${MAX_REPLICAS}, ascending, distinct`, 'reshare.dealers');
  return {
    oldClusterId,
    oldMembershipVersion: version,
    dealers: dealers as number[],
    outsideDealers: outsideDealers(r.outsideDealers, dealers as number[]),
  };
}

function bad(message: string, field?: string): never {
  throw new QuorumFenceError('BAD_PROPOSAL', `proposal: ${message}`, { field });
}

function timeout(value: unknown, field: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_TIMEOUT_MS)
    bad(`"${field}" expected an integer number of ms in 1..${MAX_TIMEOUT_MS}`, field);
  return value;
}

/**
 * Checks a proposal: format, n = 3f+1, t = 2f+1, distinct node keys and
 * endpoints, timeouts. Computes its digest.
 * @throws QuorumFenceError BAD_PROPOSAL naming the field, UNKNOWN_VERSION
 */
export function parseProposal(json: unknown): Proposal {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) bad('expected a JSON object');
  const p = json as Record<string, unknown>;
  if (p.format !== PROPOSAL_FORMAT) {
    throw new QuorumFenceError(
      'UNKNOWN_VERSION',
      `proposal: "format" expected "${PROPOSAL_FORMAT}", got ${JSON.stringify(p.format)}`,
    );
  }
  let ceremonyId: Uint8Array;
  try {
    ceremonyId = fromHex(p.ceremonyId, 32, 'ceremonyId');
  } catch (error) {
    bad((error as Error).message, 'ceremonyId');
  }
  const { n, f, t } = p;
  if (typeof f !== 'number' || !Number.isInteger(f) || f < 1) bad(`"f" expected an integer >= 1`, 'f');
  if (n !== 3 * f + 1 || n < MIN_REPLICAS || n > MAX_REPLICAS)
    bad(`"n" expected 3f+1 = ${3 * f + 1} (at most ${MAX_REPLICAS})`, 'n');
  if (t !== 2 * f + 1) bad(`"t" expected 2f+1 = ${2 * f + 1}`, 't');
  if (!Array.isArray(p.members) || p.members.length !== n) bad(`"members" expected n = ${n} entries`, 'members');
  const members: Member[] = p.members.map((entry: unknown, k) => {
    const field = `members[${k}]`;
    const card = parseMemberCard(entry, field);
    if ((entry as Record<string, unknown>).index !== k + 1) bad(`"${field}.index" expected ${k + 1}`, `${field}.index`);
    return { ...card, index: k + 1 };
  });
  const seen = new Set<string>();
  for (const m of members) {
    for (const key of [
      toHex(m.nodeKey),
      toHex(m.encryptionKey),
      `endpoint ${m.endpoint}`,
      `ceremony ${m.ceremonyEndpoint}`,
    ]) {
      if (seen.has(key))
        bad(`member ${m.index} repeats a key or endpoint of another member (${key.slice(0, 24)})`, 'members');
      seen.add(key);
    }
  }
  const reshare = reshareTerms(p.reshare);
  // An outside dealer is a party of its own: its node key and ceremony endpoint are no member's.
  for (const o of reshare?.outsideDealers ?? []) {
    for (const key of [toHex(o.nodeKey), `ceremony ${o.ceremonyEndpoint}`]) {
      if (seen.has(key))
        bad(
          `outside dealer ${o.oldIndex} repeats a key or endpoint of a member or another dealer (${key.slice(0, 24)})`,
          'reshare.outsideDealers',
        );
      seen.add(key);
    }
  }
  const core = {
    ceremonyId,
    n,
    f,
    t,
    acceptTimeoutMs: timeout(p.acceptTimeoutMs, 'acceptTimeoutMs'),
    phaseTimeoutMs: timeout(p.phaseTimeoutMs, 'phaseTimeoutMs'),
    members,
    reshare,
  };
  return {
    ...core,
    participants: participantsOf(n, members, reshare),
    digest: digestOf(core),
    json: json as ProposalJson,
  };
}

/**
 * A fresh proposal from member cards, in the order given (the order is the replica index).
 * @throws QuorumFenceError BAD_PROPOSAL
 */
export function makeProposal(
  cards: readonly MemberCard[],
  f: number,
  options: {
    acceptTimeoutMs?: number;
    phaseTimeoutMs?: number;
    ceremonyId?: Uint8Array;
    /** A reshare's terms (dealers ascending), bound into the digest. */
    reshare?: ReshareTermsJson;
  } = {},
): Proposal {
  const json: ProposalJson = {
    format: PROPOSAL_FORMAT,
    ceremonyId: toHex(options.ceremonyId ?? new Uint8Array(randomBytes(32))),
    n: cards.length,
    f,
    t: 2 * f + 1,
    acceptTimeoutMs: options.acceptTimeoutMs ?? DEFAULT_ACCEPT_TIMEOUT_MS,
    phaseTimeoutMs: options.phaseTimeoutMs ?? DEFAULT_PHASE_TIMEOUT_MS,
    members: cards.map((c, k) => ({
      index: k + 1,
      nodeKey: toHex(c.nodeKey),
      encryptionKey: toHex(c.encryptionKey),
      endpoint: c.endpoint,
      ceremonyEndpoint: c.ceremonyEndpoint,
    })),
    ...(options.reshare ? { reshare: options.reshare } : {}),
  };
  if (cards.length !== 3 * f + 1)
    bad(`${cards.length} member cards given for f = ${f}; expected 3f+1 = ${3 * f + 1}`, 'members');
  return parseProposal(json);
}

/**
 * The index of the member whose node key this is (and, when given, whose encryption key).
 * @throws QuorumFenceError BAD_PROPOSAL when the proposal does not name it
 */
export function memberIndexOf(proposal: Proposal, nodeKey: Uint8Array, encryptionKey?: Uint8Array): number {
  const member = proposal.members.find((m) => bytesEqual(m.nodeKey, nodeKey));
  if (!member) bad(`this replica's node key ${toHex(nodeKey).slice(0, 16)}… is not among the members`);
  // A card from another node key file would name us but seal our shares to a key we do not hold.
  if (encryptionKey && !bytesEqual(member.encryptionKey, encryptionKey)) {
    bad(`member ${member.index}'s encryption key is not this replica's; was the card made from another node key?`);
  }
  return member.index;
}

/**
 * The sender number of the participant whose node key this is: a member's index, or n+k for the k-th outside
 * dealer of a reshare (which has no encryption key in the proposal: it receives nothing).
 * @throws QuorumFenceError BAD_PROPOSAL when the proposal names it nowhere
 */
export function participantOf(proposal: Proposal, nodeKey: Uint8Array, encryptionKey?: Uint8Array): number {
  const outside = proposal.participants.find((p) => !p.receives && bytesEqual(p.nodeKey, nodeKey));
  return outside ? outside.sender : memberIndexOf(proposal, nodeKey, encryptionKey);
}
