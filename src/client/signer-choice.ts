/**
 * Which replicas an acquire asks first. Asking only t of them (a grant needs
 * no more) saves a signature, a record write and its flush at every other
 * replica; the others are asked as soon as one of the first answers anything
 * but a usable partial, or is late. Spreading the first t over the replicas
 * by resource name keeps the load even when many resources are in use.
 */
import type { ConnectionView } from './core/io.js';
import type { ChannelSet } from './quorum-context.js';

/** The replica contended attempts ask first: spread over replicas by resource name (FNV-1a of the UTF-16 units). */
export function leaderOf(resource: string, n: number): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < resource.length; i++) hash = Math.imul(hash ^ resource.charCodeAt(i), 0x01000193) >>> 0;
  return (hash % n) + 1;
}

/**
 * The first `t` connected replicas in ring order from the resource's leader, or undefined when fewer than `t`
 * are connected (then everyone reachable is asked at once).
 */
export function firstSigners(
  channels: ChannelSet | { readonly channels: readonly ConnectionView[] },
  resource: string,
  t: number,
): ReadonlySet<number> | undefined {
  const all = channels.channels;
  const n = all.length;
  const start = leaderOf(resource, n) - 1;
  const chosen = new Set<number>();
  for (let k = 0; k < n && chosen.size < t; k++) {
    const channel = all[(start + k) % n]!;
    if (channel.state.phase === 'ready') chosen.add(channel.index);
  }
  return chosen.size === t ? chosen : undefined;
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
