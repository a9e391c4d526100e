/**
 * The replica core's request path (src/replica/core/request-core.ts) over random event sequences: several requests
 * in flight at once, each decided (a grant, a resend, a join above or below the record, a renew, a release, a
 * refusal), their writes becoming durable or failing and their partials signed or failing in any order the
 * scheduler picks. Checked on every sequence:
 *   - durable before visible (S3): no `reply` for a request whose decision writes a record (and none carrying a
 *     partial at all) comes before that request's `durable` event, and nothing is replied after its write failed;
 *   - each request ends exactly once (one reply or one fail), and every request whose events all succeeded is
 *     answered: a grant or a resend with the partial signed for it (of its own grant message), anything else with
 *     the rules' outcome;
 *   - the core's actions are what the driver needs: the lease change before the write, the record written is the
 *     decision's, a new grant signed while its record flushes and a resend only once its section is over.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Outcome } from '../../src/protocol/messages.js';
import {
  createRequestCore,
  stepRequest,
  type CoreAction,
  type CoreEvent,
  type RequestId,
} from '../../src/replica/core/request-core.js';
import type { Decision, SignedRecord } from '../../src/replica/policy-types.js';
import { grantMessage } from '../../src/token/grant.js';

const CLUSTER = new Uint8Array(32).fill(7);
const HOLDER = new Uint8Array(32).fill(9);

type Kind = 'grant' | 'resend' | 'joinAbove' | 'joinBelow' | 'renew' | 'release' | 'refuse';
const KINDS: readonly Kind[] = ['grant', 'resend', 'joinAbove', 'joinBelow', 'renew', 'release', 'refuse'];

function recordAt(epoch: bigint): SignedRecord {
  return { epoch, holder: HOLDER, grantDigest: new Uint8Array(32).fill(Number(epoch % 200n)) };
}

function decisionOf(kind: Kind, epoch: bigint): Decision {
  const renewed = { status: 'renewed', remainingMs: 50 } as const;
  switch (kind) {
    case 'grant':
      return { action: 'grant', record: recordAt(epoch), leaseEndsAt: 100 };
    case 'resend':
      return { action: 'resend', leaseEndsAt: 100 };
    case 'joinAbove':
      return { action: 'join', record: recordAt(epoch), leaseEndsAt: 100, outcome: renewed };
    case 'joinBelow':
      return { action: 'join', joined: { epoch, holder: HOLDER }, leaseEndsAt: 100, outcome: renewed };
    case 'renew':
      return { action: 'renew', leaseEndsAt: 100, outcome: renewed };
    case 'release':
      return { action: 'release', outcome: { status: 'released' } };
    case 'refuse':
      return { action: 'reply', outcome: { status: 'stale', epoch } };
  }
}

interface Plan {
  readonly kind: Kind;
  /** The write fails (for a decision that writes), the signing fails (for one that signs). */
  readonly writeFails: boolean;
  readonly signFails: boolean;
}

/** One request as the scheduler sees it: what was done, what may come next. */
interface Flight {
  readonly id: RequestId;
  readonly plan: Plan;
  readonly epoch: bigint;
  decided: boolean;
  /** The section's end (durable or failed) was delivered. */
  sectionOver: boolean;
  durable: boolean;
  writeFailed: boolean;
  /** A sign action was seen and its result not delivered yet. */
  signing: Uint8Array | undefined;
  partial: Uint8Array | undefined;
  ends: CoreAction[];
  wrote: SignedRecord | undefined;
  signedWhileFlushing: boolean | undefined;
}

/** A partial for a message: any bytes that name it (the core never looks inside). */
function partialFor(message: Uint8Array): Uint8Array {
  return Uint8Array.from([message.length % 251, ...message.slice(-8)]);
}

/** The events each flight may receive next. */
function enabled(flight: Flight): CoreEvent[] {
  const { id, plan } = flight;
  if (!flight.decided) {
    const grant = { clusterId: CLUSTER, resource: `r${id}`, epoch: flight.epoch, holder: HOLDER };
    const extras = id % 2 === 0 ? { epoch: flight.epoch } : {};
    return [{ type: 'decided', id, decision: decisionOf(plan.kind, flight.epoch), grant, extras }];
  }
  const events: CoreEvent[] = [];
  if (!flight.sectionOver) {
    const writes = flight.wrote !== undefined;
    events.push(
      writes && plan.writeFails
        ? { type: 'writeFailed', id, error: new Error(`write ${id}`) }
        : { type: 'durable', id },
    );
  }
  if (flight.signing) {
    events.push(
      plan.signFails
        ? { type: 'signFailed', id, error: new Error(`sign ${id}`) }
        : { type: 'signed', id, partial: partialFor(flight.signing) },
    );
  }
  return events;
}

function run(plans: readonly Plan[], picks: readonly number[]): Flight[] {
  const core = createRequestCore();
  const flights: Flight[] = plans.map((plan, id) => ({
    id,
    plan,
    epoch: BigInt(10 + id),
    decided: false,
    sectionOver: false,
    durable: false,
    writeFailed: false,
    signing: undefined,
    partial: undefined,
    ends: [],
    wrote: undefined,
    signedWhileFlushing: undefined,
  }));
  let pick = 0;
  for (let steps = 0; steps < 100; steps++) {
    const choices = flights.flatMap(enabled);
    if (choices.length === 0) break;
    const event = choices[(picks[pick++ % Math.max(1, picks.length)] ?? 0) % choices.length]!;
    const flight = flights[event.id]!;
    deliver(flight, event);
    for (const action of stepRequest(core, event)) observe(flights[action.id]!, action);
  }
  expect(flights.flatMap(enabled)).toEqual([]);
  expect(core.pending.size).toBe(0);
  return flights;
}

function deliver(flight: Flight, event: CoreEvent): void {
  switch (event.type) {
    case 'decided':
      flight.decided = true;
      return;
    case 'durable':
      flight.sectionOver = true;
      flight.durable = true;
      return;
    case 'writeFailed':
      flight.sectionOver = true;
      flight.writeFailed = true;
      return;
    case 'signed':
      flight.partial = event.partial;
      flight.signing = undefined;
      return;
    case 'signFailed':
      flight.signing = undefined;
      return;
  }
}

/** Checks each action as it is emitted, against what the flight went through so far. */
function observe(flight: Flight, action: CoreAction): void {
  switch (action.type) {
    case 'lease':
      expect(flight.wrote, 'the lease changes before the write').toBeUndefined();
      return;
    case 'write':
      expect(flight.sectionOver).toBe(false);
      flight.wrote = action.record;
      return;
    case 'sign':
      expect(flight.signing).toBeUndefined();
      flight.signing = action.message;
      flight.signedWhileFlushing = action.whileFlushing;
      return;
    case 'reply':
    case 'fail':
      if (action.type === 'reply') {
        // S3: nothing of a request leaves before its section's write is durable, a partial least of all.
        expect(flight.durable, `reply to ${flight.id} (${flight.plan.kind}) before its durable event`).toBe(true);
        expect(flight.writeFailed).toBe(false);
      }
      flight.ends.push(action);
      return;
  }
}

function expectedOutcome(flight: Flight): Outcome | 'fail' {
  const { kind, writeFails, signFails } = flight.plan;
  const writes = kind === 'grant' || kind === 'joinAbove';
  if (writes && writeFails) return 'fail';
  const signs = kind === 'grant' || kind === 'resend';
  if (!signs) return (decisionOf(kind, flight.epoch) as { outcome: Outcome }).outcome;
  if (signFails) return 'fail';
  const message = grantMessage({ clusterId: CLUSTER, resource: `r${flight.id}`, epoch: flight.epoch, holder: HOLDER });
  return {
    status: 'granted',
    partial: partialFor(message),
    ...(flight.id % 2 === 0 ? { epoch: flight.epoch } : {}),
  };
}

const plan: fc.Arbitrary<Plan> = fc.record({
  kind: fc.constantFrom(...KINDS),
  writeFails: fc.boolean(),
  signFails: fc.boolean(),
});

describe('the replica core: durable before visible', () => {
  it('answers each request once, and nothing of a request before its record is durable', () => {
    fc.assert(
      fc.property(
        fc.array(plan, { minLength: 1, maxLength: 6 }),
        fc.array(fc.nat(), { minLength: 1, maxLength: 60 }),
        (plans, picks) => {
          for (const flight of run(plans, picks)) {
            expect(flight.ends, `request ${flight.id} ends exactly once`).toHaveLength(1);
            const end = flight.ends[0]!;
            const expected = expectedOutcome(flight);
            if (expected === 'fail') expect(end.type).toBe('fail');
            else expect(end).toMatchObject({ type: 'reply', outcome: expected });
            if (flight.plan.kind === 'grant' || flight.plan.kind === 'joinAbove') {
              const decision = decisionOf(flight.plan.kind, flight.epoch) as { record: SignedRecord };
              expect(flight.wrote).toEqual(decision.record);
            } else expect(flight.wrote).toBeUndefined();
            if (flight.plan.kind === 'grant') expect(flight.signedWhileFlushing).toBe(true);
            if (flight.plan.kind === 'resend' && flight.signedWhileFlushing !== undefined)
              expect(flight.signedWhileFlushing).toBe(false);
          }
        },
      ),
      { numRuns: 400 },
    );
  });

  it('holds a partial signed before its record is durable until the durable event', () => {
    const core = createRequestCore();
    const grant = { clusterId: CLUSTER, resource: 'r', epoch: 5n, holder: HOLDER };
    const decided = stepRequest(core, { type: 'decided', id: 1, decision: decisionOf('grant', 5n), grant, extras: {} });
    expect(decided.map((action) => action.type)).toEqual(['lease', 'write', 'sign']);
    expect(stepRequest(core, { type: 'signed', id: 1, partial: Uint8Array.of(1, 2) })).toEqual([]);
    const durable = stepRequest(core, { type: 'durable', id: 1 });
    expect(durable).toEqual([
      { type: 'reply', id: 1, outcome: { status: 'granted', partial: Uint8Array.of(1, 2) }, signed: 'new' },
    ]);
  });

  it('drops a partial whose record failed to be written', () => {
    const core = createRequestCore();
    const grant = { clusterId: CLUSTER, resource: 'r', epoch: 5n, holder: HOLDER };
    stepRequest(core, { type: 'decided', id: 1, decision: decisionOf('grant', 5n), grant, extras: {} });
    expect(stepRequest(core, { type: 'signed', id: 1, partial: Uint8Array.of(1) })).toEqual([]);
    const error = new Error('disk full');
    expect(stepRequest(core, { type: 'writeFailed', id: 1, error })).toEqual([{ type: 'fail', id: 1, error }]);
    expect(stepRequest(core, { type: 'durable', id: 1 })).toEqual([]);
    expect(core.pending.size).toBe(0);
  });
});
