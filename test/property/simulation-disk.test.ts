/**
 * The simulator's disk and signing record (src/simulation/disk.ts, store.ts) keep the crash semantics the
 * simulator promises (docs/testing.md): over random schedules of writes, flushes and power losses, every entry
 * whose flush completed survives, what survives is a prefix of what was written, and a torn last entry is
 * detected and dropped, never read back in part; a record the replica's real check-and-record acknowledged
 * survives a crash, and with the planted `acknowledgeBeforeFlush` one can be lost.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Scheduler } from '../../src/simulation/scheduler.js';
import { NodeClock } from '../../src/simulation/clock.js';
import { SimDisk } from '../../src/simulation/disk.js';
import { SimRecordStore } from '../../src/simulation/store.js';
import { seededRandom } from '../../src/testing/seeded-random.js';

const TIMING = { flushMinMs: 0.3, flushMaxMs: 3 };

type Step = { readonly kind: 'write' } | { readonly kind: 'flush' } | { readonly kind: 'wait'; readonly ms: number };

const steps = fc.array(
  fc.oneof(
    fc.constant<Step>({ kind: 'write' }),
    fc.constant<Step>({ kind: 'flush' }),
    fc.record({ kind: fc.constant('wait' as const), ms: fc.integer({ min: 0, max: 4 }) }),
  ),
  { minLength: 1, maxLength: 30 },
);

describe('the simulated disk', () => {
  it('keeps every flushed entry across a power loss, only a prefix of what was written, and never part of one', async () => {
    await fc.assert(
      fc.asyncProperty(steps, fc.integer({ min: 0, max: 2 ** 31 }), async (schedule, seed) => {
        const scheduler = new Scheduler(0);
        const disk = new SimDisk(seededRandom(seed), TIMING);
        const clock = new NodeClock(scheduler, 'r1', 0, 1);
        disk.mount(clock);
        const written: Uint8Array[] = [];
        let flushedCount = 0;
        for (const step of schedule) {
          if (step.kind === 'write') {
            const entry = Uint8Array.from(
              { length: 1 + (written.length % 40) },
              (_, k) => (written.length * 7 + k) & 255,
            );
            written.push(entry);
            disk.append(entry);
          } else if (step.kind === 'flush') {
            const count = written.length;
            void disk.flush().then(() => (flushedCount = Math.max(flushedCount, count)));
          } else await scheduler.run(scheduler.now + step.ms, 1_000);
        }
        clock.halt();
        disk.crash();
        const recovered = disk.recover();
        expect(recovered.entries.length).toBeGreaterThanOrEqual(flushedCount);
        expect(recovered.entries.length).toBeLessThanOrEqual(written.length);
        recovered.entries.forEach((entry, k) => expect(entry).toEqual(written[k]));
        // A second recovery reads the same (the torn tail was dropped for good).
        expect(disk.recover()).toEqual({ entries: recovered.entries, torn: false });
      }),
      { numRuns: 300 },
    );
  });

  it('detects a torn last entry and drops it', () => {
    let sawTorn = false;
    for (let seed = 1; seed < 200 && !sawTorn; seed++) {
      const disk = new SimDisk(seededRandom(seed), TIMING);
      disk.mount(new NodeClock(new Scheduler(0), 'r1', 0, 1));
      for (let k = 0; k < 5; k++) disk.append(new Uint8Array(50).fill(k + 1));
      disk.crash();
      const { entries, torn } = disk.recover();
      if (!torn) continue;
      sawTorn = true;
      expect(entries.length).toBeLessThan(5);
      entries.forEach((entry, k) => expect(entry).toEqual(new Uint8Array(50).fill(k + 1)));
    }
    expect(sawTorn).toBe(true);
  });
});

describe('the simulated signing record', () => {
  const record = (epoch: bigint) => ({ epoch, holder: new Uint8Array(32).fill(1), grantDigest: new Uint8Array(32) });

  /** One grant, then a power loss `crashAtMs` later: whether it was acknowledged, and whether it survived. */
  async function grantThenCrash(acknowledgeBeforeFlush: boolean, seed: number, crashAtMs: number) {
    const scheduler = new Scheduler(0);
    const disk = new SimDisk(seededRandom(seed), TIMING);
    const clock = new NodeClock(scheduler, 'r1', 0, 1);
    disk.mount(clock);
    const store = new SimRecordStore(disk, { wallClock: () => 0, acknowledgeBeforeFlush });
    let acknowledged = false;
    void store
      .checkAndRecord('orders', () => ({ record: record(5n), result: 'granted' }))
      .then(() => (acknowledged = true));
    await scheduler.run(crashAtMs, 100);
    await new Promise<void>((resolve) => setImmediate(resolve));
    clock.halt();
    disk.crash();
    const survived = new SimRecordStore(disk, { wallClock: () => 0 }).get('orders')?.epoch === 5n;
    return { acknowledged, survived };
  }

  /** Crash times from before the flush can complete to after it surely has (flushes take 0.3 to 3 ms). */
  const crashTimes = Array.from({ length: 40 }, (_, k) => k / 10);

  it('never loses a record whose write was acknowledged (S3)', async () => {
    let acknowledged = 0;
    for (const [k, at] of crashTimes.entries()) {
      const outcome = await grantThenCrash(false, k + 1, at);
      if (outcome.acknowledged) acknowledged++;
      expect(!outcome.acknowledged || outcome.survived, `crash at ${at} ms`).toBe(true);
    }
    // Not vacuous: most crashes came after the acknowledgement.
    expect(acknowledged).toBeGreaterThan(10);
  });

  it('with the planted acknowledgeBeforeFlush, an acknowledged record can be lost', async () => {
    const lost = [];
    for (const [k, at] of crashTimes.entries()) {
      const outcome = await grantThenCrash(true, k + 1, at);
      lost.push(outcome.acknowledged && !outcome.survived);
    }
    expect(lost).toContain(true);
  });
});
