/**
 * The replica's line (src/replica/handoff-queue.ts) against a model, over random schedules of arrivals,
 * releases, departures (connection closed, or a release that withdraws) and time passing: waiters are served
 * in arrival order (nobody who arrived later is served while an earlier one still waits), a waiter that left
 * is never served, each is answered exactly once, a lease that runs out serves the next one without any
 * release, and the line never holds more than its bound. And the line's epochs (docs/protocol.md, "Lines (hot
 * handoffs)"), against a model that decides by epoch as the replica's rules do, over `nextEpoch` waiters (a
 * leader's line) mixed with waiters for a fixed epoch (those a leader told their turn, at the other signers): the
 * epochs told to the waiters still waiting rise strictly along the line, a told waiter is granted its told epoch
 * (or, when a fixed one took that epoch first, a higher one), and a fixed waiter is granted only when no fixed
 * waiter for a lower epoch that the record has not passed still waits: the lowest epoch goes first. The line
 * serves its head through the replica core's stepping (src/replica/core/line-core.ts); a release heard during
 * a try is another try as soon as that one is over, not at the lease's end.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/common/clock.js';
import type { AcquireRequest, Outcome } from '../../src/protocol/messages.js';
import { HandoffQueue } from '../../src/replica/handoff-queue.js';
import { lineTimersOn, type LineTimer } from '../../src/replica/line-timers.js';

const TTL_MS = 100;
const RESOURCE = 'line';

type Step =
  | { readonly kind: 'arrive'; readonly waitMs: number }
  | { readonly kind: 'release' }
  | { readonly kind: 'leave'; readonly pick: number }
  | { readonly kind: 'withdraw'; readonly pick: number }
  | { readonly kind: 'advance'; readonly ms: number };

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ kind: fc.constant('arrive' as const), waitMs: fc.integer({ min: 1, max: 400 }) }),
  fc.record({ kind: fc.constant('release' as const) }),
  fc.record({ kind: fc.constant('leave' as const), pick: fc.nat() }),
  fc.record({ kind: fc.constant('withdraw' as const), pick: fc.nat() }),
  fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 150 }) }),
);

/** One resource's lease, as the replica's rules would keep it: one holder at a time, ending at ttl. */
class ModelLease {
  holder: number | undefined = 0; // waiter 0 is the first holder
  endsAt: number;
  epoch = 1n;
  constructor(readonly clock: ManualClock) {
    this.endsAt = clock.now() + TTL_MS;
  }
  running(): boolean {
    return this.holder !== undefined && this.endsAt > this.clock.now();
  }
}

async function settle(): Promise<void> {
  for (let k = 0; k < 5; k++) await new Promise<void>((resolve) => setImmediate(resolve));
}

describe('a replica line', () => {
  it('serves waiters in arrival order, each once, never one that left, and never holds more than its bound', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(step, { minLength: 1, maxLength: 40 }),
        fc.integer({ min: 1, max: 6 }),
        async (steps, bound) => {
          const clock = new ManualClock();
          const lease = new ModelLease(clock);
          const holderOf = (caller: { holder: Uint8Array }) => caller.holder[0]!;
          const queue: HandoffQueue = new HandoffQueue(
            lineTimersOn(clock, (timer) => queue.timerFired(timer)),
            (request, holder) => {
              const who = holderOf(holder);
              if (lease.running() && lease.holder !== who) {
                return Promise.resolve<Outcome>({
                  status: 'busy',
                  epoch: lease.epoch,
                  remainingMs: Math.max(0, lease.endsAt - clock.now()),
                });
              }
              lease.epoch += 1n;
              lease.holder = who;
              lease.endsAt = clock.now() + TTL_MS;
              return Promise.resolve<Outcome>({ status: 'granted', partial: new Uint8Array(96), epoch: lease.epoch });
            },
            bound,
          );
          const arrived: number[] = []; // waiters in arrival order, still waiting
          const left = new Set<number>();
          const answers = new Map<number, Outcome[]>();
          const served: number[] = [];
          const controllers = new Map<number, AbortController>();
          let next = 1;
          for (const s of steps) {
            switch (s.kind) {
              case 'arrive': {
                const who = next++;
                const request: AcquireRequest = {
                  type: 'acquire',
                  id: who,
                  resource: RESOURCE,
                  epoch: lease.epoch + 1n,
                  ttlMs: TTL_MS,
                  waitMs: s.waitMs,
                  nextEpoch: true,
                };
                if (!lease.running()) break; // the rules would grant at once; lines only hold busy requests
                const controller = new AbortController();
                const waiting = queue.wait(
                  request,
                  { holder: Uint8Array.of(who), session: '' },
                  { epoch: lease.epoch, remainingMs: lease.endsAt - clock.now() },
                  controller.signal,
                );
                if (!waiting) {
                  expect(arrived.length).toBeGreaterThanOrEqual(bound); // refused only when full
                  break;
                }
                controllers.set(who, controller);
                arrived.push(who);
                void waiting.then((outcome) => {
                  answers.set(who, [...(answers.get(who) ?? []), outcome]);
                  arrived.splice(arrived.indexOf(who), 1);
                  if (outcome.status === 'granted') served.push(who);
                });
                break;
              }
              case 'release':
                if (lease.holder !== undefined) {
                  lease.holder = undefined;
                  queue.wake(RESOURCE);
                }
                break;
              case 'leave': {
                const who = arrived[s.pick % Math.max(1, arrived.length)];
                if (who === undefined) break;
                left.add(who);
                controllers.get(who)!.abort();
                break;
              }
              case 'withdraw': {
                const who = arrived[s.pick % Math.max(1, arrived.length)];
                if (who === undefined) break;
                left.add(who);
                queue.withdraw(RESOURCE, { holder: Uint8Array.of(who), session: '' }, lease.epoch + 1_000n);
                break;
              }
              case 'advance':
                clock.advance(s.ms);
                break;
            }
            await settle();
            expect(queue.size).toBeLessThanOrEqual(bound);
            // Arrival order: whoever was served had no earlier arrival still waiting at that moment.
            for (const who of served) for (const waiting of arrived) expect(waiting).toBeGreaterThan(who);
          }
          // Let every wait run out: everyone is answered exactly once, and nobody who left is ever served.
          clock.advance(10_000);
          await settle();
          for (const who of controllers.keys()) expect(answers.get(who)?.length).toBe(1);
          for (const who of left) expect(served).not.toContain(who);
          expect([...served].sort((a, b) => a - b)).toEqual(served);
        },
      ),
      { numRuns: 150 },
    );
  });

  it('tells rising epochs along the line, grants a told waiter its epoch, and serves fixed epochs lowest first', async () => {
    type Arrival = { readonly kind: 'next' } | { readonly kind: 'fixed'; readonly ahead: number };
    type EpochStep =
      | { readonly kind: 'arrive'; readonly arrival: Arrival }
      | { readonly kind: 'release' }
      | { readonly kind: 'advance'; readonly ms: number }
      | { readonly kind: 'leave'; readonly pick: number };
    const epochStep: fc.Arbitrary<EpochStep> = fc.oneof(
      {
        weight: 3,
        arbitrary: fc.record({
          kind: fc.constant('arrive' as const),
          arrival: fc.oneof(
            fc.constant<Arrival>({ kind: 'next' }),
            fc.record({ kind: fc.constant('fixed' as const), ahead: fc.integer({ min: 1, max: 4 }) }),
          ),
        }),
      },
      fc.record({ kind: fc.constant('release' as const) }),
      fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 150 }) }),
      fc.record({ kind: fc.constant('leave' as const), pick: fc.nat() }),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(epochStep, { minLength: 1, maxLength: 40 }), async (steps) => {
        const clock = new ManualClock();
        const lease = new ModelLease(clock);
        let fixedSeen = false;
        const queue: HandoffQueue = new HandoffQueue(
          lineTimersOn(clock, (timer) => queue.timerFired(timer)),
          (request, caller) => {
            const who = caller.holder[0]!;
            if (lease.running() && lease.holder !== who)
              return Promise.resolve<Outcome>({
                status: 'busy',
                epoch: lease.epoch,
                remainingMs: Math.max(0, lease.endsAt - clock.now()),
              });
            const epoch = request.nextEpoch && request.epoch <= lease.epoch ? lease.epoch + 1n : request.epoch;
            if (epoch <= lease.epoch) return Promise.resolve<Outcome>({ status: 'stale', epoch: lease.epoch });
            // Epoch order at the moment of a fixed grant: no fixed waiter for a lower epoch the record has not passed.
            if (!request.nextEpoch)
              for (const other of waiting.values())
                if (other.fixed !== undefined && other.who !== who && other.fixed > lease.epoch && other.fixed < epoch)
                  throw new Error(`fixed ${epoch} granted while fixed ${other.fixed} waits`);
            lease.epoch = epoch;
            lease.holder = who;
            lease.endsAt = clock.now() + TTL_MS;
            return Promise.resolve<Outcome>({ status: 'granted', partial: new Uint8Array(96), epoch });
          },
          64,
        );
        /** Waiters still waiting, in arrival order: their fixed epoch, or the epoch last told. */
        const waiting = new Map<number, { who: number; fixed: bigint | undefined; told: bigint | undefined }>();
        const controllers = new Map<number, AbortController>();
        const failures: string[] = [];
        let next = 1;
        for (const s of steps) {
          if (s.kind === 'arrive') {
            if (!lease.running()) continue;
            const who = next++;
            const fixed = s.arrival.kind === 'fixed' ? lease.epoch + BigInt(s.arrival.ahead) : undefined;
            if (fixed !== undefined) fixedSeen = true;
            const request: AcquireRequest = {
              type: 'acquire',
              id: who,
              resource: RESOURCE,
              epoch: fixed ?? lease.epoch + 1n,
              ttlMs: TTL_MS,
              waitMs: 5_000,
              nextEpoch: fixed === undefined,
            };
            const entry = { who, fixed, told: undefined as bigint | undefined };
            const controller = new AbortController();
            const promise = queue.wait(
              request,
              { holder: Uint8Array.of(who), session: '' },
              { epoch: lease.epoch, remainingMs: lease.endsAt - clock.now() },
              controller.signal,
              (epoch) => {
                entry.told = epoch;
              },
            );
            if (!promise) continue;
            waiting.set(who, entry);
            controllers.set(who, controller);
            void promise.then(
              (outcome) => {
                waiting.delete(who);
                if (outcome.status !== 'granted') return;
                const granted = outcome.epoch!;
                if (entry.told !== undefined && granted < entry.told)
                  failures.push(`${who} told ${entry.told}, granted ${granted}`);
                if (entry.told !== undefined && !fixedSeen && granted !== entry.told)
                  failures.push(`${who} told ${entry.told}, granted ${granted} with no fixed waiter`);
              },
              (error: unknown) => failures.push(String(error)),
            );
          } else if (s.kind === 'release') {
            if (lease.holder !== undefined) {
              lease.holder = undefined;
              queue.wake(RESOURCE);
            }
          } else if (s.kind === 'leave') {
            const all = [...waiting.keys()];
            const who = all[s.pick % Math.max(1, all.length)];
            if (who !== undefined) controllers.get(who)!.abort();
          } else clock.advance(s.ms);
          await settle();
          // Told epochs rise strictly in line order among the nextEpoch waiters still waiting.
          let last = -1n;
          for (const entry of waiting.values())
            if (entry.fixed === undefined && entry.told !== undefined) {
              if (entry.told <= last) failures.push(`told ${entry.told} after ${last}`);
              last = entry.told;
            }
          expect(failures).toEqual([]);
        }
        // Time runs out in steps, with the tries between them, as on a replica's clock.
        for (let k = 0; k < 100; k++) {
          clock.advance(100);
          await settle();
        }
        expect(waiting.size).toBe(0);
        expect(failures).toEqual([]);
      }),
      { numRuns: 200 },
    );
  });

  it('serves the first waiter when the lease in its way runs out, with no release, and leaves no timer set', async () => {
    const clock = new ManualClock();
    const lease = new ModelLease(clock); // held by 0 for TTL_MS
    const set = new Map<string, number>(); // the timers the line asked for, and not cleared
    const timers = lineTimersOn(clock, (timer) => queue.timerFired(timer));
    const driver = {
      now: () => timers.now(),
      setTimer: (timer: LineTimer, delayMs: number) => {
        set.set(JSON.stringify(timer), delayMs);
        timers.setTimer(timer, delayMs);
      },
      clearTimer: (timer: LineTimer) => {
        set.delete(JSON.stringify(timer));
        timers.clearTimer(timer);
      },
    };
    const queue: HandoffQueue = new HandoffQueue(
      driver,
      () => {
        if (lease.running())
          return Promise.resolve<Outcome>({
            status: 'busy',
            epoch: lease.epoch,
            remainingMs: lease.endsAt - clock.now(),
          });
        lease.holder = 1;
        lease.epoch += 1n;
        lease.endsAt = clock.now() + TTL_MS;
        return Promise.resolve<Outcome>({ status: 'granted', partial: new Uint8Array(96), epoch: lease.epoch });
      },
      8,
    );
    let answer: Outcome | undefined;
    void waitInLine(queue).then((outcome) => (answer = outcome));
    await settle();
    expect(answer).toBeUndefined();
    expect([...set.values()].sort((a, b) => a - b)).toEqual([TTL_MS + 1, 10 * TTL_MS]); // the lease's end, its wait
    clock.advance(TTL_MS + 1); // the lease ran out; nobody released it, and the waiter's own wait is far from over
    await settle();
    expect(answer).toMatchObject({ status: 'granted', epoch: 2n });
    expect(queue.size).toBe(0);
    // The lease timer fired; the wait timer was cleared as the waiter left.
    expect([...set.keys()].filter((key) => key.includes('waitOver'))).toEqual([]);
  });

  it('tries the head again at once when the lease in its way was released during its try (a wake is never lost)', async () => {
    const clock = new ManualClock();
    const lease = new ModelLease(clock); // held by 0 for TTL_MS
    const tries: Array<(outcome: Outcome) => void> = [];
    const queue: HandoffQueue = new HandoffQueue(
      lineTimersOn(clock, (timer) => queue.timerFired(timer)),
      () => new Promise<Outcome>((resolve) => tries.push(resolve)),
      8,
    );
    let answer: Outcome | undefined;
    void waitInLine(queue).then((outcome) => (answer = outcome));
    expect(tries).toHaveLength(1); // first in line: it tries at once
    // The holder releases while that try is in flight; the try was decided before, and says `busy`.
    lease.holder = undefined;
    queue.wake(RESOURCE);
    expect(tries).toHaveLength(1); // one try at a time
    tries[0]!({ status: 'busy', epoch: 1n, remainingMs: TTL_MS });
    await settle();
    expect(tries).toHaveLength(2); // the release's wake: another try now, not at the lease's end
    tries[1]!({ status: 'granted', partial: new Uint8Array(96), epoch: 2n });
    await settle();
    expect(answer).toMatchObject({ status: 'granted', epoch: 2n });
  });
});

/** Holder 1's nextEpoch acquire (epoch 2, a long wait) waiting behind holder 0's lease at epoch 1. */
function waitInLine(queue: HandoffQueue): Promise<Outcome> {
  const request: AcquireRequest = {
    type: 'acquire',
    id: 1,
    resource: RESOURCE,
    epoch: 2n,
    ttlMs: TTL_MS,
    waitMs: 10 * TTL_MS,
    nextEpoch: true,
  };
  return queue.wait(request, { holder: Uint8Array.of(1), session: '' }, { epoch: 1n, remainingMs: TTL_MS }, undefined)!;
}
