/**
 * The replica core's waiting-acquire decisions (src/replica/core/line-core.ts) as pure functions: where an arriving
 * request goes, what follows the rules' answer, and the stepping of a line's head tries (one at a time; a wake during
 * a try is another pass after it, never lost; a frozen store ends serving; a failed try is `busy` and tells nobody an
 * epoch). The line itself, driven by these decisions, is held against a model in test/property/handoff-line.test.ts.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { QuorumFenceError } from '../../src/common/errors.js';
import type { Outcome } from '../../src/protocol/messages.js';
import type { Decision } from '../../src/replica/policy-types.js';
import {
  afterAnswer,
  createLineServing,
  inLineOrder,
  routeArrival,
  stepServing,
  waitOverAction,
  type ArrivalFacts,
  type LineAction,
  type LineServing,
} from '../../src/replica/core/line-core.js';

const JOINS: ArrivalFacts = {
  waits: true,
  nextEpoch: true,
  carriesEvidence: false,
  lineJoinable: true,
  storeFrozen: false,
  refused: false,
};
const GRANTED: Outcome = { status: 'granted', partial: new Uint8Array(96), epoch: 8n };
const BUSY: Outcome = { status: 'busy', epoch: 7n, remainingMs: 40 };

const types = (actions: readonly LineAction[]) => actions.map((action) => action.type);

/** A line serving `head`'s try (woken while idle). */
function trying(head = 1): LineServing {
  const serving = createLineServing();
  expect(stepServing(serving, { type: 'wake', head })).toEqual([{ type: 'serveHead', head }]);
  return serving;
}

describe("the replica core's waiting-acquire route", () => {
  it('sends a waiting nextEpoch acquire straight into a joinable line, and anything else to the rules', () => {
    expect(routeArrival(JOINS)).toBe('joinLine');
    const flips: Partial<ArrivalFacts>[] = [
      { waits: false },
      { nextEpoch: false },
      { carriesEvidence: true },
      { lineJoinable: false },
      { storeFrozen: true },
      { refused: true },
    ];
    for (const flip of flips) expect(routeArrival({ ...JOINS, ...flip }), JSON.stringify(flip)).toBe('decide');
  });

  it('waits in line after a busy answer that says it may wait, wakes the line after a release, and replies otherwise', () => {
    expect(afterAnswer(true, false, BUSY)).toEqual({ type: 'waitInLine', busy: { epoch: 7n, remainingMs: 40 } });
    expect(afterAnswer(false, false, BUSY)).toEqual({ type: 'reply' });
    expect(afterAnswer(true, false, GRANTED)).toEqual({ type: 'reply' });
    expect(afterAnswer(false, true, { status: 'released' })).toEqual({ type: 'wakeLine' });
    expect(afterAnswer(false, true, { status: 'not_holder', epoch: 7n })).toEqual({ type: 'reply' });
  });

  it('answers a waiter whose wait is over with one last try only when it is first', () => {
    expect(waitOverAction(true)).toBe('lastTry');
    expect(waitOverAction(false)).toBe('answerBusy');
  });
});

describe("the replica core's line order", () => {
  const record = { epoch: 8n, holder: Uint8Array.of(2), grantDigest: new Uint8Array(32) };
  const grant: Decision = { action: 'grant', record, leaseEndsAt: 1_000 };
  const join: Decision = {
    action: 'join',
    record,
    leaseEndsAt: 1_000,
    outcome: { status: 'renewed', remainingMs: 1_000 },
  };
  const busy: Decision = { action: 'reply', outcome: { status: 'busy', epoch: 7n, remainingMs: 40 } };
  const facts = { queued: false, lineWaits: true, recordEpoch: 7n, waits: true };

  it('lets no grant or join decided outside a waiting line overtake it: busy (and in the line) or not_holder', () => {
    expect(inLineOrder(grant, facts)).toEqual({
      decision: { action: 'reply', outcome: { status: 'busy', epoch: 7n, remainingMs: 0 } },
      arriving: true,
    });
    expect(inLineOrder(grant, { ...facts, waits: false })).toEqual({
      decision: { action: 'reply', outcome: { status: 'busy', epoch: 7n, remainingMs: 0 } },
      arriving: false,
    });
    expect(inLineOrder(join, facts)).toEqual({
      decision: { action: 'reply', outcome: { status: 'not_holder', epoch: 7n } },
      arriving: false,
    });
  });

  it("leaves the line's own try and a resource without a line as decided; a waiting busy counts as arriving", () => {
    expect(inLineOrder(grant, { ...facts, queued: true })).toEqual({ decision: grant, arriving: false });
    expect(inLineOrder(grant, { ...facts, lineWaits: false })).toEqual({ decision: grant, arriving: false });
    expect(inLineOrder(join, { ...facts, lineWaits: false })).toEqual({ decision: join, arriving: false });
    expect(inLineOrder(busy, { ...facts, lineWaits: false })).toEqual({ decision: busy, arriving: true });
    expect(inLineOrder(busy, { ...facts, queued: true })).toEqual({ decision: busy, arriving: false });
  });
});

describe("the replica core's line serving", () => {
  it('tries the head when woken idle, and nothing for an empty line', () => {
    const empty = createLineServing();
    expect(stepServing(empty, { type: 'wake', head: undefined })).toEqual([]);
    expect(empty.trying).toBe(false);
    expect(trying(3).trying).toBe(true);
  });

  it('keeps one try at a time: a wake during a try is one more pass once its actions are done', () => {
    const serving = trying(1);
    expect(stepServing(serving, { type: 'wake', head: 1 })).toEqual([]);
    expect(stepServing(serving, { type: 'wake', head: 1 })).toEqual([]);
    const after = stepServing(serving, {
      type: 'headTried',
      head: 1,
      inLine: true,
      epoch: 8n,
      result: { ok: true, outcome: BUSY },
    });
    expect(after).toEqual([
      { type: 'announceHead', head: 1, epoch: 7n },
      { type: 'armLeaseTimer', busy: BUSY },
      { type: 'continue' },
    ]);
    expect(stepServing(serving, { type: 'continue', head: 1 })).toEqual([{ type: 'serveHead', head: 1 }]);
    // No wake during this one: after its busy, serving stops until the lease's end (or a release) wakes it.
    stepServing(serving, { type: 'headTried', head: 1, inLine: true, epoch: 8n, result: { ok: true, outcome: BUSY } });
    expect(stepServing(serving, { type: 'continue', head: 1 })).toEqual([]);
    expect(serving.trying).toBe(false);
  });

  it('lets the head leave with its turn, and the next one try at once', () => {
    const serving = trying(1);
    const after = stepServing(serving, {
      type: 'headTried',
      head: 1,
      inLine: true,
      epoch: 8n,
      result: { ok: true, outcome: GRANTED },
    });
    expect(after).toEqual([
      { type: 'leave', head: 1, outcome: GRANTED },
      { type: 'afterGrant', outcome: GRANTED },
      { type: 'continue' },
    ]);
    expect(stepServing(serving, { type: 'continue', head: 2 })).toEqual([{ type: 'serveHead', head: 2 }]);
    // Nobody left behind it: serving stops.
    const last = trying(1);
    stepServing(last, { type: 'headTried', head: 1, inLine: true, epoch: 8n, result: { ok: true, outcome: GRANTED } });
    expect(stepServing(last, { type: 'continue', head: undefined })).toEqual([]);
    expect(last.trying).toBe(false);
  });

  it('passes to the next waiter when the head left during its try, carrying on from the grant it leaves behind', () => {
    const serving = trying(1);
    const after = stepServing(serving, {
      type: 'headTried',
      head: 1,
      inLine: false,
      epoch: 8n,
      result: { ok: true, outcome: GRANTED },
    });
    expect(after).toEqual([{ type: 'afterGrant', outcome: GRANTED }, { type: 'continue' }]);
    expect(stepServing(serving, { type: 'continue', head: 2 })).toEqual([{ type: 'serveHead', head: 2 }]);
  });

  it('answers a failed try busy at the request epoch and tells nobody an epoch; a frozen store ends every wait', () => {
    const serving = trying(1);
    const failed = stepServing(serving, {
      type: 'headTried',
      head: 1,
      inLine: true,
      epoch: 8n,
      result: { ok: false, frozen: false, error: new Error('disk') },
    });
    expect(failed).toEqual([
      { type: 'armLeaseTimer', busy: { status: 'busy', epoch: 8n, remainingMs: 0 } },
      { type: 'continue' },
    ]);
    stepServing(serving, { type: 'continue', head: 1 });
    const frozen = trying(1);
    const error = new QuorumFenceError('REPLICA_FROZEN', 'frozen');
    expect(
      stepServing(frozen, {
        type: 'headTried',
        head: 1,
        inLine: true,
        epoch: 8n,
        result: { ok: false, frozen: true, error },
      }),
    ).toEqual([{ type: 'failAll', error }]);
    expect(frozen.trying).toBe(false);
    expect(types(stepServing(frozen, { type: 'wake', head: 1 }))).toEqual(['serveHead']);
  });

  it('stops serving when performing a try threw, so the next wake tries again', () => {
    const serving = trying(1);
    stepServing(serving, { type: 'wake', head: 1 });
    expect(stepServing(serving, { type: 'abandoned' })).toEqual([]);
    expect(types(stepServing(serving, { type: 'wake', head: 1 }))).toEqual(['serveHead']);
  });

  it('over any order of wakes and tries ending: never two tries at once, and no wake left unserved', () => {
    type Step =
      { readonly kind: 'wake' } | { readonly kind: 'tried'; readonly busy: boolean; readonly inLine: boolean };
    const step: fc.Arbitrary<Step> = fc.oneof(
      fc.constant<Step>({ kind: 'wake' }),
      fc.record({ kind: fc.constant('tried' as const), busy: fc.boolean(), inLine: fc.boolean() }),
    );
    fc.assert(
      fc.property(fc.array(step, { maxLength: 60 }), (steps) => {
        const serving = createLineServing();
        let inFlight = 0;
        let wokenSinceTry = false; // a wake heard after the try in flight started
        const perform = (actions: readonly LineAction[]): void => {
          for (const action of actions) {
            if (action.type === 'serveHead') {
              inFlight += 1;
              wokenSinceTry = false;
              expect(inFlight).toBe(1);
            }
            if (action.type === 'continue') perform(stepServing(serving, { type: 'continue', head: 1 }));
          }
        };
        for (const s of steps) {
          if (s.kind === 'wake') {
            if (inFlight > 0) wokenSinceTry = true;
            perform(stepServing(serving, { type: 'wake', head: 1 }));
            expect(inFlight).toBe(1); // a line with a head is always being served after a wake
            continue;
          }
          if (inFlight === 0) continue;
          inFlight -= 1;
          const woken = wokenSinceTry;
          const outcome = s.busy ? BUSY : GRANTED;
          perform(
            stepServing(serving, {
              type: 'headTried',
              head: 1,
              inLine: s.inLine,
              epoch: 8n,
              result: { ok: true, outcome },
            }),
          );
          // A busy head still in line waits for its lease, unless woken during its try; anything else tries on.
          expect(inFlight).toBe(s.busy && s.inLine && !woken ? 0 : 1);
          expect(serving.trying).toBe(inFlight === 1);
        }
      }),
      { numRuns: 300 },
    );
  });
});
