/**
 * Every limit and timing of the client SDK, in one options object with named
 * defaults. Contradictory values are refused up front (INVALID_ARGUMENT), so
 * a misconfigured client fails at construction, not in the middle of a lease.
 */
import { QuorumFenceError } from '../common/errors.js';
import { systemClock, type Clock } from '../common/clock.js';
import { silentLogger, type Logger } from '../common/log.js';
import { DEFAULT_MAX_EPOCH_STEP } from '../common/limits.js';

export interface ClientOptions {
  /** Time source and timers (lease renewal and expiry, request deadlines, retries); injectable so tests run on fake time. Default: performance.now() and node's timers. */
  clock: Clock;
  /** Random numbers in [0, 1) for backoff jitter; injectable for deterministic tests. Default: Math.random. */
  random: () => number;
  /** Structured logger; the SDK is silent without one. */
  logger: Logger;

  /** Time from opening a socket to the replica's welcome. A silent replica costs a round at most this long. */
  handshakeTimeoutMs: number;
  /** First reconnect delay after a failed or dropped connection; doubles per failure, with jitter. */
  reconnectBaseMs: number;
  /** Ceiling of the reconnect delay: a restarted replica is found again within about this long. */
  reconnectMaxMs: number;
  /** Requests sent and unanswered on one connection; more wait in a queue (the replica refuses beyond its own bound). */
  maxInFlightPerReplica: number;
  /** Requests waiting for a slot on one connection; beyond it a request counts as unanswered at once. */
  maxQueuedPerReplica: number;
  /** Largest frame accepted from a replica. */
  maxFrameBytes: number;
  /**
   * Each connection pings its replica this often (0: never). A hung replica's ping goes unanswered and ages, so
   * acquires leave it out within about this long even when nothing else is in flight to it (docs/protocol.md,
   * "Slow replicas").
   */
  pingIntervalMs: number;

  /** Lease length asked for when acquire() is given no ttlMs. */
  defaultTtlMs: number;
  /** How long acquire() keeps trying beyond its wait time for the network (slow replicas, split votes). */
  acquireTimeoutMs: number;
  /** First delay before retrying a split vote or stale epoch; doubles per retry, with jitter. */
  retryBaseMs: number;
  /** Ceiling of that retry delay. */
  retryMaxMs: number;
  /**
   * Once 2f+1 replicas answered an acquire without producing a token, how long (at least) the others still get
   * before the attempt is retried: long enough for an honest fsync, short enough that a silent replica
   * cannot stall contended acquires.
   */
  stragglerMinMs: number;
  /**
   * The replicas' maxEpochStep (docs/protocol.md, "Epoch steps"): how far a lagging replica is asked to move in one
   * catch-up step when fewer than f+1 others' partials vouch for the epoch. Set it to the replicas' value if they
   * were started with another.
   */
  maxEpochStep: bigint;
  /** While a resource is busy, poll at least this often. Replicas push a notice when the holder releases; polling covers a lease that simply runs out, and a replica that never sends the notice. */
  busyPollMs: number;

  /** Share of the ttl kept as a margin at the end of the holder's lease view (clock rate differences between processes). */
  expiryMarginFraction: number;
  /** Smallest margin in milliseconds (scheduling delays dominate short ttls). */
  minExpiryMarginMs: number;
  /** Renew automatically when this share of the ttl has passed since the last successful (re)acquire. */
  renewAtFraction: number;
  /** Time allowed for one renew or release round. */
  requestTimeoutMs: number;

  /** Transferable evidence items kept (oldest dropped first). */
  maxEvidence: number;
  /** Resources whose last granted epoch is remembered, so a repeat acquire skips the status round. */
  epochHintCacheSize: number;
  /** Valid partials remembered per (replica, resource, epoch) to catch a replica signing two holders. */
  partialMemorySize: number;
}

export const DEFAULT_CLIENT_OPTIONS: Readonly<ClientOptions> = Object.freeze({
  clock: systemClock,
  random: Math.random,
  logger: silentLogger,
  // Loopback handshakes take a millisecond; a WAN one a few hundred. Two seconds tolerates both.
  handshakeTimeoutMs: 2000,
  reconnectBaseMs: 50,
  reconnectMaxMs: 2000,
  // Matches the replica's default per-connection bound, so the client never trips it alone.
  maxInFlightPerReplica: 64,
  // A few thousand concurrent operations per client; past that the caller is overloading itself.
  maxQueuedPerReplica: 4096,
  maxFrameBytes: 16 * 1024,
  // Four pings a second per replica cost nothing, and see a replica hang within a few hundred ms.
  pingIntervalMs: 250,
  defaultTtlMs: 10_000,
  acquireTimeoutMs: 5000,
  // Split votes resolve once one contender goes first; a few ms of jitter on loopback is enough, 250 ms on a WAN.
  retryBaseMs: 2,
  retryMaxMs: 250,
  stragglerMinMs: 20,
  maxEpochStep: DEFAULT_MAX_EPOCH_STEP,
  busyPollMs: 50,
  // 1% of the ttl is ~100x the worst rate error of an NTP-slewed clock (500 ppm).
  expiryMarginFraction: 0.01,
  minExpiryMarginMs: 20,
  // Renewing at half the ttl leaves the other half for a retry or two when a replica is slow.
  renewAtFraction: 0.5,
  requestTimeoutMs: 2000,
  maxEvidence: 64,
  epochHintCacheSize: 1024,
  partialMemorySize: 4096,
});

function positive(value: number, field: string, min = 0, integer = true): void {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < min || (integer && !Number.isInteger(value))) {
    throw new QuorumFenceError(
      'INVALID_ARGUMENT',
      `"${field}" expected ${integer ? 'an integer' : 'a number'} >= ${min}, got ${String(value)}`,
      {
        field,
      },
    );
  }
}

/** Integer options and the least each may be (a ttl, a timeout or a poll of 0 would never let a call end or start). */
const INTEGER_MINIMUMS: Readonly<Record<string, number>> = {
  handshakeTimeoutMs: 1,
  reconnectBaseMs: 0,
  reconnectMaxMs: 0,
  maxInFlightPerReplica: 1,
  maxQueuedPerReplica: 0,
  maxFrameBytes: 0,
  pingIntervalMs: 0,
  defaultTtlMs: 1,
  acquireTimeoutMs: 0,
  retryBaseMs: 0,
  retryMaxMs: 0,
  busyPollMs: 1,
  stragglerMinMs: 0,
  minExpiryMarginMs: 0,
  requestTimeoutMs: 1,
  maxEvidence: 0,
  epochHintCacheSize: 0,
  partialMemorySize: 0,
};

function refuse(field: string, message: string): never {
  throw new QuorumFenceError('INVALID_ARGUMENT', message, { field });
}

/** The defaults with the caller's values on top; an unknown name is refused. */
function mergeClientOptions(options: Partial<ClientOptions>): ClientOptions {
  const o: ClientOptions = { ...DEFAULT_CLIENT_OPTIONS };
  for (const [key, value] of Object.entries(options)) {
    if (value === undefined) continue;
    if (!(key in DEFAULT_CLIENT_OPTIONS)) refuse(key, `unknown client option "${key}"`);
    (o as unknown as Record<string, unknown>)[key] = value;
  }
  return o;
}

/** Values that contradict each other, or are not what their field holds. */
function checkRelations(o: ClientOptions): void {
  if (typeof o.maxEpochStep !== 'bigint' || o.maxEpochStep < 1n || o.maxEpochStep > DEFAULT_MAX_EPOCH_STEP)
    refuse('maxEpochStep', `"maxEpochStep" expected a bigint in 1..${DEFAULT_MAX_EPOCH_STEP}`);
  if (o.expiryMarginFraction >= 0.5) refuse('expiryMarginFraction', '"expiryMarginFraction" must be below 0.5');
  if (o.renewAtFraction <= 0 || o.renewAtFraction >= 1)
    refuse('renewAtFraction', '"renewAtFraction" must be in (0, 1)');
  if (o.reconnectMaxMs < o.reconnectBaseMs) refuse('reconnectMaxMs', '"reconnectMaxMs" must be >= "reconnectBaseMs"');
  if (o.retryMaxMs < o.retryBaseMs) refuse('retryMaxMs', '"retryMaxMs" must be >= "retryBaseMs"');
  if (typeof o.clock?.now !== 'function') refuse('clock', '"clock" expected an object with now()');
  if (typeof o.random !== 'function') refuse('random', '"random" expected a function');
}

/**
 * Fills defaults and refuses contradictory values.
 * @throws QuorumFenceError INVALID_ARGUMENT naming the field.
 */
export function resolveClientOptions(options: Partial<ClientOptions> = {}): ClientOptions {
  const o = mergeClientOptions(options);
  for (const [key, min] of Object.entries(INTEGER_MINIMUMS))
    positive((o as unknown as Record<string, number>)[key]!, key, min);
  positive(o.expiryMarginFraction, 'expiryMarginFraction', 0, false);
  positive(o.renewAtFraction, 'renewAtFraction', 0, false);
  checkRelations(o);
  return o;
}
