/**
 * What the replica's log says about an answered request (docs/operations.md, "Logs"): the fields of a
 * `grant` line and of a `refusal` line, with stable names, from the request, the holder and the outcome
 * (pure functions), and RequestLog, which writes them: the grant line's level, the refusals' LogLimiter,
 * the periodic summaries.
 */
import { toHex } from '../common/bytes.js';
import type { MonotonicClock } from '../common/clock.js';
import type { Logger } from '../common/log.js';
import { LogLimiter, SUPPRESSED_SUMMARY_INTERVAL_MS } from '../common/log-limiter.js';
import type { LeasesOutcome, Outcome, WireRequest } from '../protocol/messages.js';
import type { RefusalReason } from './metrics.js';

const REFUSAL_REASONS: ReadonlySet<string> = new Set<RefusalReason>([
  'invalid',
  'forbidden',
  'stale',
  'busy',
  'too_far',
  'not_holder',
]);

/**
 * A valid resource name is at most 256 UTF-8 bytes, so at most 256 characters: this keeps every valid name
 * whole and bounds what an invalid request puts on a line.
 */
const MAX_LOGGED_RESOURCE_CHARS = 256;
/** The replica's own explanation of an `invalid` answer, bounded like the resource. */
const MAX_LOGGED_DETAIL_CHARS = 200;

/** The refusal reason of an outcome, or undefined for an answer that is not a refusal. */
export function refusalReasonOf(outcome: Outcome | LeasesOutcome): RefusalReason | undefined {
  return REFUSAL_REASONS.has(outcome.status) ? (outcome.status as RefusalReason) : undefined;
}

export interface GrantLine {
  readonly event: 'grant';
  readonly resource: string;
  /** Decimal: epochs go up to 2^63-1, beyond what a JSON number holds exactly. */
  readonly epoch: string;
  /** The holder's Ed25519 key, 64 hex characters (the key the client authenticated with). */
  readonly holder: string;
  readonly ttlMs: number;
}

export interface RefusalLine {
  readonly event: 'refusal';
  readonly reason: RefusalReason;
  /** The request type: acquire, renew, release, status, leases. */
  readonly type: WireRequest['type'];
  readonly resource?: string;
  /** The epoch the request named (decimal), when it names one. */
  readonly epoch?: string;
  /** The epoch the answer carries (decimal): the replica's record for stale, busy, too_far and not_holder. */
  readonly recordEpoch?: string;
  readonly holder: string;
  /** For `invalid`: what was wrong, in the replica's words. */
  readonly detail?: string;
}

/** The fields of a `grant` line: an acquire answered `granted` (a fresh grant or an identical re-request). */
export function grantLine(request: WireRequest, holder: Uint8Array, outcome: Outcome): GrantLine | undefined {
  if (request.type !== 'acquire' || outcome.status !== 'granted') return undefined;
  return {
    event: 'grant',
    resource: request.resource,
    // A request that waited its turn with nextEpoch was granted at the epoch its answer names.
    epoch: (outcome.epoch ?? request.epoch).toString(),
    holder: toHex(holder),
    ttlMs: request.ttlMs,
  };
}

/** The fields of a `refusal` line, or undefined when the outcome is not a refusal. */
export function refusalLine(
  request: WireRequest,
  holder: Uint8Array,
  outcome: Outcome | LeasesOutcome,
): RefusalLine | undefined {
  const reason = refusalReasonOf(outcome);
  if (reason === undefined) return undefined;
  const named = 'resource' in request ? request.resource : undefined;
  const epoch = 'epoch' in request ? request.epoch : undefined;
  const recordEpoch = 'epoch' in outcome ? (outcome.epoch as bigint | undefined) : undefined;
  return {
    event: 'refusal',
    reason,
    type: request.type,
    ...(typeof named === 'string' ? { resource: named.slice(0, MAX_LOGGED_RESOURCE_CHARS) } : {}),
    ...(typeof epoch === 'bigint' ? { epoch: epoch.toString() } : {}),
    ...(typeof recordEpoch === 'bigint' ? { recordEpoch: recordEpoch.toString() } : {}),
    holder: toHex(holder),
    ...(outcome.status === 'invalid' ? { detail: outcome.message.slice(0, MAX_LOGGED_DETAIL_CHARS) } : {}),
  };
}

/**
 * The level of the per-grant line: debug, off by default. A grant is the hot path: an info line costs about
 * 5 us of CPU and, written synchronously to a pipe on a busy 2-core machine, 75-90 us of waiting, against
 * about 1 ms for the whole grant. At info the replica writes a count of grants every summary interval instead,
 * and refusals (which the runbooks read) one by one, limited per reason.
 */
export const GRANT_LOG_LEVEL = 'debug';

/**
 * Writes the replica's request lines: `grant` (at GRANT_LOG_LEVEL), `refusal` (info, through the limiter,
 * per reason), and every SUPPRESSED_SUMMARY_INTERVAL_MS a `grants` count and a `suppressed` line per kind of
 * line the limiter held back. Its limiter also serves the admin endpoint's refused requests.
 */
export class RequestLog {
  readonly limiter = new LogLimiter();
  readonly #logger: Logger;
  readonly #clock: MonotonicClock;
  /** Whether a line would be written (checked once: no line is built for a level that is off). */
  readonly #logsGrants: boolean;
  readonly #logsRefusals: boolean;
  #grantsSinceSummary = 0;
  readonly #timer: NodeJS.Timeout;

  constructor(logger: Logger, clock: MonotonicClock) {
    this.#logger = logger;
    this.#clock = clock;
    this.#logsGrants = logger.isLevelEnabled(GRANT_LOG_LEVEL);
    this.#logsRefusals = logger.isLevelEnabled('info');
    this.#timer = setInterval(() => this.#summarise(), SUPPRESSED_SUMMARY_INTERVAL_MS);
    this.#timer.unref();
  }

  /** After the answer to `request` from `holder` is sent. */
  answered(request: WireRequest, holder: Uint8Array, outcome: Outcome | LeasesOutcome): void {
    if (outcome.status === 'granted') {
      this.#grantsSinceSummary++;
      if (this.#logsGrants) this.#logger[GRANT_LOG_LEVEL](grantLine(request, holder, outcome), 'granted');
      return;
    }
    if (!this.#logsRefusals) return;
    const reason = refusalReasonOf(outcome);
    if (reason === undefined || !this.limiter.admit(`refusal:${reason}`, this.#clock.now())) return;
    this.#logger.info(refusalLine(request, holder, outcome), 'refused');
  }

  /** Stops the summaries, writing the last one. */
  close(): void {
    clearInterval(this.#timer);
    this.#summarise();
  }

  #summarise(): void {
    if (this.#grantsSinceSummary > 0) {
      this.#logger.info(
        { event: 'grants', count: this.#grantsSinceSummary, windowMs: SUPPRESSED_SUMMARY_INTERVAL_MS },
        'grants signed',
      );
      this.#grantsSinceSummary = 0;
    }
    for (const { key, count } of this.limiter.drain()) {
      // Keys are `event` or `event:reason` (refusal:invalid, admin_refused).
      const [of, reason] = key.split(':');
      this.#logger.info(
        { event: 'suppressed', of, ...(reason ? { reason } : {}), count, windowMs: SUPPRESSED_SUMMARY_INTERVAL_MS },
        'log lines suppressed',
      );
    }
  }
}
