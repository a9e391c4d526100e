/**
 * A replica's epoch floor on the wire (docs/protocol.md, "Epoch choice"): the welcome and every acquire answer but
 * a refusal carry it when it is above 0 (absent = 0, so each message has one encoding), through the real codec;
 * a client connection keeps the highest floor it heard on that connection.
 */
import { describe, expect, it } from 'vitest';
import { INITIAL_CONNECTION_STATE, transition, type ConnectionEvent } from '../../src/client/connection-state.js';
import { MAX_EPOCH } from '../../src/common/limits.js';
import { decodeServerMessage, encodeMessage, parseOutcome } from '../../src/protocol/codec.js';
import { codeOf } from '../support/error-code.js';

const partial = new Uint8Array(96).fill(7);

function welcome(fields: Record<string, unknown>) {
  return decodeServerMessage(encodeMessage({ type: 'welcome', id: 0, replica: 2, ...fields } as never));
}

function acquireAnswer(outcome: Record<string, unknown>) {
  const message = decodeServerMessage(encodeMessage({ type: 'reply', id: 1, outcome } as never));
  if (message.type !== 'reply') throw new Error(`decoded a ${message.type}`);
  return parseOutcome('acquire', message.outcome);
}

describe('the floor in a welcome', () => {
  it('is absent for 0 and carried for 1 .. the largest epoch', () => {
    expect(welcome({})).toEqual({ type: 'welcome', id: 0, replica: 2 });
    expect(welcome({ floor: 1n })).toEqual({ type: 'welcome', id: 0, replica: 2, floor: 1n });
    expect(welcome({ floor: MAX_EPOCH })).toMatchObject({ floor: MAX_EPOCH });
  });

  it('refuses 0 written out, a negative floor, one past the epoch space and a string (PROTOCOL_ERROR)', () => {
    for (const floor of [0n, -1n, MAX_EPOCH + 1n, '5']) expect(codeOf(() => welcome({ floor }))).toBe('PROTOCOL_ERROR');
  });
});

describe('the floor in an acquire answer', () => {
  it('is carried by granted, stale, busy and too_far', () => {
    expect(acquireAnswer({ status: 'granted', partial, floor: 9n })).toEqual({ status: 'granted', partial, floor: 9n });
    expect(acquireAnswer({ status: 'stale', epoch: 9n, floor: 9n })).toEqual({ status: 'stale', epoch: 9n, floor: 9n });
    expect(acquireAnswer({ status: 'busy', epoch: 12n, remainingMs: 5, floor: 9n })).toEqual({
      status: 'busy',
      epoch: 12n,
      remainingMs: 5,
      floor: 9n,
    });
    expect(acquireAnswer({ status: 'too_far', epoch: 9n, floor: 9n })).toEqual({
      status: 'too_far',
      epoch: 9n,
      floor: 9n,
    });
  });

  it('refuses 0 written out, and a floor on a refusal (PROTOCOL_ERROR)', () => {
    expect(codeOf(() => acquireAnswer({ status: 'stale', epoch: 3n, floor: 0n }))).toBe('PROTOCOL_ERROR');
    expect(codeOf(() => acquireAnswer({ status: 'forbidden', floor: 3n }))).toBe('PROTOCOL_ERROR');
    expect(codeOf(() => acquireAnswer({ status: 'invalid', message: 'no', floor: 3n }))).toBe('PROTOCOL_ERROR');
  });
});

describe("a connection's floor", () => {
  const handshake = (floor?: bigint): ConnectionEvent[] => [
    { type: 'socket_open' },
    { type: 'challenge_accepted' },
    floor === undefined ? { type: 'welcome' } : { type: 'welcome', floor },
  ];

  it('comes with each welcome, rises with answers and never falls on one connection', () => {
    let state = handshake(20n).reduce(transition, INITIAL_CONNECTION_STATE);
    expect(state).toMatchObject({ phase: 'ready', floor: 20n });
    state = transition(state, { type: 'floor', floor: 30n });
    expect(state.floor).toBe(30n);
    const same = transition(state, { type: 'floor', floor: 25n });
    expect(same).toBe(state);
    state = transition(state, { type: 'failed', kind: 'closed', message: 'gone' });
    state = transition(state, { type: 'retry' });
    // A new connection takes the replica's word afresh: a replaced replica may start lower.
    state = handshake(10n).reduce(transition, state);
    expect(state).toMatchObject({ phase: 'ready', floor: 10n });
  });

  it('is absent until a replica names one, and a floor outside ready changes nothing', () => {
    const ready = handshake().reduce(transition, INITIAL_CONNECTION_STATE);
    expect(ready.floor).toBeUndefined();
    expect(transition(INITIAL_CONNECTION_STATE, { type: 'floor', floor: 4n })).toBe(INITIAL_CONNECTION_STATE);
  });
});
