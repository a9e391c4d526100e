/**
 * A node's own monotonic clock in a simulated run: it starts at its own origin and runs at its own rate (drift),
 * and its timers are events of the run's scheduler. The protocol assumes only that rates differ by far less than
 * the lease margin (1 % of a ttl, docs/protocol.md); the simulator draws drifts within that and jumps within what
 * a monotonic clock may do (forward only).
 */
import type { Clock, TimerHandle } from '../common/clock.js';
import type { EventHandle, Scheduler } from './scheduler.js';

export class NodeClock implements Clock {
  readonly #scheduler: Scheduler;
  readonly #name: string;
  readonly #origin: number;
  /** Local milliseconds per virtual millisecond (1 + drift). */
  readonly #rate: number;
  /** Forward jumps so far (a paused VM, a clock step). */
  #jumped = 0;
  /** Timers not yet fired or cleared: a crash cancels them all. */
  readonly #pending = new Set<EventHandle>();
  #halted = false;

  constructor(scheduler: Scheduler, name: string, origin: number, rate: number) {
    this.#scheduler = scheduler;
    this.#name = name;
    this.#origin = origin;
    this.#rate = rate;
  }

  now(): number {
    return this.#origin + this.#scheduler.now * this.#rate + this.#jumped;
  }

  /** The virtual time at which this clock reads (or read) `local`, as it runs now (a later jump moves it). */
  virtualAt(local: number): number {
    return (local - this.#origin - this.#jumped) / this.#rate;
  }

  setTimeout(callback: () => void, ms: number): TimerHandle {
    if (this.#halted) return undefined;
    const handle = this.#scheduler.schedule(Math.max(0, ms) / this.#rate, `${this.#name}:timer`, () => {
      this.#pending.delete(handle);
      callback();
    });
    this.#pending.add(handle);
    return handle;
  }

  clearTimeout(timer: TimerHandle): void {
    const handle = timer as EventHandle | undefined;
    if (!handle) return;
    this.#scheduler.cancel(handle);
    this.#pending.delete(handle);
  }

  /** The process stopped (a crash): no timer of it fires, and none is set any more. */
  halt(): void {
    this.#halted = true;
    for (const handle of this.#pending) this.#scheduler.cancel(handle);
    this.#pending.clear();
  }

  /** Timers waiting (for the bounded-state check). */
  get pendingTimers(): number {
    return this.#pending.size;
  }

  /** Moves this clock forward by `ms` at once (timers already set keep their virtual due times). */
  jump(ms: number): void {
    this.#jumped += Math.max(0, ms);
  }
}
