/**
 * How late each replica grants a line's turn against the others (docs/protocol.md, "Slow replicas"), for one
 * client. A waiter's requests for its turn wait at its signers until the lease in its way ends, and the holder's
 * release reaches them all at once, so they grant within a flush of each other; a replica slower than that (its
 * link, its disk, or on purpose) grants the same turn later. Its own answer time says nothing: it waited on purpose.
 *
 * Each turn (resource, epoch) is timed against its (f+1)-th grant to arrive: at most f replicas are faulty, so that
 * grant is an honest replica's or later, and no replica can make the others look late by granting early. The first
 * f+1 to grant are not late; each one after is late by the time since. A replica asked after the turn was first
 * granted (its request left only then) is not compared: it could not have granted sooner. Pure: the connections pass
 * the times; bounded: the turns of the last MAX_TURNS grants are kept.
 */
import { BoundedMap } from '../common/bounded-map.js';

/** Turns remembered: far more than one client has open at once. */
const MAX_TURNS = 256;

interface Turn {
  readonly resource: string;
  /** When its first grant arrived. */
  readonly firstAt: number;
  /** Grants arrived so far (from requests sent before the first one arrived). */
  arrived: number;
  /** When its (f+1)-th grant arrived. */
  referenceAt: number | undefined;
}

export class TurnTiming {
  readonly #f: number;
  readonly #turns = new BoundedMap<string, Turn>(MAX_TURNS);

  constructor(f: number) {
    this.#f = f;
  }

  /**
   * A replica granted the turn of `resource` at `epoch` at `at`, to a request sent at `sentAt`: how late it did so,
   * ms (0 for the first f+1), or undefined when that says nothing (asked after the turn had been granted).
   */
  granted(resource: string, epoch: bigint, sentAt: number, at: number): number | undefined {
    const key = `${epoch}\u0000${resource}`;
    let turn = this.#turns.get(key);
    if (turn === undefined)
      this.#turns.set(key, (turn = { resource, firstAt: at, arrived: 0, referenceAt: undefined }));
    else if (sentAt >= turn.firstAt) return undefined;
    turn.arrived++;
    if (turn.arrived < this.#f + 1) return 0;
    if (turn.referenceAt === undefined) {
      turn.referenceAt = at;
      return 0;
    }
    return Math.max(0, at - turn.referenceAt);
  }

  /** Whether some replica's grant of the turn of `resource` at `epoch` has arrived. */
  seen(resource: string, epoch: bigint): boolean {
    return this.#turns.has(`${epoch}\u0000${resource}`);
  }

  /**
   * A replica answered a request for a turn of `resource` sent at `sentAt` without granting it, at `at`: whether a
   * turn of `resource` first granted after `sentAt` (this client's, which that request asked for) had been granted
   * by f+1 replicas before. Then the replica had not granted it by the time the others had and the client was done
   * with it (released it: a replica that grants a line's turns late, behind slow flushes, answers the release
   * first). That says it missed the turn, not by how much.
   */
  missed(resource: string, sentAt: number, at: number): boolean {
    for (const turn of this.#turns.values())
      if (
        turn.resource === resource &&
        turn.firstAt > sentAt &&
        turn.referenceAt !== undefined &&
        turn.referenceAt <= at
      )
        return true;
    return false;
  }
}
