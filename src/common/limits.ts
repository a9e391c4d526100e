/**
 * Bounds that the contract (docs/protocol.md) fixes. Limits that are tunable per
 * process live in that process's options object with a named default.
 */

/** Resource names are 1..256 UTF-8 bytes: long enough for paths and URNs, short enough to index. */
export const MAX_RESOURCE_BYTES = 256;

/** Epochs are u64 on the wire but capped at 2^63-1 so that signed 64-bit stores can hold them. */
export const MIN_EPOCH = 1n;
export const MAX_EPOCH = (1n << 63n) - 1n;
/**
 * Epoch steps (docs/protocol.md): a replica grants up to DEFAULT_FREE_EPOCH_STEP above its record without catch-up
 * evidence, and up to DEFAULT_MAX_EPOCH_STEP with evidence from fewer than f+1 replicas (or above its floor for a
 * resource it has no record of). Replicas may be configured otherwise; clients assume these.
 */
export const DEFAULT_FREE_EPOCH_STEP = 64n;
export const DEFAULT_MAX_EPOCH_STEP = 1_000_000n;

/**
 * No honest replica reports an epoch at or above this: an honest record rises by at most maxEpochStep (10^6) per
 * grant, so reaching 2^62 takes over 4·10^12 grants. A claim this high is a lie (the console convicts on it, a
 * reshare refuses it), and a lie below it still leaves at least 2^62 epochs per resource.
 */
export const HONEST_EPOCH_CEILING = 1n << 62n;

/** A replica, at N = 3f+1, needs N! to stay small enough for fast combining; 31 replicas (f = 10) is the supported top. */
export const MIN_REPLICAS = 4;
export const MAX_REPLICAS = 31;

/**
 * A cluster description's membershipVersion, which is also the share generation partials carry on the wire
 * (docs/resharing.md): a u32, far more reshares than a cluster will ever see.
 */
export const MAX_MEMBERSHIP_VERSION = 0xffff_ffff;
