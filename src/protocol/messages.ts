/**
 * Wire messages. Every frame is one binary WebSocket message holding one
 * msgpack map `{ v, type, id?, ... }`.
 *
 * Connection flow:
 *   replica → client  challenge { nonce, clusterId, replica }
 *   client  → replica hello     { id, holder, signature }   signature = Ed25519(authTranscript)
 *   replica → client  welcome   { id, replica, floor? }
 *   then requests (acquire, renew, release, status, leases), each answered by a
 *   reply { id, outcome } or an error { id, code, message }; and, unasked,
 *   released { resource } to clients the replica told it was held.
 */
import { concatBytes, u16be } from '../common/bytes.js';

export const PROTOCOL_VERSION = 1;

/** WebSocket close codes the project uses (RFC 6455 codes where one fits). */
export const CloseCode = {
  NORMAL: 1000,
  /** The peer is shutting down (SIGTERM). */
  GOING_AWAY: 1001,
  /** A malformed frame: undecodable msgpack, wrong shape, unknown type, wrong version. */
  PROTOCOL_ERROR: 1002,
  /** A text frame; only binary frames are spoken. */
  UNSUPPORTED_DATA: 1003,
  /** Authentication failed, a request came before it, or the connection kept exceeding its limits. */
  POLICY_VIOLATION: 1008,
  /** A frame above the size limit. */
  MESSAGE_TOO_BIG: 1009,
  INTERNAL_ERROR: 1011,
} as const;

export const NONCE_BYTES = 32;
export const HOLDER_KEY_BYTES = 32;
export const HOLDER_SIGNATURE_BYTES = 64;
export const PARTIAL_BYTES = 96;
/** A client session id (docs/protocol.md, "Sessions"): 16 random bytes per client instance or CLI invocation. */
export const SESSION_BYTES = 16;

const AUTH_TAG = new TextEncoder().encode('quorumfence/auth/v1');
const AUTH_TAG_WITH_SESSION = new TextEncoder().encode('quorumfence/auth/v2');

/**
 * What the client signs to prove its key to one replica: binds the fresh
 * nonce (no replay), the cluster (no cross-cluster reuse) and the replica
 * index (no relay to another replica), and the session the connection speaks
 * for when it names one (v2), so nobody can move a connection to another session.
 */
export function authTranscript(
  nonce: Uint8Array,
  clusterId: Uint8Array,
  replicaIndex: number,
  session?: Uint8Array,
): Uint8Array {
  if (session === undefined) return concatBytes(AUTH_TAG, nonce, clusterId, u16be(replicaIndex));
  return concatBytes(AUTH_TAG_WITH_SESSION, nonce, clusterId, u16be(replicaIndex), session);
}

// ---------- client → replica ----------

export interface Hello {
  readonly type: 'hello';
  readonly id: number;
  /** Ed25519 public key. */
  readonly holder: Uint8Array;
  readonly signature: Uint8Array;
  /**
   * The client session this connection speaks for (SESSION_BYTES): a replica hands a running lease only to the
   * session that holds it (docs/protocol.md, "Sessions"). Absent: the connection is its own sessionless client.
   */
  readonly session?: Uint8Array;
}

export interface AcquireRequest {
  readonly type: 'acquire';
  readonly id: number;
  readonly resource: string;
  readonly epoch: bigint;
  readonly ttlMs: number;
  /**
   * Hot handoffs (docs/protocol.md): when the resource is held by someone else, the replica may keep the
   * request, in arrival order with the other waiting ones, for up to this long, and answer it when the lease
   * ends, instead of answering `busy` now. Absent or 0: answer at once.
   */
  readonly waitMs?: number;
  /**
   * With `waitMs`: a request that waited is granted at the next epoch of the resource when its turn comes
   * (at least `epoch`), and the `granted` answer carries that epoch.
   */
  readonly nextEpoch?: boolean;
  /**
   * Catch-up evidence (docs/protocol.md, "Epoch steps"): other replicas' partial signatures on grants of this
   * resource to this same holder, each at an epoch at least `epoch`. A replica whose record (or floor) is more than
   * its free step below `epoch` grants only with such evidence: from f+1 replicas, at any distance (one of them is
   * honest, so the cluster is there); from fewer, within maxEpochStep. Absent or empty: none.
   */
  readonly evidence?: readonly GrantEvidence[];
  /**
   * Crash recovery (docs/protocol.md, "Sessions"): a lease this identity holds under another session does not make
   * the replica answer `busy`; the grant (at a new epoch) ends it. Absent: false.
   */
  readonly resume?: boolean;
}

/** One replica's partial signature on the grant (resource, epoch, holder) of the request it travels with. */
export interface GrantEvidence {
  readonly replica: number;
  readonly epoch: bigint;
  /** 96 bytes: the replica's partial signature on that grant under its key share. */
  readonly partial: Uint8Array;
}

/** At most one piece of evidence per other replica of the largest cluster (N = 31). */
export const MAX_EVIDENCE_ENTRIES = 30;

export interface RenewRequest {
  readonly type: 'renew';
  readonly id: number;
  readonly resource: string;
  readonly epoch: bigint;
  readonly ttlMs: number;
  /**
   * For a replica that does not hold the lease yet and would join it (docs/protocol.md, "Leases that outlive f
   * signers"): the same catch-up evidence as an acquire's, checked only when the epoch is beyond its free step.
   * Absent or empty: none.
   */
  readonly evidence?: readonly GrantEvidence[];
}

export interface ReleaseRequest {
  readonly type: 'release';
  readonly id: number;
  readonly resource: string;
  readonly epoch: bigint;
  /**
   * The client waits for no answer (`lease.release()` without `wait`): the replica sends no reply, and the request
   * holds none of the connection's in-flight slots (`isQuietRelease`). Only `true` travels.
   */
  readonly quiet?: true;
}

/**
 * A release nobody waits on: the replica acts on it and sends no reply (an error frame, if any, goes out as for any
 * request and is dropped by the client). It takes no in-flight slot of its connection, since the client cannot
 * know when it would free one; its work is bounded (a release writes nothing to disk and waits in no line), and
 * the connection's rate limit still counts it.
 */
export function isQuietRelease(request: WireRequest): boolean {
  return request.type === 'release' && request.quiet === true;
}

export interface StatusRequest {
  readonly type: 'status';
  readonly id: number;
  readonly resource: string;
}

/** The requests about one resource, which the replica rules (docs/protocol.md) decide. */
export type Request = AcquireRequest | RenewRequest | ReleaseRequest | StatusRequest;

/** The most leases one `leases` answer lists: each entry is at most ~330 bytes, so the reply stays far below a frame. */
export const MAX_LEASES_PER_REPLY = 32;

/**
 * Read-only, for the operator console: the leases running on this replica now (a bounded list, the ones
 * ending last first). Touches no resource and signs nothing; the same access rules as `status` apply.
 */
export interface LeasesRequest {
  readonly type: 'leases';
  readonly id: number;
  /** At most this many entries (1..MAX_LEASES_PER_REPLY). */
  readonly limit: number;
}

/** Every request a client may send after its hello. */
export type WireRequest = Request | LeasesRequest;
export type ClientMessage = Hello | WireRequest;

// ---------- replica → client ----------

export interface Challenge {
  readonly type: 'challenge';
  readonly nonce: Uint8Array;
  readonly clusterId: Uint8Array;
  readonly replica: number;
}

export interface Welcome {
  readonly type: 'welcome';
  readonly id: number;
  readonly replica: number;
  /**
   * The replica's epoch floor (docs/storage.md) when it is above 0: a resource it has no record of starts above it.
   * A client proposes a first acquire above its first signers' floors (docs/protocol.md, "Epoch choice").
   */
  readonly floor?: bigint;
}

/** Outcomes refused for every request type: bad bounds, or the access policy. */
export type CommonRefusal = { readonly status: 'invalid'; readonly message: string } | { readonly status: 'forbidden' };

export type AcquireOutcome =
  /**
   * `epoch` is present when the request asked for `nextEpoch`: the epoch the partial signs. `generation` is
   * the share generation the partial is signed with (the membershipVersion of the replica's cluster
   * description, docs/resharing.md); absent means 0, and a replica sends it only when it is not 0.
   */
  | {
      readonly status: 'granted';
      readonly partial: Uint8Array;
      readonly epoch?: bigint;
      readonly generation?: number;
      readonly floor?: bigint;
    }
  /** `epoch` is the highest epoch this replica has signed for the resource. */
  | { readonly status: 'stale'; readonly epoch: bigint; readonly floor?: bigint }
  | { readonly status: 'busy'; readonly epoch: bigint; readonly remainingMs: number; readonly floor?: bigint }
  | { readonly status: 'too_far'; readonly epoch: bigint; readonly floor?: bigint }
  | CommonRefusal;
// `floor` in an acquire's answer: the replica's epoch floor now, when above 0 (as in Welcome), so a client's view of
// it follows compaction without a reconnect.

export type RenewOutcome =
  | { readonly status: 'renewed'; readonly remainingMs: number }
  /** The caller is not the recorded holder of that epoch, or released it; `epoch` is the recorded one. */
  | { readonly status: 'not_holder'; readonly epoch: bigint }
  | CommonRefusal;

export type ReleaseOutcome =
  { readonly status: 'released' } | { readonly status: 'not_holder'; readonly epoch: bigint } | CommonRefusal;

export type StatusOutcome =
  /** `epoch` is 0 when the replica never signed for the resource. */
  | { readonly status: 'ok'; readonly epoch: bigint; readonly leased: boolean; readonly remainingMs: number }
  | CommonRefusal;

/** One running lease in a `leases` answer: this replica's word, checked by the console against f others. */
export interface ActiveLease {
  readonly resource: string;
  readonly epoch: bigint;
  /** The holder's Ed25519 key (32 bytes). */
  readonly holder: Uint8Array;
  readonly remainingMs: number;
}

export type LeasesOutcome =
  /** `more`: leases were left out to keep to the limit. */
  { readonly status: 'leases'; readonly leases: readonly ActiveLease[]; readonly more: boolean } | CommonRefusal;

export type Outcome = AcquireOutcome | RenewOutcome | ReleaseOutcome | StatusOutcome;

export interface OutcomeByRequest {
  acquire: AcquireOutcome;
  renew: RenewOutcome;
  release: ReleaseOutcome;
  status: StatusOutcome;
  leases: LeasesOutcome;
}

export interface Reply {
  readonly type: 'reply';
  readonly id: number;
  /** Validated against the request type by `parseOutcome` on the client, which knows what it asked. */
  readonly outcome: Readonly<Record<string, unknown>>;
}

/**
 * Error codes a replica sends in an error frame (the connection stays open). REPLICA_FROZEN: its signing
 * record is frozen for a reshare, so it answers no request with this share any more (docs/resharing.md);
 * a client counts it as a replica that cannot vote, like one that is down.
 */
export type WireErrorCode = 'RATE_LIMITED' | 'UNAUTHENTICATED' | 'INTERNAL' | 'PROTOCOL_ERROR' | 'REPLICA_FROZEN';

export interface ErrorMessage {
  readonly type: 'error';
  /** Absent when the offending frame had no usable id. */
  readonly id?: number;
  readonly code: WireErrorCode;
  readonly message: string;
}

/**
 * Pushed unasked to the connections a replica told that `resource` is held
 * (a `busy` acquire, or a status with `leased`), when its holder releases it: retry now instead of at the next poll. A hint,
 * not a proof: clients still poll, and a replica that sends false notices only
 * makes its clients ask again.
 */
export interface ReleasedNotice {
  readonly type: 'released';
  readonly resource: string;
}

/**
 * Pushed unasked to the connection whose waiting acquire (one with `waitMs` and `nextEpoch`) is now first in the
 * replica's line for `resource`: when the lease in the way ends, it will be granted at `epoch` unless someone
 * gets in first. The client can ask the other replicas for that epoch now, so that every replica grants it at
 * the same moment. A hint, not a proof: the other replicas apply their own rules.
 */
export interface TurnNotice {
  readonly type: 'turn';
  readonly resource: string;
  readonly epoch: bigint;
}

export type ServerMessage = Challenge | Welcome | Reply | ErrorMessage | ReleasedNotice | TurnNotice;
