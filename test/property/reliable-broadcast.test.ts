/**
 * The reliable broadcast's state machine (src/ceremony/reliable-broadcast.ts)
 * under any delivery order, with up to f Byzantine voters sending any echo
 * and ready to anyone and a sender that may be Byzantine too: honest voters
 * never deliver two different values; once every message is delivered,
 * either every honest voter delivered or none did; an honest sender's value
 * is delivered everywhere and nothing else is; nothing is delivered that the
 * sender did not sign. "Signed" is modelled as the ceremony does it
 * (broadcast-ledger.ts): a value the sender signed makes a voter echo it on
 * first sight, directly or relayed; a value it did not sign never does.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  broadcastQuorums,
  EMPTY_INSTANCE,
  stepBroadcast,
  type BroadcastMessage,
  type BroadcastRole,
  type InstanceState,
} from '../../src/ceremony/reliable-broadcast.js';

/** Values: the sender may sign a and b; z stands for anything it did not sign. */
const VALUES = ['a', 'b', 'z'] as const;

interface Frame {
  readonly to: number;
  readonly message: BroadcastMessage;
}

interface Run {
  readonly delivered: Map<number, string | undefined>;
  readonly honest: number[];
}

function runBroadcast(options: {
  f: number;
  byzantine: number[];
  /** The sender's value for each honest voter (undefined: it sends that one nothing); an honest sender sends a to all. */
  initials: (string | undefined)[];
  /** What the Byzantine voters send: to whom, which kind, which value. */
  attacks: { from: number; to: number; kind: 'echo' | 'ready'; value: string }[];
  picks: number[];
}): Run {
  const { f, byzantine } = options;
  const n = 3 * f + 1;
  const quorums = broadcastQuorums(n, f);
  const voters = Array.from({ length: n }, (_, k) => k + 1);
  const honest = voters.filter((v) => !byzantine.includes(v));
  const signed = new Set(options.initials.filter((v): v is string => v !== undefined));
  const role: BroadcastRole = { quorums, isVoter: (from) => from >= 1 && from <= n, votes: true };
  const states = new Map<number, InstanceState>(honest.map((h) => [h, EMPTY_INSTANCE]));
  const delivered = new Map<number, string | undefined>(honest.map((h) => [h, undefined]));
  const queue: Frame[] = [];
  honest.forEach((h, k) => {
    const value = options.initials[k];
    if (value !== undefined) queue.push({ to: h, message: { kind: 'initial', value } });
  });
  for (const a of options.attacks) {
    if (honest.includes(a.to)) queue.push({ to: a.to, message: { kind: a.kind, from: a.from, value: a.value } });
  }
  const apply = (to: number, message: BroadcastMessage) => {
    const step = stepBroadcast(role, states.get(to)!, message);
    states.set(to, step.state);
    if (step.delivered !== undefined) {
      expect(delivered.get(to)).toBeUndefined();
      delivered.set(to, step.delivered);
    }
    for (const out of step.outgoing) {
      for (const h of honest) queue.push({ to: h, message: { kind: out.kind, from: to, value: out.value } });
    }
  };
  // Bounded: each honest voter sends at most one echo and one ready to each honest voter.
  const most = honest.length + options.attacks.length + 2 * honest.length * honest.length;
  let k = 0;
  for (let round = 0; round <= most && queue.length > 0; round++) {
    const [frame] = queue.splice(options.picks[k++ % options.picks.length]! % queue.length, 1);
    const { to, message } = frame!;
    // First sight: an echo or ready of a value the sender signed carries it, as a relay carries the signed packet.
    if (message.kind !== 'initial' && signed.has(message.value)) apply(to, { kind: 'initial', value: message.value });
    apply(to, message);
  }
  expect(queue).toHaveLength(0);
  return { delivered, honest };
}

const attack = (n: number) =>
  fc.record({
    from: fc.integer({ min: 1, max: n }),
    to: fc.integer({ min: 1, max: n }),
    kind: fc.constantFrom('echo' as const, 'ready' as const),
    value: fc.constantFrom(...VALUES),
  });

const scenario = fc.integer({ min: 1, max: 3 }).chain((f) => {
  const n = 3 * f + 1;
  return fc.record({
    f: fc.constant(f),
    byzantine: fc.uniqueArray(fc.integer({ min: 1, max: n }), { minLength: 0, maxLength: f }),
    senderHonest: fc.boolean(),
    initials: fc.array(fc.option(fc.constantFrom('a', 'b'), { nil: undefined }), { minLength: n, maxLength: n }),
    attacks: fc.array(attack(n), { maxLength: 6 * n }),
    picks: fc.array(fc.nat(), { minLength: 1, maxLength: 64 }),
  });
});

describe('reliable broadcast: any order, up to f Byzantine voters', () => {
  it('agreement, totality, validity and integrity', () => {
    fc.assert(
      fc.property(scenario, (s) => {
        const n = 3 * s.f + 1;
        const initials = s.senderHonest ? Array.from({ length: n }, () => 'a') : s.initials;
        // A Byzantine voter's attacks come from it; the rest of the generated ones are dropped.
        const attacks = s.attacks.filter((a) => s.byzantine.includes(a.from));
        const run = runBroadcast({ f: s.f, byzantine: s.byzantine, initials, attacks, picks: s.picks });
        const values = run.honest.map((h) => run.delivered.get(h));
        const got = new Set(values.filter((v) => v !== undefined));
        // Agreement: at most one value delivered among honest voters.
        expect(got.size).toBeLessThanOrEqual(1);
        // Totality: with every message delivered, all honest voters delivered or none did.
        expect(values.every((v) => v === undefined) || values.every((v) => v !== undefined)).toBe(true);
        // Integrity: only a value the sender signed.
        for (const v of got) expect(initials).toContain(v);
        // Validity: an honest sender's value is delivered by every honest voter.
        if (s.senderHonest) expect(values).toEqual(run.honest.map(() => 'a'));
      }),
      { numRuns: 1000 },
    );
  });

  it('a Byzantine sender showing a to some and b to others, f Byzantine voters echoing and readying either to anyone: one value or none, everywhere', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 3 }).chain((f) =>
          fc.record({
            f: fc.constant(f),
            split: fc.array(fc.constantFrom('a', 'b'), { minLength: 2 * f + 1, maxLength: 2 * f + 1 }),
            attacks: fc.array(
              fc.record({
                from: fc.integer({ min: 2 * f + 2, max: 3 * f + 1 }),
                to: fc.integer({ min: 1, max: 2 * f + 1 }),
                kind: fc.constantFrom('echo' as const, 'ready' as const),
                value: fc.constantFrom('a', 'b'),
              }),
              { maxLength: 8 * f },
            ),
            picks: fc.array(fc.nat(), { minLength: 1, maxLength: 64 }),
          }),
        ),
        ({ f, split, attacks, picks }) => {
          // The Byzantine voters are the last f; the sender is one of them or someone else, it does not matter.
          const byzantine = Array.from({ length: f }, (_, k) => 3 * f + 1 - k);
          const run = runBroadcast({ f, byzantine, initials: split, attacks, picks });
          const values = run.honest.map((h) => run.delivered.get(h));
          expect(new Set(values.filter((v) => v !== undefined)).size).toBeLessThanOrEqual(1);
          expect(values.every((v) => v === undefined) || values.every((v) => v !== undefined)).toBe(true);
        },
      ),
      { numRuns: 2000 },
    );
  });
});
