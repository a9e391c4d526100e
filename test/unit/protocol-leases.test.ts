/** The `leases` request and answer on the wire: decoded strictly, bounded, and refused with PROTOCOL_ERROR otherwise. */
import { Packr } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { decodeClientMessage, encodeMessage, parseOutcome } from '../../src/protocol/codec.js';
import { MAX_LEASES_PER_REPLY, PROTOCOL_VERSION } from '../../src/protocol/messages.js';
import { codeOf } from '../support/error-code.js';

const holder = new Uint8Array(32).fill(9);
const lease = { resource: 'orders', epoch: 3n, holder, remainingMs: 1_500 };

describe('leases on the wire', () => {
  it('round-trips the request and parses a well-formed answer', () => {
    expect(decodeClientMessage(encodeMessage({ type: 'leases', id: 7, limit: 32 }))).toEqual({
      type: 'leases',
      id: 7,
      limit: 32,
    });
    expect(parseOutcome('leases', { status: 'leases', leases: [lease], more: false })).toEqual({
      status: 'leases',
      leases: [lease],
      more: false,
    });
    expect(parseOutcome('leases', { status: 'forbidden' })).toEqual({ status: 'forbidden' });
  });

  it('refuses a request with unknown fields', () => {
    const packr = new Packr({ useRecords: false, int64AsType: 'bigint' });
    const frame = packr.pack({ v: PROTOCOL_VERSION, type: 'leases', id: 1, limit: 3, resource: 'x' });
    expect(codeOf(() => decodeClientMessage(frame))).toBe('PROTOCOL_ERROR');
  });

  it.each([
    ['too many entries', { status: 'leases', leases: Array(MAX_LEASES_PER_REPLY + 1).fill(lease), more: true }],
    ['an entry with an extra field', { status: 'leases', leases: [{ ...lease, note: '<b>' }], more: false }],
    ['a short holder key', { status: 'leases', leases: [{ ...lease, holder: new Uint8Array(5) }], more: false }],
    [
      'epoch 0 (a lease is always at epoch 1 or above)',
      { status: 'leases', leases: [{ ...lease, epoch: 0n }], more: false },
    ],
    ['a list that is not an array', { status: 'leases', leases: { 0: lease }, more: false }],
    ['no more flag', { status: 'leases', leases: [] }],
    ['a status answer to a leases request', { status: 'ok', epoch: 1n, leased: false, remainingMs: 0 }],
  ])('refuses an answer with %s (PROTOCOL_ERROR)', (_name, outcome) => {
    expect(codeOf(() => parseOutcome('leases', outcome as Record<string, unknown>))).toBe('PROTOCOL_ERROR');
  });
});
