/**
 * What one member's state machine says to the outside: packets to send,
 * progress events, and the result it keeps. Types only.
 */
import type { ClusterDescriptionJson } from '../cluster/description.js';
import type { BodyByPhase, PacketKind, PacketPhase } from './packets.js';
import type { Polynomial } from './vss.js';

export type CeremonyPhase = PacketPhase | 'done' | 'aborted';

export type ProgressEvent =
  | { kind: 'phase'; phase: PacketPhase; at: number }
  | { kind: 'phase-closed'; phase: PacketPhase; received: number[]; missing: number[]; byDeadline: boolean }
  | { kind: 'excluded'; dealer: number; reason: string }
  | { kind: 'refused'; reason: string; code: string }
  /** `adopted`: t members confirmed another result than this member drafted, and its deals and shares make it. */
  | { kind: 'done'; clusterId: string; qualified: number[]; adopted?: boolean }
  | { kind: 'aborted'; reason: string; members: number[] };

export interface Outgoing {
  readonly to: number;
  readonly bytes: Uint8Array;
}

/** What the member keeps when the ceremony succeeds. */
export interface CeremonyResult {
  readonly cluster: ClusterDescriptionJson;
  readonly qualified: number[];
  /** Excluded dealers with the reason. */
  readonly excluded: { dealer: number; reason: string }[];
  /** Ed25519 signatures of the members that confirmed this cluster, by index. */
  readonly signatures: { index: number; signature: Uint8Array }[];
  /** This member's Δ-scaled secret share, 32 bytes (the replica key file's secretShare). Secret. */
  readonly scaledSecretShare: Uint8Array;
}

/** What a reshare's outside dealer (deals, receives nothing) knows at the end: t members confirmed this result. */
export interface DealerOnlyResult {
  /** The cluster id (hex) t members confirmed. */
  readonly clusterId: string;
  /** The qualified dealers they name (dealer numbers: old indices). */
  readonly qualified: number[];
  /** This participant's dealer number (its old index). */
  readonly dealer: number;
  /** The members whose confirmation agreed. */
  readonly confirmedBy: number[];
  /** Dealers this participant saw excluded, with the reason. */
  readonly excluded: { dealer: number; reason: string }[];
}

/**
 * Hooks a test uses to make this member Byzantine: rewrite (or drop: null) what it sends to one recipient, its
 * relays of other members' complaints and justifications included.
 */
export type OutgoingRewrite = <P extends PacketKind>(
  phase: P,
  body: BodyByPhase[P],
  recipient: number,
  own: { polynomial: Polynomial; seal(recipient: number, share: bigint): Uint8Array },
) => BodyByPhase[P] | null;
