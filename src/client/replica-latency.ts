/**
 * How quickly one replica answers this client (docs/protocol.md, "Slow replicas"). The connection reports each
 * request it sends and each answer it gets, late ones included (an answer to a request its caller stopped waiting for
 * still says how fast the replica is), and the pings it sends to see that the replica is alive. The estimate is the
 * slowest of: the smoothed time of its grants (acquire answers), the smoothed time of its other answers, the smoothed
 * time of its pongs, and the age of its oldest unanswered request or ping. A replica can make itself look slow, by
 * answering late or not at all, but not fast: only its own answers make samples, a replica fast at some requests and
 * slow at grants is judged by its grants, and anything it leaves unanswered counts against it for as long as it
 * stays so. The pongs keep a slow link measured while the client sends the replica nothing else (a lease held a
 * moment is never joined, and its release is not answered): without them such a replica was asked for a grant again
 * each time its grant time was forgotten, and that grant was a slow cycle.
 *
 * A grant time is forgotten once nothing has renewed it for GRANT_SAMPLE_MS: a replica left out of the first signers
 * for being slow is asked for grants again then (one attempt whose straggler timer bounds its cost), so one that
 * recovered is used again. Pure: the connection passes the times.
 */
import type { RequestBody, RequestKind } from './replica-channel.js';

/**
 * Whether a request's answer time says how fast the replica is: every request but an acquire that may wait its turn
 * in a line (it is answered when its turn comes, on purpose late).
 */
export function answersPromptly(body: RequestBody<RequestKind>): boolean {
  return body.type !== 'acquire' || ((body as RequestBody<'acquire'>).waitMs ?? 0) === 0;
}

/** What an answer time measures: a grant (it waits for a record's flush), any other answer, or a ping (liveness). */
export type LatencyKind = 'grant' | 'other' | 'ping';

/** Weight of a new sample: a replica that recovers is trusted again after a handful of quick answers. */
const SMOOTHING = 0.25;
/** Unanswered requests remembered per replica: enough to see a hung replica, bounded whatever it does. */
const MAX_PENDING = 64;
/**
 * An unanswered request counts once it is this old. Younger ones say nothing yet: on a busy machine a replica's event
 * loop stalls for tens of milliseconds (a collection, a flush), and counting every request in flight at its age made
 * a healthy replica look slow at random instants, so that clients disagreed about a resource's leader and lines lost
 * their order. A replica that answers late is still judged by its answers; one that does not answer at all is seen
 * as slow this long after it stopped.
 */
export const PENDING_COUNTS_AFTER_MS = 100;
/** How long a grant time counts without a new one (see the header). */
export const GRANT_SAMPLE_MS = 2_000;

interface Pending {
  readonly at: number;
  readonly kind: LatencyKind;
}

export class ReplicaLatency {
  #grantMs: number | undefined;
  #grantAt = 0;
  #otherMs: number | undefined;
  #pingMs: number | undefined;
  /** Request (or ping) key → when it left, in the order they left; answered or lost ones are removed. */
  readonly #pending = new Map<string, Pending>();

  /** Request (or ping) `key` of `kind` left at `at` (client ms). */
  sent(key: string, kind: LatencyKind, at: number): void {
    if (this.#pending.size < MAX_PENDING) this.#pending.set(key, { at, kind });
  }

  /** The answer to `key` (reply, error frame, pong) came at `at`, whether or not anyone still waits for it. */
  answered(key: string, at: number): void {
    const sent = this.#pending.get(key);
    if (sent === undefined) return;
    this.#pending.delete(key);
    const sample = Math.max(0, at - sent.at);
    if (sent.kind === 'grant') {
      this.#grantMs = smooth(this.#grantMs, sample);
      this.#grantAt = at;
    } else if (sent.kind === 'other') this.#otherMs = smooth(this.#otherMs, sample);
    else this.#pingMs = smooth(this.#pingMs, sample);
  }

  /** The connection dropped: nothing sent on it will be answered, and the next one starts with a clean slate. */
  lost(): void {
    this.#pending.clear();
  }

  /** The replica's answer time as of `now` (the header); undefined before anything was measured. */
  estimateMs(now: number): number | undefined {
    let estimate: number | undefined;
    const slowest = (ms: number | undefined) => {
      if (ms !== undefined && (estimate === undefined || ms > estimate)) estimate = ms;
    };
    slowest(this.#otherMs);
    slowest(this.#pingMs);
    if (now - this.#grantAt < GRANT_SAMPLE_MS) slowest(this.#grantMs);
    const oldest = this.#pending.values().next();
    if (!oldest.done && now - oldest.value.at >= PENDING_COUNTS_AFTER_MS) slowest(now - oldest.value.at);
    return estimate;
  }
}

function smooth(previous: number | undefined, sample: number): number {
  return previous === undefined ? sample : (1 - SMOOTHING) * previous + SMOOTHING * sample;
}

/** What an answer to `body` measures. */
export function latencyKind(body: RequestBody<RequestKind>): LatencyKind {
  return body.type === 'acquire' ? 'grant' : 'other';
}
