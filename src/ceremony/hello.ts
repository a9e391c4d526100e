/**
 * How a ceremony connection says who dialled it, before it holds a member's
 * place (transport.ts). The listener sends a fresh challenge; the dialler
 * answers with its sender number and its node key's signature over the
 * challenge, the proposal digest, and both ends' sender numbers:
 *
 *   challenge  { v: 1, c: proposal digest (32), challenge: 32 random bytes }
 *   hello      { v: 1, c: proposal digest (32), from: sender number, sig: 64 bytes }
 *   sig = Ed25519(node key of `from`, "quorumfence/dkg/hello/v1" ‖ c ‖ challenge ‖ u16 from ‖ u16 to)
 *
 * Checked cheapest first, as packets are: msgpack, version, digest (else
 * CLUSTER_MISMATCH), sender, signature (else UNAUTHENTICATED). A hello is
 * good for one connection only (the challenge), to one listener only (`to`).
 */
import { randomBytes } from 'node:crypto';
import { concatBytes, bytesEqual, u16be } from '../common/bytes.js';
import { verifyEd25519 } from '../common/ed25519.js';
import { QuorumFenceError } from '../common/errors.js';
import { bytesField, ceremonyCodec, mapField, PACKET_VERSION } from './packets.js';
import type { Proposal } from './proposal.js';

export const CHALLENGE_BYTES = 32;
/** A challenge or hello is under 200 bytes; anything longer is not one. */
export const MAX_HELLO_BYTES = 512;

const HELLO_TAG = new TextEncoder().encode('quorumfence/dkg/hello/v1');

function refuse(what: string, message: string): never {
  throw new QuorumFenceError('PROTOCOL_ERROR', `ceremony ${what}: ${message}`);
}

/** Decodes a frame's envelope and checks its version and ceremony, the checks both frames share. */
function envelope(bytes: Uint8Array, proposal: Proposal, what: string): Record<string, unknown> {
  if (!(bytes instanceof Uint8Array) || bytes.length > MAX_HELLO_BYTES) refuse(what, 'not a frame of its size');
  let raw: unknown;
  try {
    raw = ceremonyCodec.unpack(bytes);
  } catch {
    refuse(what, 'not a msgpack value');
  }
  const e = mapField(raw, what, `ceremony ${what}`);
  if (e.v !== PACKET_VERSION) refuse(what, `unknown version ${JSON.stringify(e.v)}`);
  if (!bytesEqual(bytesField(e.c, 32, 'c', `ceremony ${what}`), proposal.digest))
    throw new QuorumFenceError('CLUSTER_MISMATCH', `ceremony ${what}: from another ceremony (or other proposal terms)`);
  return e;
}

/** A fresh challenge for one incoming connection. */
export function newChallenge(): Uint8Array {
  return new Uint8Array(randomBytes(CHALLENGE_BYTES));
}

export function encodeChallenge(proposal: Proposal, challenge: Uint8Array): Uint8Array {
  return ceremonyCodec.pack({ v: PACKET_VERSION, c: proposal.digest, challenge }) as Uint8Array;
}

/**
 * The challenge a listener sent.
 * @throws QuorumFenceError PROTOCOL_ERROR, CLUSTER_MISMATCH (a listener of another ceremony)
 */
export function decodeChallenge(bytes: Uint8Array, proposal: Proposal): Uint8Array {
  return bytesField(envelope(bytes, proposal, 'challenge').challenge, CHALLENGE_BYTES, 'challenge', 'challenge');
}

function helloMessage(proposal: Proposal, challenge: Uint8Array, from: number, to: number): Uint8Array {
  return concatBytes(HELLO_TAG, proposal.digest, challenge, u16be(from), u16be(to));
}

/** The dialler's answer to `to`'s challenge, signed by its node key. */
export function encodeHello(
  proposal: Proposal,
  from: number,
  to: number,
  challenge: Uint8Array,
  sign: (message: Uint8Array) => Uint8Array,
): Uint8Array {
  const sig = sign(helloMessage(proposal, challenge, from, to));
  return ceremonyCodec.pack({ v: PACKET_VERSION, c: proposal.digest, from, sig }) as Uint8Array;
}

/**
 * Checks a hello against the challenge this listener (`self`) sent on that connection; returns who dialled.
 * @throws QuorumFenceError PROTOCOL_ERROR (malformed, not a participant, itself), CLUSTER_MISMATCH (another
 *   ceremony), UNAUTHENTICATED (the signature is not that participant's over this challenge)
 */
export function verifyHello(bytes: Uint8Array, proposal: Proposal, self: number, challenge: Uint8Array): number {
  const e = envelope(bytes, proposal, 'hello');
  const from = e.from;
  if (typeof from !== 'number' || !Number.isInteger(from) || from < 1 || from > proposal.participants.length)
    refuse('hello', '"from" is not a participant');
  if (from === self) refuse('hello', '"from" is this participant');
  const sig = bytesField(e.sig, 64, 'sig', 'ceremony hello');
  if (!verifyEd25519(proposal.participants[from - 1]!.nodeKey, helloMessage(proposal, challenge, from, self), sig))
    throw new QuorumFenceError('UNAUTHENTICATED', `ceremony hello: bad signature for participant ${from}`);
  return from;
}
