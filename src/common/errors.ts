/**
 * The one error class of quorumfence. Expected outcomes (a busy lock, a stale
 * epoch, a refused write) are returned as `{ ok: false, reason }` values; this
 * class is thrown only for programmer errors, bad input at a boundary, and
 * system failures. Each code is stable: docs and tests name it, never the message.
 */
export type ErrorCode =
  // --- caller misuse ---
  /** An argument to a public function has the wrong type, shape or range. */
  | 'INVALID_ARGUMENT'
  /** A command-line flag is unknown, missing its value, or has a bad value. */
  | 'INVALID_OPTION'
  /** The object was used after it was closed or disposed. */
  | 'CLOSED'

  // --- byte decoding (tokens, points, keys): one code per way bytes can be wrong ---
  /** A byte field or encoding has the wrong length. */
  | 'BAD_LENGTH'
  /** Bytes remain after a complete value was decoded. */
  | 'TRAILING_BYTES'
  /** A version byte or format string this build does not know. */
  | 'UNKNOWN_VERSION'
  /** An epoch outside 1 .. 2^63-1. */
  | 'EPOCH_OUT_OF_RANGE'
  /** A resource name with zero bytes. */
  | 'RESOURCE_EMPTY'
  /** A resource name longer than 256 UTF-8 bytes. */
  | 'RESOURCE_TOO_LONG'
  /** A resource name that is not well-formed UTF-8. */
  | 'RESOURCE_NOT_UTF8'
  /**
   * A resource name or guard data key holding a control character (U+0000..U+001F or U+007F):
   * refused everywhere (replica, client, guards, resource, token decoder) so no store can confuse two names.
   */
  | 'NAME_CONTROL_CHARACTER'
  /** A point encoding with bad flag bits or a coordinate not below the field modulus. */
  | 'POINT_NOT_CANONICAL'
  /** A point whose x coordinate has no matching y on the curve. */
  | 'POINT_NOT_ON_CURVE'
  /** A point on the curve but outside the prime-order subgroup. */
  | 'POINT_NOT_IN_SUBGROUP'
  /** The point at infinity, which is never a valid key or signature here. */
  | 'POINT_IDENTITY'
  /** Text that should be base64url or hex is not. */
  | 'BAD_ENCODING'

  // --- keys and clusters ---
  /** A cluster description fails a check; the message names the field. */
  | 'BAD_CLUSTER'
  /** A cluster id given or stored does not match the cluster description. */
  | 'CLUSTER_MISMATCH'
  /** A key share does not match the published commitments or its public share. */
  | 'SHARE_MISMATCH'
  /** A key file (replica share or client identity) is malformed. */
  | 'BAD_KEY_FILE'
  /** A file that must not be overwritten already exists. */
  | 'FILE_EXISTS'
  /** A file to be written or erased exists and is not a regular file (a symbolic link, a directory, a device); nothing was written. */
  | 'NOT_A_REGULAR_FILE'
  /** A file or directory could not be read or written. */
  | 'IO_ERROR'
  /** The requested crypto backend cannot be loaded on this machine. */
  | 'BACKEND_UNAVAILABLE'
  /** An optional peer dependency a feature needs is not installed (`pg` for the PostgreSQL guard). */
  | 'DEPENDENCY_MISSING'
  /** A key ceremony proposal or member card is malformed, or does not name this member. */
  | 'BAD_PROPOSAL'
  /** The key ceremony stopped without a key (members missing, too few qualified dealers, disagreement); nothing was written and it can be run again. */
  | 'CEREMONY_ABORTED'
  /** A reshare cannot go ahead: too few old members' signing records, records from the wrong cluster, or the old key does not match. */
  | 'RESHARE_REFUSED'
  /** A candidate membership (cluster description) is not newer than the one held: its membershipVersion is not higher. */
  | 'MEMBERSHIP_NOT_NEWER'
  /** A membership description has no endorsement by the group key, or one that does not verify over its contents. */
  | 'MEMBERSHIP_NOT_ENDORSED'
  /** This member's share already endorsed another description at the same membership version (its endorsement record); nothing was signed. */
  | 'MEMBERSHIP_ALREADY_ENDORSED'

  // --- storage ---
  /** The on-disk store is unreadable, inconsistent, or from another cluster or replica. */
  | 'STORE_CORRUPT'
  /** The data directory is in use by another live process (a second replica on one store could sign twice). */
  | 'STORE_LOCKED'
  /**
   * A replica's data directory holds no signing record, and nothing said the replica is new: it never creates one
   * by itself (an empty record would sign again what it signed before). The message names the commands that do.
   */
  | 'STORE_MISSING'
  /** An interchange (export/import) file is malformed or from another cluster. */
  | 'BAD_INTERCHANGE'
  /** This replica's signing record is frozen for a reshare: it signs nothing more with this share. */
  | 'REPLICA_FROZEN'
  /** A signed export of a signing record was asked for, but the record is not frozen; nothing was signed. */
  | 'EXPORT_NOT_FROZEN'
  /** `reshare inherit` was given an unsigned export (v1 or v2): it cannot show who wrote it or that its record was frozen. */
  | 'EXPORT_UNSIGNED'
  /** A frozen export's signature does not verify under its replica's public share over its contents (relabelled or changed). */
  | 'EXPORT_SIGNATURE_INVALID'
  /** A frozen export claims an epoch or floor at or above 2^62, which no honest replica reaches: its replica lies; nothing was written. */
  | 'EXPORT_IMPOSSIBLE_EPOCH'
  /**
   * `reshare inherit` with fewer than all old replicas' exports would inherit a value far above what f_old+1 of them
   * back, which f_old liars could have set; nothing was written: give more exports.
   */
  | 'EXPORT_UNBACKED_EPOCH'

  // --- wire ---
  /** A frame is malformed, oversized, of an unknown type, or out of order. */
  | 'PROTOCOL_ERROR'
  /** Authentication failed or was not done before a request. */
  | 'UNAUTHENTICATED'
  /** Too many requests in flight or per second on one connection. */
  | 'RATE_LIMITED'
  /** The connection closed or could not be opened. */
  | 'CONNECTION_FAILED'
  /** An operation ran past its deadline. */
  | 'TIMEOUT'
  /** A lease ended (expired, lost to another holder, released, or its client closed) while work still depended on it. */
  | 'LEASE_LOST'
  /** The server hit an unexpected internal failure (a bug, or storage failing). */
  | 'INTERNAL';

export class QuorumFenceError extends Error {
  override readonly name = 'QuorumFenceError';
  readonly code: ErrorCode;
  /** Structured context for logs (field name, limits); never secrets. */
  readonly details: Readonly<Record<string, unknown>> | undefined;

  constructor(code: ErrorCode, message: string, details?: Record<string, unknown>, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.details = details;
  }
}

/** True when `error` is a QuorumFenceError, optionally with the given code. */
export function isQuorumFenceError(error: unknown, code?: ErrorCode): error is QuorumFenceError {
  return error instanceof QuorumFenceError && (code === undefined || error.code === code);
}
