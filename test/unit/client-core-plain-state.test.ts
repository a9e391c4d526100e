/**
 * A round call's state (renew, release, status, leases: src/client/core/round-call.ts) is plain data: no class
 * instance, no function, nothing kept outside it. What that buys is replay and inspection: a state copied with
 * structuredClone in the middle of a call steps, event for event, to the same actions and the same result as the
 * original.
 */
import { describe, expect, it } from 'vitest';
import { renewBodies } from '../../src/client/core/bodies.js';
import type { CoreAction, CoreEvent } from '../../src/client/core/io.js';
import {
  newRoundCall,
  roundCallResult,
  startRoundCall,
  stepRoundCall,
  type RoundCallState,
} from '../../src/client/core/round-call.js';
import { RELEASE_RULES, RENEW_RULES, type LeaseRoundParams } from '../../src/client/lease-calls.js';
import type { RenewOutcome } from '../../src/protocol/messages.js';

const READY = { phase: 'ready', failures: 0, lastFailure: undefined } as const;
const connections = [1, 2, 3, 4].map((index) => ({ index, state: READY }));
const grant = {
  resource: 'orders',
  epoch: 3n,
  holders: new Set([1, 2, 3]),
  evidence: [{ replica: 1, epoch: 3n, partial: new Uint8Array(96).fill(7) }],
};
const params: LeaseRoundParams = { grant, f: 1, t: 3, requestTimeoutMs: 1_000 };

type Send = Extract<CoreAction, { type: 'send' }>;
const sends = (actions: readonly CoreAction[]) => actions.filter((a): a is Send => a.type === 'send');

function renewed(send: Send, at: number, status: RenewOutcome['status'] = 'renewed'): CoreEvent {
  const outcome = status === 'renewed' ? { status, remainingMs: 1_000 } : { status };
  return { type: 'answer', at, request: send.request, answer: { kind: 'reply', outcome: outcome as RenewOutcome } };
}

/** Where a value is not plain data: a function, or an object of a class (Map, Set, arrays and bytes are plain). */
function notPlain(value: unknown, path = 'state'): string[] {
  if (typeof value === 'function') return [`${path} is a function`];
  if (typeof value !== 'object' || value === null) return [];
  if (value instanceof Uint8Array) return [];
  if (value instanceof Map)
    return [...value.entries()].flatMap(([k, v]) => [...notPlain(k, `${path}.key`), ...notPlain(v, `${path}.${k}`)]);
  if (value instanceof Set) return [...value].flatMap((v) => notPlain(v, `${path}[]`));
  const proto = Object.getPrototypeOf(value) as unknown;
  if (proto !== Object.prototype && proto !== Array.prototype && proto !== null) return [`${path} is a class instance`];
  return Object.entries(value).flatMap(([k, v]) => notPlain(v, `${path}.${k}`));
}

function renewCall(): { state: RoundCallState<LeaseRoundParams>; asked: Send[] } {
  const state = newRoundCall({ params, bodies: renewBodies(grant, 1_000), timeoutMs: 1_000 }, connections);
  const asked = sends(startRoundCall(state, RENEW_RULES, 0).actions);
  return { state, asked };
}

describe("a round call's state is plain data", () => {
  it('holds no function and no class instance, mid-call', () => {
    const { state, asked } = renewCall();
    expect(asked.map((send) => send.replica)).toEqual([1, 2, 3, 4]);
    stepRoundCall(state, RENEW_RULES, renewed(asked[0]!, 1));
    expect(notPlain(state)).toEqual([]);
    expect(notPlain({ f: () => 1, m: new Map([[1, new Date()]]) })).toEqual([
      'state.f is a function',
      'state.m.1 is a class instance',
    ]);
  });

  it('a copy made mid-call steps to the same actions and the same result as the original', () => {
    // Replica 4 is still connecting when the call starts: it is asked once it is ready, after the copy is made.
    const connecting = { phase: 'connecting', failures: 0, lastFailure: undefined } as const;
    const state = newRoundCall(
      { params, bodies: renewBodies(grant, 1_000), timeoutMs: 1_000 },
      connections.map((c) => (c.index === 4 ? { ...c, state: connecting } : c)),
    );
    const asked = sends(startRoundCall(state, RENEW_RULES, 0).actions);
    expect(asked.map((send) => send.replica)).toEqual([1, 2, 3]);
    stepRoundCall(state, RENEW_RULES, renewed(asked[0]!, 1));
    const copy = structuredClone(state);
    expect(copy).toEqual(state);
    const both = (event: CoreEvent) => {
      const original = stepRoundCall(state, RENEW_RULES, event).actions;
      expect(stepRoundCall(copy, RENEW_RULES, event).actions).toEqual(original);
      return original;
    };
    const late = sends(both({ type: 'connections', at: 2, connections }));
    expect(late.map((send) => send.replica)).toEqual([4]);
    // Replica 4 is not a holder: it gets the grant's evidence to join.
    expect(late[0]!.body).toMatchObject({ type: 'renew', evidence: grant.evidence });
    both(renewed(asked[1]!, 3, 'not_holder'));
    both(renewed(late[0]!, 4));
    both(renewed(asked[2]!, 5));
    // 2 (a holder) denied; 1, 4 and 3 renewed: t = 3.
    const result = roundCallResult(state, RENEW_RULES);
    expect(result).toMatchObject({ ok: true, sentAt: 0, renewedBy: [1, 4, 3] });
    expect(roundCallResult(copy, RENEW_RULES)).toEqual(result);
  });

  it('a copy of a release round made before its deadline times out as the original does, with the same timer', () => {
    const state = newRoundCall(
      { params, bodies: { body: { type: 'release', resource: 'orders', epoch: 3n } }, timeoutMs: 500 },
      connections,
    );
    const started = startRoundCall(state, RELEASE_RULES, 0).actions;
    const deadline = started.find((a): a is Extract<CoreAction, { type: 'set_timer' }> => a.type === 'set_timer')!;
    const copy = structuredClone(state);
    const event: CoreEvent = { type: 'timer', at: 500, timer: deadline.timer };
    const original = stepRoundCall(state, RELEASE_RULES, event).actions;
    expect(original.map((a) => a.type)).toContain('abandon');
    expect(stepRoundCall(copy, RELEASE_RULES, event).actions).toEqual(original);
    expect(roundCallResult(copy, RELEASE_RULES)).toEqual(roundCallResult(state, RELEASE_RULES));
    expect(roundCallResult(state, RELEASE_RULES)).toMatchObject({ ok: false, reason: 'timeout', released: 0 });
  });
});
