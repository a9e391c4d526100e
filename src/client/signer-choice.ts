/**
 * Which replicas an acquire asks first. Asking only t of them (a grant needs
 * no more) saves a signature, a record write and its flush at every other
 * replica; the others are asked as soon as one of the first answers anything
 * but a usable partial, or is late. Spreading the first t over the replicas
 * by resource name keeps the load even when many resources are in use; the
 * replicas this client sees answering far slower than the rest are left out
 * of the first t and of the leader's place, so one slow, hung or
 * slow-on-purpose replica costs no fast path its delay.
 */
import type { ConnectionView } from './core/io.js';
import type { ChannelSet } from './quorum-context.js';

/** The replica contended attempts ask first: spread over replicas by resource name (FNV-1a of the UTF-16 units). */
export function leaderOf(resource: string, n: number): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < resource.length; i++) hash = Math.imul(hash ^ resource.charCodeAt(i), 0x01000193) >>> 0;
  return (hash % n) + 1;
}

/** How far above the t-th fastest replica's answer time a replica's must be to count as slow. */
interface SlowBound {
  /** Which answer time (replica-latency.ts). */
  readonly of: (connection: ConnectionView) => number | undefined;
  /** More than this many times the t-th fastest... */
  readonly factor: number;
  /** ...and more than this many milliseconds above that. */
  readonly marginMs: number;
}

/** For the first signers, by their answer time as signers: a few milliseconds apart on a fast network is noise. */
const SLOW_SIGNER: SlowBound = { of: (c) => c.latencyMs, factor: 2, marginMs: 5 };
/**
 * For giving up the resource's hash leader, which keeps the line: by its answer time as a line's keeper (its pongs,
 * which every client sees alike, so that they agree on the leader), and wider, because leading costs the leader
 * itself: it answers the line's turns and hands the lease over at every release, and on a busy machine a hot
 * resource's leader answers several times later than the others for that alone. Judged as a signer, it looked slow
 * at random instants, clients disagreed about the leader and waited in different lines, and the line lost its
 * order (hot-handoff.test.ts, on a loaded machine; the gray bench); moving the line moves that load with it. A
 * leader whose link is 50 ms slower each way on a millisecond network is still left, and a hung one as soon as its
 * oldest unanswered ping is that old; one that only grants late keeps the line, and its partials are not waited for.
 */
const SLOW_LEADER: SlowBound = { of: (c) => c.lineLatencyMs, factor: 4, marginMs: 40 };

const NONE: ReadonlySet<number> = new Set();

/**
 * The connected replicas an acquire asks last (docs/protocol.md, "Slow replicas"): those whose answer time
 * (replica-latency.ts) is far above that of the t-th fastest, at most all but t of them. A grant needs only t, so the
 * slowest f can be left out of every fast path; a replica that answers late, or not at all, is one of them. Replicas
 * not measured yet count as fast. Pure.
 */
export function slowReplicas(
  connections: readonly ConnectionView[],
  t: number,
  slowness: SlowBound = SLOW_SIGNER,
): ReadonlySet<number> {
  const ready = connections.filter((c) => c.state.phase === 'ready');
  if (ready.length <= t) return NONE;
  const ms = (c: ConnectionView) => slowness.of(c) ?? 0;
  const sorted = [...ready].sort((a, b) => ms(a) - ms(b));
  const fastest = ms(sorted[t - 1]!);
  const bound = Math.max(slowness.factor * fastest, fastest + slowness.marginMs);
  const slow = new Set<number>();
  for (const c of sorted.slice(t)) if (ms(c) > bound) slow.add(c.index);
  return slow;
}

/**
 * What the choices above depend on of the connections' figures, as one string: the slow replicas as signers and as
 * lines' keepers, the slow ones due a probe, and the leaders that missed this client's last turn (askSigners). A
 * core decides with the connections it was last told of; the driver tells it again whenever this changed (drive.ts),
 * as figures change with no event (a hung replica's ping ages, a link slows). Pure.
 */
export function routingOf(connections: readonly ConnectionView[], t: number): string {
  const signers = [...slowReplicas(connections, t)].join(',');
  const lines = [...slowReplicas(connections, t, SLOW_LEADER)].join(',');
  const missed = connections.filter((c) => c.missedTurn === true).map((c) => c.index);
  return `${signers}|${lines}|${probesDue(connections, t).join(',')}|${missed.join(',')}`;
}

/** The slow replicas (as signers) due a probe (ReplicaLatency.probeDue), in connection order. Pure. */
function probesDue(connections: readonly ConnectionView[], t: number): number[] {
  const slow = slowReplicas(connections, t);
  return connections.filter((c) => slow.has(c.index) && c.probeDue === true).map((c) => c.index);
}

/** The connected replicas in ring order from the resource's hash leader, the slow ones (by `slowness`) left out. */
function ringFrom(
  connections: readonly ConnectionView[],
  resource: string,
  t: number,
  slowness: SlowBound,
): ConnectionView[] {
  const n = connections.length;
  const start = leaderOf(resource, n) - 1;
  const slow = slowReplicas(connections, t, slowness);
  const ring: ConnectionView[] = [];
  for (let k = 0; k < n; k++) {
    const channel = connections[(start + k) % n]!;
    if (channel.state.phase === 'ready' && !slow.has(channel.index)) ring.push(channel);
  }
  return ring;
}

/**
 * The replica contended attempts ask first and whose line waiters join: the resource's hash leader, or the first
 * connected replica after it in ring order when it is down or slow (by SLOW_LEADER's wider bound), so that a slow or
 * hung replica holds no line up. Clients that see the same replicas slow agree on it. Undefined when no replica is connected.
 */
export function leaderFor(connections: readonly ConnectionView[], resource: string, t: number): number | undefined {
  return ringFrom(connections, resource, t, SLOW_LEADER)[0]?.index;
}

/**
 * The first `t` connected replicas in ring order from the resource's hash leader, the slow ones left out
 * (slowReplicas), or undefined when fewer than `t` are connected (then everyone reachable is asked at once). With
 * them, the slow ones due a probe (ReplicaLatency.probeDue): asked beside the t, so that a grant never waits for
 * one, yet its answer says whether it is still slow.
 */
export function firstSigners(
  channels: ChannelSet | { readonly channels: readonly ConnectionView[] },
  resource: string,
  t: number,
): ReadonlySet<number> | undefined {
  const ring = ringFrom(channels.channels, resource, t, SLOW_SIGNER);
  if (ring.length < t) return undefined;
  return new Set([...ring.slice(0, t).map((c) => c.index), ...probesDue(channels.channels, t)]);
}

/**
 * A smoothed time from sending an acquire to holding t partials, so that "late" adapts to the machine and
 * the load: a fixed threshold would either wait too long for a silent replica or give up on busy ones.
 */
export class GrantLatency {
  #smoothedMs: number | undefined;

  observe(ms: number): void {
    this.#smoothedMs = this.#smoothedMs === undefined ? ms : 0.8 * this.#smoothedMs + 0.2 * ms;
  }

  /** How long to wait for the first signers before asking the others. */
  widenAfterMs(minimumMs: number): number {
    return Math.max(minimumMs, 3 * (this.#smoothedMs ?? 0));
  }
}
