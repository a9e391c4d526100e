/**
 * Liveness under f liars (docs/protocol.md, Client rules): whatever f replicas
 * report, the epoch a client asks for stays within one of the honest
 * epochs' range (so liars can neither drive it to `too_far` nor below every
 * honest record), and a busy wait is bounded by what honest replicas report.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MAX_EPOCH } from '../../src/common/limits.js';
import { chooseEpoch, firstEpoch, quorumRemainingMs } from '../../src/client/epoch-choice.js';
import { floorAfterRelease } from '../../src/client/core/acquire.js';

const epoch = fc.bigInt({ min: 0n, max: MAX_EPOCH - 1n });
const smallEpoch = fc.bigInt({ min: 0n, max: 1000n });

/** f, the honest answers (at least f+1, at most 2f+1), and up to f lies, in a shuffled order. */
const answers = <T>(value: fc.Arbitrary<T>) =>
  fc
    .integer({ min: 1, max: 10 })
    .chain((f) =>
      fc.record({
        f: fc.constant(f),
        honest: fc.array(value, { minLength: f + 1, maxLength: 2 * f + 1 }),
        lies: fc.array(value, { minLength: 0, maxLength: f }),
      }),
    )
    .filter(({ f, honest, lies }) => honest.length + lies.length >= 2 * f + 1)
    .chain((a) =>
      fc
        .shuffledSubarray(
          [...a.honest.map((v) => ({ v, honest: true })), ...a.lies.map((v) => ({ v, honest: false }))],
          {
            minLength: a.honest.length + a.lies.length,
          },
        )
        .map((all) => ({ ...a, all: all.map((x) => x.v) })),
    );

describe('Liveness: f liars cannot push the chosen epoch outside the honest range', () => {
  it('chosen - 1 lies between the smallest and the largest honest epoch', () => {
    fc.assert(
      fc.property(answers(fc.oneof(smallEpoch, epoch)), ({ f, honest, all }) => {
        const chosen = chooseEpoch(all, f);
        const min = honest.reduce((a, b) => (a < b ? a : b));
        const max = honest.reduce((a, b) => (a > b ? a : b));
        expect(chosen - 1n >= min).toBe(true);
        expect(chosen - 1n <= max).toBe(true);
      }),
    );
  });
});

describe('Liveness: f liars cannot stretch or shrink a busy wait beyond the honest reports', () => {
  it('the wait lies between the smallest and the largest honest remaining time', () => {
    fc.assert(
      fc.property(answers(fc.integer({ min: 0, max: 0x7fffffff })), ({ f, honest, all }) => {
        const wait = quorumRemainingMs(all, f)!;
        expect(wait).toBeGreaterThanOrEqual(Math.min(...honest));
        expect(wait).toBeLessThanOrEqual(Math.max(...honest));
      }),
    );
  });
});

describe('the first epoch of a resource nothing is known of (firstEpoch)', () => {
  const floors = fc.array(fc.bigInt({ min: 0n, max: 10_000n }), { minLength: 1, maxLength: 10 });

  it('is above every first signer floor when they are within maxEpochStep of the (f+1)-th largest floor', () => {
    fc.assert(
      fc.property(floors, fc.integer({ min: 0, max: 3 }), fc.bigInt({ min: 1n, max: 20_000n }), (all, f, step) => {
        fc.pre(all.length >= f + 1);
        const signers = all.slice(0, Math.max(1, all.length - f));
        const epoch = firstEpoch(signers, all, f, step);
        const bound = [...all].sort((a, b) => (a > b ? -1 : a < b ? 1 : 0))[f]! + step;
        expect(epoch).toBeGreaterThanOrEqual(1n);
        expect(epoch).toBeLessThanOrEqual(bound);
        const highest = signers.reduce((a, b) => (a > b ? a : b));
        if (highest + 1n <= bound) expect(epoch).toBe(highest + 1n);
      }),
    );
  });

  it('f liars, whatever floors they name, move it at most maxEpochStep above the highest honest floor', () => {
    fc.assert(
      fc.property(
        answers(fc.bigInt({ min: 0n, max: 10_000n })),
        fc.bigInt({ min: 1n, max: 1_000n }),
        fc.array(fc.bigInt({ min: 0n, max: MAX_EPOCH }), { maxLength: 10 }),
        ({ f, honest }, step, lies) => {
          const all = [...honest, ...lies.slice(0, f)];
          const highestHonest = honest.reduce((a, b) => (a > b ? a : b));
          // Liars among the first signers too: the worst case.
          expect(firstEpoch(all, all, f, step)).toBeLessThanOrEqual(highestHonest + step);
        },
      ),
    );
  });

  it('is 1 without f+1 floors heard, or without first signers', () => {
    expect(firstEpoch([50n], [50n], 1, 100n)).toBe(1n);
    expect(firstEpoch([], [50n, 60n, 70n], 1, 100n)).toBe(1n);
    expect(firstEpoch([0n, 0n, 0n], [0n, 0n, 0n, 0n], 1, 100n)).toBe(1n);
  });
});

describe('floorAfterRelease', () => {
  const f = fc.integer({ min: 1, max: 10 });

  it('grants that at most f replicas may hold (maybe all liars) never raise the floor', () => {
    fc.assert(
      fc.property(f, smallEpoch, smallEpoch, fc.nat(), (f, floor, released, k) => {
        const holders = k % (f + 1); // 0 .. f
        expect(floorAfterRelease(floor, released, holders, f)).toBe(floor);
      }),
    );
  });

  it('grants that f+1 or more may hold (an honest one among them) move it past their epoch, never down', () => {
    fc.assert(
      fc.property(f, smallEpoch, smallEpoch, fc.nat({ max: 30 }), (f, floor, released, extra) => {
        const next = floorAfterRelease(floor, released, f + 1 + extra, f);
        expect(next).toBe(released >= floor ? released + 1n : floor);
        expect(next >= floor).toBe(true);
      }),
    );
  });
});
