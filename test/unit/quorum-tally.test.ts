import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { QuorumTally } from '../../src/client/quorum-tally.js';

describe('QuorumTally: the (f+1) refusal rule and the quorum', () => {
  it('a refusal is confirmed only by f+1 replicas, and the round closes exactly when nothing can change', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 10 }),
        fc.array(fc.constantFrom('ok', 'forbidden', 'invalid'), { maxLength: 31 }),
        (f, answers) => {
          const n = 3 * f + 1;
          const tally = new QuorumTally<'forbidden' | 'invalid'>(f, 2 * f + 1);
          answers.slice(0, n).forEach((answer, k) => {
            if (answer === 'ok') tally.accept();
            else tally.refuse(answer, `${answer} ${k}`);
          });
          const seen = answers.slice(0, n);
          const forbidden = seen.filter((a) => a === 'forbidden').length;
          const invalid = seen.filter((a) => a === 'invalid').length;
          const ok = seen.length - forbidden - invalid;
          expect(tally.accepted).toBe(ok);
          expect(tally.confirmed('forbidden', 'invalid')?.kind).toBe(
            forbidden > f ? 'forbidden' : invalid > f ? 'invalid' : undefined,
          );
          const possible = n - seen.length;
          expect(tally.open(possible)).toBe(
            ok < 2 * f + 1 && forbidden <= f && invalid <= f && ok + possible >= 2 * f + 1,
          );
        },
      ),
    );
  });

  it('quotes the first message of a confirmed refusal', () => {
    const tally = new QuorumTally<'invalid'>(1, 3);
    tally.refuse('invalid', 'ttl too long');
    expect(tally.confirmed('invalid')).toBeUndefined();
    tally.refuse('invalid', 'other');
    expect(tally.confirmed('invalid')).toEqual({ kind: 'invalid', count: 2, first: 'ttl too long' });
  });
});
