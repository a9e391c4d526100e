/**
 * A simulated disk for one replica: an append-only log of entries, each framed with its length and a checksum.
 * Appended bytes sit in a volatile cache until a flush completes (after a drawn latency, in order); a crash keeps
 * what was flushed, a random prefix of what was not (a cache that had written some pages back), and possibly a
 * torn last entry, cut anywhere. Recovery reads entries up to the first that is incomplete or fails its checksum,
 * says so (`torn`), and drops the rest: only writes whose flush completed are promised to survive.
 */
import { createHash } from 'node:crypto';
import type { SeededRandom } from '../testing/seeded-random.js';
import type { NodeClock } from './clock.js';

/** 4 bytes of length and 4 of checksum before each entry. */
const FRAME_BYTES = 8;

export interface DiskTiming {
  /** A flush takes between these (virtual ms): an fsync on a busy SSD. */
  readonly flushMinMs: number;
  readonly flushMaxMs: number;
}

export interface Recovered {
  readonly entries: readonly Uint8Array[];
  /** An incomplete or corrupt tail was found and dropped. */
  readonly torn: boolean;
}

export class SimDisk {
  readonly #random: SeededRandom;
  readonly #timing: DiskTiming;
  /** Flushed bytes, as written chunks (each a framed entry). */
  #durable: Uint8Array[] = [];
  /** Written, not yet flushed. */
  #volatile: Uint8Array[] = [];
  #clock: NodeClock | undefined;
  /** The last flush's completion (local ms): flushes complete in order. */
  #lastFlushAt = 0;
  #flushes = 0;
  #torn = 0;

  constructor(random: SeededRandom, timing: DiskTiming) {
    this.#random = random;
    this.#timing = timing;
  }

  /** Flushes started so far (the fault schedule can crash a machine at the start of its n-th flush). */
  get flushes(): number {
    return this.#flushes;
  }

  /** Torn tails recovery has found so far. */
  get tornTails(): number {
    return this.#torn;
  }

  /** The clock of the process now using the disk (a restart brings a new one). */
  mount(clock: NodeClock): void {
    this.#clock = clock;
  }

  append(entry: Uint8Array): void {
    const framed = new Uint8Array(FRAME_BYTES + entry.length);
    const view = new DataView(framed.buffer);
    view.setUint32(0, entry.length);
    framed.set(checksum(entry), 4);
    framed.set(entry, FRAME_BYTES);
    this.#volatile.push(framed);
  }

  /** Makes what was appended so far durable at once (a synchronous, durable transaction). */
  syncNow(): void {
    this.#durable.push(...this.#volatile);
    this.#volatile = [];
  }

  /**
   * Flushes what was appended so far; resolves once it is durable. A crash before then leaves it unresolved (the
   * process that waited is gone). `onStart` is told before the flush begins (a fault may crash the machine then).
   */
  flush(onStart?: () => void): Promise<void> {
    const clock = this.#clock!;
    this.#flushes++;
    onStart?.();
    const count = this.#volatile.length;
    const { flushMinMs, flushMaxMs } = this.#timing;
    const latency = flushMinMs + this.#random.next() * (flushMaxMs - flushMinMs);
    const at = Math.max(this.#lastFlushAt, clock.now() + latency);
    this.#lastFlushAt = at;
    const written = new Set(this.#volatile.slice(0, count));
    return new Promise<void>((resolve) => {
      // A crash halts this clock first: then the flush never completes and nobody hears of it.
      clock.setTimeout(() => {
        // What was there when the flush began (an earlier flush may have taken part of it already).
        let done = 0;
        while (done < this.#volatile.length && written.has(this.#volatile[done]!)) done++;
        this.#durable.push(...this.#volatile.splice(0, done));
        resolve();
      }, at - clock.now());
    });
  }

  /**
   * Power lost: the cache is gone; half the time a random prefix of it had reached the disk, the last piece maybe
   * torn (a cache is written back in order, and usually not at all before a flush).
   */
  crash(): void {
    const survive = this.#random.chance(0.5) ? 0 : this.#random.int(0, this.#volatile.length);
    const kept = this.#volatile.slice(0, survive);
    const next = this.#volatile[survive];
    if (next && this.#random.chance(0.5)) kept.push(next.slice(0, this.#random.int(1, next.length - 1)));
    this.#durable.push(...kept);
    this.#volatile = [];
    this.#clock = undefined;
  }

  /** The entries a restarting process reads; a torn tail is dropped for good. */
  recover(): Recovered {
    const entries: Uint8Array[] = [];
    let valid = 0;
    let torn = false;
    for (const chunk of this.#durable) {
      const entry = unframe(chunk);
      if (!entry) {
        torn = true;
        break;
      }
      entries.push(entry);
      valid++;
    }
    if (torn) {
      this.#torn++;
      this.#durable = this.#durable.slice(0, valid);
    }
    return { entries, torn };
  }

  /** Everything gone (a Byzantine replica that keeps no record across restarts). */
  wipe(): void {
    this.#durable = [];
    this.#volatile = [];
  }
}

function checksum(entry: Uint8Array): Uint8Array {
  return createHash('sha256').update(entry).digest().subarray(0, 4);
}

function unframe(chunk: Uint8Array): Uint8Array | undefined {
  if (chunk.length < FRAME_BYTES) return undefined;
  const length = new DataView(chunk.buffer, chunk.byteOffset).getUint32(0);
  if (chunk.length !== FRAME_BYTES + length) return undefined;
  const entry = chunk.subarray(FRAME_BYTES);
  const expected = checksum(entry);
  for (let k = 0; k < 4; k++) if (chunk[4 + k] !== expected[k]) return undefined;
  return entry;
}
