/**
 * Ceremony packets: one msgpack envelope per packet,
 *   { v: 1, c: proposal digest (32), p: kind (0..7), from: member index, body: bytes, sig: Ed25519 (64) }
 * signed by the sender's node key over
 *   "quorumfence/dkg/packet/v1" ‖ c ‖ u8 p ‖ u16 from ‖ SHA-256(body).
 * A packet is refused unless its digest is this ceremony's, its sender is a
 * participant (a member, or an outside dealer of a reshare) and the signature verifies under that member's node key. A deal's
 * SHA-256(body) is what the echo round compares, and the dealer's signature
 * over it makes two versions of one deal a proof of equivocation.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { Packr } from 'msgpackr';
import { QuorumFenceError } from '../common/errors.js';
import { bytesEqual, concatBytes, u16be } from '../common/bytes.js';
import { describe } from '../common/check.js';
import { verifyEd25519 } from '../common/ed25519.js';
import { largestDealer, type Proposal } from './proposal.js';
import { SEALED_SHARE_BYTES } from './share-box.js';

export const PACKET_VERSION = 1;
/** An echo relays at most two versions of each of 31 deals (about 2.6 KiB each at N = 31): 512 KiB bounds every packet. */
export const MAX_PACKET_BYTES = 512 * 1024;

export const PHASES = ['accept', 'deal', 'echo', 'complaint', 'justification', 'confirm'] as const;
export type PacketPhase = (typeof PHASES)[number];
/**
 * Every kind of packet, numbered by `p`: one per phase, then two that belong to no phase: `relay`, the reliable
 * broadcast's echoes and readies of complaints and justifications (members relay whenever they see something),
 * and `certificate`, the t confirmations a member finished with, sent to the others once it is done.
 */
export const PACKET_KINDS = [...PHASES, 'relay', 'certificate'] as const;
export type PacketKind = (typeof PACKET_KINDS)[number];
/** The phases whose packets go through the reliable broadcast (broadcast-ledger.ts). */
export const BROADCAST_PHASES = ['complaint', 'justification'] as const;
export type BroadcastPhase = (typeof BROADCAST_PHASES)[number];

export interface DealBody {
  /** t compressed G1 points. */
  readonly commitments: Uint8Array[];
  /** The dealer's ephemeral X25519 public key for this deal. */
  readonly ephemeral: Uint8Array;
  /** n sealed shares, shares[j - 1] for member j (outside dealers of a reshare receive none). */
  readonly shares: Uint8Array[];
}
export interface EchoBody {
  /** Signed deal packets (whole envelopes) as the sender received them. */
  readonly deals: Uint8Array[];
}
export interface ComplaintBody {
  /** Dealer numbers whose share to the sender did not open or did not match their commitments. */
  readonly against: number[];
}
export interface JustificationBody {
  /** Shares this dealer reveals in the clear, one per complaint it received. */
  readonly reveals: { to: number; share: Uint8Array }[];
}
export interface ConfirmBody {
  readonly clusterId: Uint8Array;
  readonly qualified: number[];
  /** Ed25519 over "quorumfence/dkg/cluster/v1" ‖ proposal digest ‖ clusterId: the member's signature on the result. */
  readonly signature: Uint8Array;
}
export interface RelayBody {
  /** Signed complaint or justification packets (whole envelopes, as signed by their sender) the sender echoes. */
  readonly echoes: Uint8Array[];
  /** The same, for which the sender is ready. */
  readonly readies: Uint8Array[];
}
export interface CertificateBody {
  /** Signed confirm packets (whole envelopes) of t or more members, all of one cluster id. */
  readonly confirms: Uint8Array[];
}
export type AcceptBody = Record<string, never>;

export interface BodyByPhase {
  accept: AcceptBody;
  deal: DealBody;
  echo: EchoBody;
  complaint: ComplaintBody;
  justification: JustificationBody;
  confirm: ConfirmBody;
  relay: RelayBody;
  certificate: CertificateBody;
}

export interface Packet<P extends PacketKind = PacketKind> {
  /** The packet's kind: its phase, `relay` or `certificate`. */
  readonly phase: P;
  readonly from: number;
  readonly body: BodyByPhase[P];
  /** SHA-256 of the body bytes: the deal digest the echo round compares. */
  readonly bodyDigest: Uint8Array;
  /** The envelope exactly as received (relayed unchanged by echoes). */
  readonly bytes: Uint8Array;
}

/** The msgpack codec of everything a ceremony sends: packets and the connection hello (hello.ts). */
export const ceremonyCodec = new Packr({
  useRecords: false,
  mapsAsObjects: true,
  moreTypes: false,
  structuredClone: false,
  bundleStrings: false,
  copyBuffers: true,
});

const PACKET_TAG = new TextEncoder().encode('quorumfence/dkg/packet/v1');

function refuse(message: string, what = 'ceremony packet'): never {
  throw new QuorumFenceError('PROTOCOL_ERROR', `${what}: ${message}`);
}

function signedMessage(ceremony: Uint8Array, phase: number, from: number, bodyDigest: Uint8Array): Uint8Array {
  return concatBytes(PACKET_TAG, ceremony, Uint8Array.of(phase), u16be(from), bodyDigest);
}

/** The message a member signs to confirm the resulting cluster: defined beside the check of the file that carries it. */
export { clusterSignatureMessage } from '../cluster/ceremony-record.js';

/** Encodes and signs one packet. */
export function encodePacket<P extends PacketKind>(
  proposal: Proposal,
  from: number,
  phase: P,
  body: BodyByPhase[P],
  sign: (message: Uint8Array) => Uint8Array,
): Uint8Array {
  const bodyBytes = ceremonyCodec.pack(body) as Uint8Array;
  const p = PACKET_KINDS.indexOf(phase);
  const sig = sign(signedMessage(proposal.digest, p, from, sha256(bodyBytes)));
  return ceremonyCodec.pack({ v: PACKET_VERSION, c: proposal.digest, p, from, body: bodyBytes, sig }) as Uint8Array;
}

/** A byte field of a decoded frame, copied. @throws QuorumFenceError PROTOCOL_ERROR naming `what` and the field */
export function bytesField(value: unknown, length: number | null, field: string, what?: string): Uint8Array {
  if (!(value instanceof Uint8Array)) refuse(`"${field}" expected bytes, got ${describe(value)}`, what);
  if (length !== null && value.length !== length)
    refuse(`"${field}" expected ${length} bytes, got ${value.length}`, what);
  // A plain copy: msgpack yields Buffers, whose slice() is a view, and checks that slice-and-mask would write through.
  return new Uint8Array(value);
}

function indexList(value: unknown, n: number, field: string): number[] {
  if (!Array.isArray(value) || value.length > n) refuse(`"${field}" expected at most ${n} member indices`);
  const out = value.map((i) => {
    if (typeof i !== 'number' || !Number.isInteger(i) || i < 1 || i > n) refuse(`"${field}" holds a bad index`);
    return i;
  });
  if (new Set(out).size !== out.length) refuse(`"${field}" repeats an index`);
  return out;
}

/** A map of a decoded frame. @throws QuorumFenceError PROTOCOL_ERROR naming `what` and the field */
export function mapField(value: unknown, field: string, what?: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value) || value instanceof Uint8Array)
    refuse(`"${field}" expected a map, got ${describe(value)}`, what);
  return value as Record<string, unknown>;
}

/** Instances a relay can speak of: one complaint per member, one justification per participant. */
function broadcastInstances(proposal: Proposal): number {
  return proposal.n + proposal.participants.length;
}

function envelopeList(value: unknown, most: number, field: string): Uint8Array[] {
  if (!Array.isArray(value) || value.length > most) refuse(`"${field}" expected at most ${most} packets`);
  return value.map((d, k) => bytesField(d, null, `${field}[${k}]`));
}

function decodeBody(phase: PacketKind, bytes: Uint8Array, proposal: Proposal): BodyByPhase[PacketKind] {
  let raw: unknown;
  try {
    raw = ceremonyCodec.unpack(bytes);
  } catch {
    refuse('body is not msgpack');
  }
  const b = mapField(raw, 'body');
  const { n, t } = proposal;
  // Dealer numbers are old indices in a reshare, above n when replicas are removed.
  const dealers = largestDealer(proposal);
  switch (phase) {
    case 'accept':
      return {};
    case 'deal': {
      if (!Array.isArray(b.commitments) || b.commitments.length !== t) refuse(`"commitments" expected ${t} points`);
      if (!Array.isArray(b.shares) || b.shares.length !== n) refuse(`"shares" expected ${n} sealed shares`);
      return {
        commitments: b.commitments.map((c, k) => bytesField(c, 48, `commitments[${k}]`)),
        ephemeral: bytesField(b.ephemeral, 32, 'ephemeral'),
        shares: b.shares.map((s, k) => bytesField(s, SEALED_SHARE_BYTES, `shares[${k}]`)),
      };
    }
    case 'echo': {
      const most = 2 * proposal.participants.length;
      if (!Array.isArray(b.deals) || b.deals.length > most) refuse(`"deals" expected at most ${most} packets`);
      return { deals: b.deals.map((d, k) => bytesField(d, null, `deals[${k}]`)) };
    }
    case 'complaint':
      return { against: indexList(b.against, dealers, 'against') };
    case 'justification': {
      if (!Array.isArray(b.reveals) || b.reveals.length > n) refuse(`"reveals" expected at most ${n} entries`);
      const reveals = b.reveals.map((r, k) => {
        const e = mapField(r, `reveals[${k}]`);
        return {
          to: indexList([e.to], n, `reveals[${k}].to`)[0]!,
          share: bytesField(e.share, 32, `reveals[${k}].share`),
        };
      });
      indexList(
        reveals.map((r) => r.to),
        n,
        'reveals',
      );
      return { reveals };
    }
    case 'confirm':
      return {
        clusterId: bytesField(b.clusterId, 32, 'clusterId'),
        qualified: indexList(b.qualified, dealers, 'qualified'),
        signature: bytesField(b.signature, 64, 'signature'),
      };
    case 'relay':
      return {
        echoes: envelopeList(b.echoes, broadcastInstances(proposal), 'echoes'),
        readies: envelopeList(b.readies, broadcastInstances(proposal), 'readies'),
      };
    case 'certificate':
      return { confirms: envelopeList(b.confirms, n, 'confirms') };
  }
}

/**
 * Decodes and authenticates one packet of this ceremony.
 * @throws QuorumFenceError PROTOCOL_ERROR (malformed, oversized, unknown kind,
 *   bad body), CLUSTER_MISMATCH (another ceremony), UNAUTHENTICATED (bad signature)
 */
export function decodePacket(bytes: Uint8Array, proposal: Proposal): Packet {
  if (!(bytes instanceof Uint8Array)) refuse('expected bytes');
  if (bytes.length > MAX_PACKET_BYTES) refuse(`${bytes.length} bytes exceeds the ${MAX_PACKET_BYTES}-byte limit`);
  let raw: unknown;
  try {
    raw = ceremonyCodec.unpack(bytes);
  } catch {
    refuse('not a msgpack value');
  }
  const e = mapField(raw, 'packet');
  if (e.v !== PACKET_VERSION) refuse(`unknown version ${JSON.stringify(e.v)}`);
  const ceremony = bytesField(e.c, 32, 'c');
  if (!bytesEqual(ceremony, proposal.digest)) {
    throw new QuorumFenceError('CLUSTER_MISMATCH', 'ceremony packet: from another ceremony (or other proposal terms)');
  }
  if (typeof e.p !== 'number' || !Number.isInteger(e.p) || e.p < 0 || e.p >= PACKET_KINDS.length)
    refuse('unknown packet kind');
  const phase = PACKET_KINDS[e.p]!;
  if (typeof e.from !== 'number' || !Number.isInteger(e.from) || e.from < 1 || e.from > proposal.participants.length)
    refuse('"from" is not a member');
  const body = bytesField(e.body, null, 'body');
  const sig = bytesField(e.sig, 64, 'sig');
  const bodyDigest = sha256(body);
  const valid = verifyEd25519(
    proposal.participants[e.from - 1]!.nodeKey,
    signedMessage(ceremony, e.p, e.from, bodyDigest),
    sig,
  );
  if (!valid) throw new QuorumFenceError('UNAUTHENTICATED', `ceremony packet: bad signature for member ${e.from}`);
  return { phase, from: e.from, body: decodeBody(phase, body, proposal), bodyDigest, bytes };
}
