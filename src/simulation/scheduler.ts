/**
 * Virtual time for one simulated run (docs/testing.md): an event queue ordered by (time, order of scheduling),
 * run one event at a time. Nothing in a run reads a real clock or sets a real timer: every node's clock and
 * timers, every message and every disk flush is an event here. After each event the run lets the promise
 * continuations it started finish (one turn of the host's event loop, in which nothing else runs), so
 * async code (the replica's service, the client's driver) advances in the same order on every run.
 *
 * Every event processed is folded into the run's digest, and the last ones are kept for the trace a failing
 * run prints.
 */
import { createHash, type Hash } from 'node:crypto';

interface Entry {
  readonly at: number;
  readonly seq: number;
  readonly label: string;
  readonly run: () => void;
  cancelled: boolean;
}

/** A scheduled event, for `cancel`. */
export type EventHandle = Entry;

/** Events kept for a failing run's trace. */
const DEFAULT_TRACE_LENGTH = 400;

/** Lets the promise continuations started by an event run: a macrotask turn runs every microtask first. */
const settle = (): Promise<void> => new Promise<void>((resolve) => setImmediate(resolve));

export class Scheduler {
  #now = 0;
  #seq = 0;
  readonly #heap: Entry[] = [];
  readonly #digest: Hash = createHash('sha256');
  readonly #trace: string[] = [];
  readonly #traceLength: number;
  #events = 0;

  constructor(traceLength = DEFAULT_TRACE_LENGTH) {
    this.#traceLength = traceLength;
  }

  /** Virtual milliseconds since the run began. */
  get now(): number {
    return this.#now;
  }

  /** Events processed so far. */
  get events(): number {
    return this.#events;
  }

  /** Events waiting. */
  get pending(): number {
    return this.#heap.length;
  }

  /** Runs `run` `delayMs` from now (never earlier than now); `label` names it in the digest and the trace. */
  schedule(delayMs: number, label: string, run: () => void): EventHandle {
    const entry: Entry = { at: this.#now + Math.max(0, delayMs), seq: this.#seq++, label, run, cancelled: false };
    this.#push(entry);
    return entry;
  }

  cancel(handle: EventHandle | undefined): void {
    if (handle) handle.cancelled = true;
  }

  /** Folds a line into the digest and the trace without an event (a check's verdict, a node's note). */
  note(line: string): void {
    this.#record(`${this.#now}|${line}`);
  }

  /**
   * Runs events in order until none is left, virtual time passes `untilMs`, `maxEvents` have run, or `stop()`
   * says so (asked after each event).
   */
  async run(untilMs: number, maxEvents: number, stop: () => boolean = () => false): Promise<void> {
    while (this.#heap.length > 0 && this.#events < maxEvents && !stop()) {
      const next = this.#pop();
      if (next.cancelled) continue;
      if (next.at > untilMs) {
        this.#push(next);
        this.#now = untilMs;
        return;
      }
      this.#now = next.at;
      this.#events++;
      this.#record(`${next.at}|${next.label}`);
      next.run();
      await settle();
    }
  }

  /** Hex SHA-256 over every event and note so far. */
  digest(): string {
    return this.#digest.copy().digest('hex');
  }

  /** The last events, oldest first. */
  trace(): readonly string[] {
    return [...this.#trace];
  }

  #record(line: string): void {
    this.#digest.update(line);
    this.#digest.update('\n');
    if (this.#traceLength === 0) return;
    this.#trace.push(line);
    if (this.#trace.length > this.#traceLength) this.#trace.shift();
  }

  #push(entry: Entry): void {
    const heap = this.#heap;
    heap.push(entry);
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(heap[i]!, heap[parent]!)) break;
      [heap[i], heap[parent]] = [heap[parent]!, heap[i]!];
      i = parent;
    }
  }

  #pop(): Entry {
    const heap = this.#heap;
    const top = heap[0]!;
    const last = heap.pop()!;
    if (heap.length > 0) {
      heap[0] = last;
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        const right = left + 1;
        let smallest = i;
        if (left < heap.length && before(heap[left]!, heap[smallest]!)) smallest = left;
        if (right < heap.length && before(heap[right]!, heap[smallest]!)) smallest = right;
        if (smallest === i) break;
        [heap[i], heap[smallest]] = [heap[smallest]!, heap[i]!];
        i = smallest;
      }
    }
    return top;
  }
}

function before(a: Entry, b: Entry): boolean {
  return a.at < b.at || (a.at === b.at && a.seq < b.seq);
}
