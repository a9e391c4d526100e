/**
 * How quickly one replica answers this client (docs/protocol.md, "Slow replicas"). The connection reports each
 * request it sends and each answer it gets, late ones included (an answer to a request its caller stopped waiting for
 * still says how fast the replica is), and the pings it sends to see that the replica is alive. Two figures come of
 * it:
 *
 * - as a signer (`estimateMs`): the slowest of the smoothed time of its grants (acquire answers), of its other
 *   answers, of its pongs, and the age of its oldest unanswered request or ping; plus how late it grants a line's
 *   turns against the other replicas (TurnTiming). An acquire that waits its turn in a line is answered late on
 *   purpose, so its answer time says nothing; how much later than the others this replica granted the same turn
 *   does. Without that, a replica that answered only those late (a Byzantine replica delaying its answers, pongs
 *   and pushes on time) looked fast to every waiter on a hot resource, and each handoff waited for its partial.
 * - as a line's keeper (`lineEstimateMs`): its pongs alone, and the age of its oldest unanswered ping. What a line
 *   needs of its leader is its pushes and its order, which travel as its pongs do; and every client's pings see
 *   the same thing, so clients agree on the leader. Judged by its grants, a leader that granted late (on purpose,
 *   or a busy machine's flushes) looked slow to some clients and not to others at each instant, they waited in
 *   two lines at once, and every handoff was split (the gray bench's hot resource fell to a twentieth).
 *
 * A turn the replica answers without a grant after f+1 others granted it marks it as having missed this client's
 * last turn (`missedTurn`): a leader whose flushes are slow is still flushing the turn when the holder, done with it,
 * releases, and answers the withdrawn request `busy`, so its lateness is never timed. A turn told by a leader so
 * marked is asked of every other replica (askSigners). The mark clears when one of its grants of a turn arrives
 * after another replica's (a first grant may be early only because the replica is behind).
 *
 * A replica can make itself look slow, by answering late or not at all, but not fast: only its own answers make
 * samples, a replica fast at some requests and slow at grants is judged by its grants, and anything it leaves
 * unanswered counts against it for as long as it stays so. The pongs keep a slow link measured while the client
 * sends the replica nothing else.
 *
 * A replica left out of the first signers is not asked for grants, so its grant times would never change: once
 * nothing asked it for a grant for GRANT_SAMPLE_MS, it is due a probe (`probeDue`): the next acquire asks it beside
 * the first signers, never waiting for it (signer-choice.ts), and a sample after such a pause replaces the old
 * figure instead of being smoothed into it, so a replica that recovered is used again at once. Forgetting the old
 * figure instead, as this once did, made the replica a first signer again every two seconds, and each such grant
 * was a slow cycle (the gray bench's 1-client p99 against a Byzantine replica answering late). Pure: the connection
 * passes the times.
 */
import type { RequestBody, RequestKind } from './replica-channel.js';
import type { TurnTiming } from './turn-timing.js';

/** What an answer time measures: a grant (it waits for a record's flush), any other answer, or a ping (liveness). */
export type LatencyKind = 'grant' | 'other' | 'ping';

/**
 * What the answer to a request says of the replica: its answer time, of `kind`; or, for an acquire that may wait its
 * turn in a line (answered when its turn comes, on purpose late), how late it granted that turn of `resource`, at
 * `epoch` (the epoch asked; a `nextEpoch` grant names its own).
 */
export type Measure =
  { readonly kind: LatencyKind } | { readonly turnOf: { readonly resource: string; readonly epoch: bigint } };

/** What the answer to `body` measures. */
export function measureOf(body: RequestBody<RequestKind>): Measure {
  if (body.type !== 'acquire') return { kind: 'other' };
  const { waitMs, resource, epoch } = body as RequestBody<'acquire'>;
  return (waitMs ?? 0) > 0 ? { turnOf: { resource, epoch } } : { kind: 'grant' };
}

/** Weight of a new sample: a replica that recovers is trusted again after a handful of quick answers. */
const SMOOTHING = 0.25;
/**
 * Weight of a turn lateness above the figure. A client times a turn only when it is its own (once per round of the
 * line: with 16 clients on a hot resource, every 16th handoff), so at SMOOTHING a replica that turned late took a
 * dozen of its turns, two seconds of every waiter's handoffs, to be seen; rising fast is safe, as a replica can only
 * make itself look slow. Falling stays slow, so one quick turn does not bring a late replica back.
 */
const LATE_RISING = 0.75;
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
/** How long after the last acquire sent to a replica it is due a probe; a sample after such a pause starts afresh. */
export const GRANT_SAMPLE_MS = 2_000;

interface Pending {
  readonly at: number;
  readonly kind: LatencyKind;
}

interface WaitingTurn {
  readonly at: number;
  readonly resource: string;
  readonly epoch: bigint;
}

/** A smoothed figure and when its last sample came. */
interface Figure {
  ms: number;
  at: number;
}

export class ReplicaLatency {
  readonly #turns: TurnTiming | undefined;
  #grant: Figure | undefined;
  #turnLate: Figure | undefined;
  #otherMs: number | undefined;
  #pingMs: number | undefined;
  /** It answered this client's last turn without granting it, after the others had granted it (TurnTiming.missed). */
  #missedTurn = false;
  /** When an acquire was last sent to the replica (prompt or waiting): a probe is due GRANT_SAMPLE_MS after. */
  #acquireSentAt: number | undefined;
  /** Request (or ping) key → when it left, in the order they left; answered or lost ones are removed. */
  readonly #pending = new Map<string, Pending>();
  /** Acquires that may wait their turn in a line: key → when it left and for which resource. */
  readonly #waiting = new Map<string, WaitingTurn>();

  /** `turns`: the client's record of who granted each turn when (shared by its connections). */
  constructor(turns?: TurnTiming) {
    this.#turns = turns;
  }

  /** Request (or ping) `key`, measuring `measure`, left at `at` (client ms). */
  sent(key: string, measure: Measure, at: number): void {
    if ('turnOf' in measure) {
      this.#acquireSentAt = at;
      if (this.#waiting.size < MAX_PENDING) this.#waiting.set(key, { at, ...measure.turnOf });
      return;
    }
    if (measure.kind === 'grant') this.#acquireSentAt = at;
    if (this.#pending.size < MAX_PENDING) this.#pending.set(key, { at, kind: measure.kind });
  }

  /**
   * The answer to `key` (reply, error frame, pong) came at `at`, whether or not anyone still waits for it;
   * `outcome`, for a reply, is its outcome as the replica sent it (only read for a turn's grant).
   */
  answered(key: string, at: number, outcome?: unknown): void {
    const waiting = this.#waiting.get(key);
    if (waiting !== undefined) {
      this.#waiting.delete(key);
      const epoch = grantedEpoch(outcome, waiting.epoch);
      if (epoch === undefined) {
        if (this.#turns?.missed(waiting.resource, waiting.at, at)) this.#missedTurn = true;
        return;
      }
      // Only a grant after another's says it is back on time: the first to grant may be early because it is
      // behind (a leader that missed the turns before has no lease in the way), which says nothing of its flushes.
      if (this.#turns?.seen(waiting.resource, epoch)) this.#missedTurn = false;
      const late = this.#turns?.granted(waiting.resource, epoch, waiting.at, at);
      if (late !== undefined) this.#turnLate = sample(this.#turnLate, late, at, LATE_RISING);
      return;
    }
    const sent = this.#pending.get(key);
    if (sent === undefined) return;
    this.#pending.delete(key);
    const ms = Math.max(0, at - sent.at);
    if (sent.kind === 'grant') this.#grant = sample(this.#grant, ms, at);
    else if (sent.kind === 'other') this.#otherMs = smooth(this.#otherMs, ms);
    else this.#pingMs = smooth(this.#pingMs, ms);
  }

  /** The connection dropped: nothing sent on it will be answered, and the next one starts with a clean slate. */
  lost(): void {
    this.#pending.clear();
    this.#waiting.clear();
  }

  /** The replica's answer time as a signer, as of `now` (the header); undefined before anything was measured. */
  estimateMs(now: number): number | undefined {
    const estimate = this.#answerMs(now);
    const late = this.#turnLate;
    // Until its grants are measured again otherwise: a turn lateness not renewed for GRANT_SAMPLE_MS stops counting
    // once a prompt grant was measured after it (the client no longer waits in lines there).
    const grant = this.#grant;
    if (late === undefined || (now - late.at >= GRANT_SAMPLE_MS && grant !== undefined && grant.at > late.at))
      return estimate;
    return (estimate ?? 0) + late.ms;
  }

  /** The slowest of its answer times, pongs and unanswered requests (the header). */
  #answerMs(now: number): number | undefined {
    let estimate: number | undefined;
    const slowest = (ms: number | undefined) => {
      if (ms !== undefined && (estimate === undefined || ms > estimate)) estimate = ms;
    };
    slowest(this.#otherMs);
    slowest(this.#pingMs);
    slowest(this.#grant?.ms);
    const oldest = this.#pending.values().next();
    if (!oldest.done && now - oldest.value.at >= PENDING_COUNTS_AFTER_MS) slowest(now - oldest.value.at);
    return estimate;
  }

  /**
   * The replica's answer time as a line's keeper, as of `now`: its pongs and unanswered pings only (the header);
   * before its first pong (a ping goes every pingIntervalMs), what its other answers said.
   */
  lineEstimateMs(now: number): number | undefined {
    let estimate = this.#pingMs;
    if (estimate === undefined) return this.#answerMs(now);
    for (const pending of this.#pending.values()) {
      if (pending.kind !== 'ping') continue;
      const age = now - pending.at;
      if (age >= PENDING_COUNTS_AFTER_MS && (estimate === undefined || age > estimate)) estimate = age;
      break; // The oldest ping: pings leave in order.
    }
    return estimate;
  }

  /**
   * Whether it missed this client's last turn: answered it without a grant after the others had granted it (the
   * header). Until it grants one of this client's turns again, a turn it tells is asked of every other replica.
   */
  get missedTurn(): boolean {
    return this.#missedTurn;
  }

  /** Whether an acquire should ask it beside the first signers, should it count as slow (the header). */
  probeDue(now: number): boolean {
    return this.#acquireSentAt === undefined || now - this.#acquireSentAt >= GRANT_SAMPLE_MS;
  }
}

/**
 * A new sample of `figure`: smoothed into it (a sample above it weighs `rising`), or taken as it is after
 * GRANT_SAMPLE_MS without one.
 */
function sample(figure: Figure | undefined, ms: number, at: number, rising = SMOOTHING): Figure {
  if (figure === undefined || at - figure.at >= GRANT_SAMPLE_MS) return { ms, at };
  const weight = ms > figure.ms ? rising : SMOOTHING;
  return { ms: (1 - weight) * figure.ms + weight * ms, at };
}

function smooth(previous: number | undefined, sample: number): number {
  return previous === undefined ? sample : (1 - SMOOTHING) * previous + SMOOTHING * sample;
}

/**
 * The epoch a `granted` outcome grants: the one it names, else the one asked; undefined for anything else. Read
 * defensively: a late reply is not validated against its request, and the wire carries small integers as numbers.
 */
function grantedEpoch(outcome: unknown, asked: bigint): bigint | undefined {
  if (typeof outcome !== 'object' || outcome === null) return undefined;
  const { status, epoch } = outcome as { status?: unknown; epoch?: unknown };
  if (status !== 'granted') return undefined;
  if (epoch === undefined) return asked;
  if (typeof epoch === 'bigint') return epoch;
  return typeof epoch === 'number' && Number.isSafeInteger(epoch) ? BigInt(epoch) : undefined;
}
