/**
 * Every tunable limit of a replica, in one object with named defaults.
 * Contradictory settings are refused up front, not discovered under load.
 */
import { QuorumFenceError } from '../common/errors.js';
import { DEFAULT_FREE_EPOCH_STEP, DEFAULT_MAX_EPOCH_STEP } from '../common/limits.js';
import { DEFAULT_MAX_FRAME_BYTES } from '../protocol/codec.js';
import { OPEN_ACCESS, type AccessRules } from './access.js';
import type { PolicyConfig } from './policy.js';

export interface ReplicaLimits {
  /** Largest WebSocket frame accepted; larger ones close the connection with 1009. */
  readonly maxFrameBytes: number;
  /** Requests a connection may have unanswered; more get RATE_LIMITED. */
  readonly maxInFlightPerConnection: number;
  /** Token-bucket refill rate per connection; over it, requests get RATE_LIMITED. */
  readonly requestsPerSecondPerConnection: number;
  /** Token-bucket size: how many requests a connection may send in one burst. */
  readonly burstPerConnection: number;
  /** RATE_LIMITED answers in a row after which the connection is closed with 1008. */
  readonly maxConsecutiveRateLimited: number;
  /** Open connections (authenticated or not); more are refused at the upgrade with 503. */
  readonly maxConnections: number;
  /**
   * Connections from one address prefix (an IPv4 address, an IPv6 /64) that have not authenticated yet; a newcomer
   * beyond it displaces the prefix's oldest one. Stops one host from holding many slots with sockets that never
   * say hello (each lives up to authTimeoutMs).
   */
  readonly maxUnauthenticatedPerAddress: number;
  /**
   * Connections that have not authenticated yet, from all addresses; a newcomer beyond it (or beyond
   * maxConnections) displaces the oldest unauthenticated connection of the prefix holding the most.
   */
  readonly maxUnauthenticated: number;
  /** Time a new connection has to authenticate before it is closed with 1008. */
  readonly authTimeoutMs: number;
  /** Replies queued for a client that does not read; above this the connection is dropped. */
  readonly maxBufferedBytesPerConnection: number;
  /** Shortest lease a client may ask for. */
  readonly minTtlMs: number;
  /** Longest lease a client may ask for; also how long every recorded lease runs after a restart. */
  readonly maxTtlMs: number;
  /**
   * How far above its record for a resource an acquire may go without catch-up evidence (docs/protocol.md,
   * "Epoch steps"): how far one client can push this replica ahead of the others per grant.
   */
  readonly freeEpochStep: bigint;
  /**
   * How far above the record an acquire may go with evidence from fewer than f+1 other replicas, and above the
   * floor without evidence for a resource with no record (stops epoch exhaustion).
   */
  readonly maxEpochStep: bigint;
  /** Catch-up evidence partials one connection may have checked per second (and in one burst): each is a pairing. */
  readonly evidenceChecksPerSecondPerConnection: number;
  /** The same for one identity (holder key), over all its connections: more connections buy no more checks. */
  readonly evidenceChecksPerSecondPerIdentity: number;
  /**
   * The same for the whole replica, over every identity (also the most checks ever waiting): what any number of
   * identities can make the replica verify.
   */
  readonly evidenceChecksPerSecond: number;
  /**
   * `leases` requests one connection may send per second (and in one burst), on top of the request rate; over it
   * they get RATE_LIMITED. Each answer walks up to MAX_LEASES_EXAMINED entries of the lease index.
   */
  readonly leasesPerSecondPerConnection: number;
  /** Signing threads; 0 signs on the main thread. */
  readonly signingWorkers: number;
  /** How long SIGTERM waits for in-flight requests before closing connections anyway. */
  readonly shutdownTimeoutMs: number;
  /** Resources whose `busy` waiters are remembered, to be told of a release (oldest forgotten first). */
  readonly maxWatchedResources: number;
  /** Waiters remembered per resource; beyond it, the others find the release by polling. */
  readonly maxWaitersPerResource: number;
  /**
   * How long a record is kept after its grant once its lease has ended, before compaction may fold it into
   * the floor (wall-clock ms). Within it, a late resend, renew or release still finds its record.
   */
  readonly retentionMs: number;
  /** How often compaction runs. */
  readonly compactionIntervalMs: number;
}

/** An acquire with a 256-byte resource and evidence from f+1 = 11 replicas (the largest cluster) is about 1.8 KiB. */
const MIN_FRAME_BYTES = 4096;

export const DEFAULT_REPLICA_LIMITS: ReplicaLimits = {
  maxFrameBytes: DEFAULT_MAX_FRAME_BYTES,
  // A client pipelines one acquire per resource it contends for; 64 covers a busy service, and bounds memory per socket.
  maxInFlightPerConnection: 64,
  // A well-behaved holder renews a lease a few times per ttl; 1,000/s per connection leaves room for batch jobs.
  requestsPerSecondPerConnection: 1_000,
  burstPerConnection: 1_000,
  // Ten full bursts of refusals in a row is not a client backing off.
  maxConsecutiveRateLimited: 10_000,
  // Each connection costs a socket and a few KiB; 10,000 fits in a small container.
  maxConnections: 10_000,
  // A client authenticates within a round trip; 64 handshakes at once covers a fleet behind one NAT address,
  // and keeps one host from tying up more than 64 of the 10,000 slots for authTimeoutMs each.
  maxUnauthenticatedPerAddress: 64,
  // A fleet of thousands reconnecting at once after a restart completes its handshakes in a few round trips at
  // 1,024 at a time; idle sockets from many hosts then hold at most a tenth of the default slots.
  maxUnauthenticated: 1_024,
  // A client signs one challenge; 10 s allows for a slow link, and bounds idle unauthenticated sockets.
  authTimeoutMs: 10_000,
  // 1 MiB is thousands of replies: a client that far behind is not reading.
  maxBufferedBytesPerConnection: 1024 * 1024,
  // Below 100 ms a lease ends before a renewal can cross a WAN.
  minTtlMs: 100,
  // One minute: a crashed holder blocks a resource at most this long, and so does a replica restart.
  maxTtlMs: 60_000,
  // Honest replicas drift apart by a few epochs per contended handoff (split votes, released partial grants); 64
  // absorbs that without evidence, while a client alone pushes one replica ahead by at most 64 per grant, so a
  // catch-up step of maxEpochStep covers over 15,000 of its grants.
  freeEpochStep: DEFAULT_FREE_EPOCH_STEP,
  // A million acquisitions per resource can never exhaust 2^63 epochs in practice, yet lagging replicas can catch up.
  maxEpochStep: DEFAULT_MAX_EPOCH_STEP,
  // An honest client sends evidence only after a too_far answer, one partial per other replica: 32 a second is
  // several catch-ups a second, and bounds what one connection can make the replica verify to ~3% of a core.
  evidenceChecksPerSecondPerConnection: 32,
  // One identity's connections share what one connection may have: an honest client catches up over one connection
  // per replica, and a flood over 64 connections then costs what one does.
  evidenceChecksPerSecondPerIdentity: 32,
  // Four identities' worth: about an eighth of a core here (a pairing is ~1 ms, a batch that fails costs each check
  // about twice), whoever asks. An honest catch-up needs f+1 checks at most.
  evidenceChecksPerSecond: 128,
  // The console asks once per poll, and its shortest interval is 100 ms: 10 a second serves it, and bounds what one
  // connection can make the replica spend on them to ~1% of a core (each answer is at most ~1 ms of record reads).
  leasesPerSecondPerConnection: 10,
  // One thread takes bursts of signing off a busy event loop: measured on 2 cores (src/bench/replica.ts), median
  // durable grants/s were 1,126 in-thread, 1,446 with one thread, 2,319 with two. More threads pay only on a host
  // whose cores the replica does not share, so one is the default and --signing-workers raises it. While the event
  // loop is not busy, signatures are made in its own thread (signer.ts): no hand-off to pay for.
  signingWorkers: 1,
  shutdownTimeoutMs: 10_000,
  // A notice is only a hint (clients still poll), so forgetting waiters costs latency, never correctness:
  // 10,000 contended resources and 256 waiters each bound the memory at a few MiB.
  maxWatchedResources: 10_000,
  maxWaitersPerResource: 256,
  // Ten default maxTtls: a holder's late release or renewal still finds its record, and the store
  // holds the resources of the last ten minutes (a few MB at thousands of new resources a second).
  retentionMs: 600_000,
  // Each run looks at every record (in batches), and the store holds only recent ones; once a minute
  // keeps that off the hot path while the store stays within about one interval of the retention window.
  compactionIntervalMs: 60_000,
};

function bad(field: string, message: string): never {
  throw new QuorumFenceError('INVALID_OPTION', `replica option "${field}" ${message}`, { field });
}

function positiveInteger(limits: ReplicaLimits, field: keyof ReplicaLimits, min = 1): void {
  const value = limits[field];
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min)
    bad(field, `expected an integer >= ${min}, got ${String(value)}`);
}

/**
 * Fills defaults and checks the result.
 * @throws QuorumFenceError INVALID_OPTION naming the field
 */
export function replicaLimits(overrides: Partial<ReplicaLimits> = {}): ReplicaLimits {
  const limits: ReplicaLimits = {
    ...DEFAULT_REPLICA_LIMITS,
    ...Object.fromEntries(Object.entries(overrides).filter(([, v]) => v !== undefined)),
  };
  for (const field of [
    'maxFrameBytes',
    'maxInFlightPerConnection',
    'requestsPerSecondPerConnection',
    'burstPerConnection',
    'maxConsecutiveRateLimited',
    'maxConnections',
    'maxUnauthenticatedPerAddress',
    'maxUnauthenticated',
    'authTimeoutMs',
    'maxBufferedBytesPerConnection',
    'minTtlMs',
    'maxTtlMs',
    'shutdownTimeoutMs',
    'maxWatchedResources',
    'maxWaitersPerResource',
    'retentionMs',
    'compactionIntervalMs',
    'evidenceChecksPerSecondPerConnection',
    'evidenceChecksPerSecondPerIdentity',
    'evidenceChecksPerSecond',
    'leasesPerSecondPerConnection',
  ] as const) {
    positiveInteger(limits, field);
  }
  positiveInteger(limits, 'signingWorkers', 0);
  if (limits.signingWorkers > 64) bad('signingWorkers', `expected at most 64, got ${limits.signingWorkers}`);
  // The codec's lease fields are u31 milliseconds.
  if (limits.maxTtlMs > 0x7fff_ffff) bad('maxTtlMs', 'must fit in 2^31-1 ms');
  if (limits.minTtlMs > limits.maxTtlMs)
    bad('minTtlMs', `(${limits.minTtlMs}) must not exceed maxTtlMs (${limits.maxTtlMs})`);
  // setInterval's delay is a signed 32-bit number of ms.
  if (limits.compactionIntervalMs > 0x7fff_ffff) bad('compactionIntervalMs', 'must fit in 2^31-1 ms');
  if (limits.maxFrameBytes < MIN_FRAME_BYTES)
    bad(
      'maxFrameBytes',
      `must be at least ${MIN_FRAME_BYTES} bytes: an acquire with a 256-byte resource and f+1 pieces of evidence must fit`,
    );
  // Above the default, an honest replica's epochs could approach HONEST_EPOCH_CEILING, which the console and the
  // reshare treat as a lie; a smaller step only means more catch-up steps.
  if (
    typeof limits.maxEpochStep !== 'bigint' ||
    limits.maxEpochStep < 1n ||
    limits.maxEpochStep > DEFAULT_MAX_EPOCH_STEP
  )
    bad('maxEpochStep', `expected a bigint in 1..${DEFAULT_MAX_EPOCH_STEP}`);
  if (typeof limits.freeEpochStep !== 'bigint' || limits.freeEpochStep < 1n)
    bad('freeEpochStep', 'expected a bigint >= 1');
  if (limits.freeEpochStep > limits.maxEpochStep)
    bad('freeEpochStep', `(${limits.freeEpochStep}) must not exceed maxEpochStep (${limits.maxEpochStep})`);
  return limits;
}

/** The replica rules' configuration (policy.ts) for a cluster (its id and f) under these limits. */
export function policyConfig(
  cluster: { readonly id: Uint8Array; readonly f: number },
  limits: ReplicaLimits,
  access: AccessRules = OPEN_ACCESS,
): PolicyConfig {
  return {
    clusterId: cluster.id,
    minTtlMs: limits.minTtlMs,
    maxTtlMs: limits.maxTtlMs,
    freeEpochStep: limits.freeEpochStep,
    maxEpochStep: limits.maxEpochStep,
    faultTolerance: cluster.f,
    access,
  };
}
