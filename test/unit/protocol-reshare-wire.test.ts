/**
 * The wire's reshare fields (docs/protocol.md, Wire): a grant's share generation (absent = 0, present only as
 * 1..2^32-1, so each answer has one encoding) and the REPLICA_FROZEN error code, through the real codec.
 */
import { describe, expect, it } from 'vitest';
import { decodeServerMessage, encodeMessage, parseOutcome } from '../../src/protocol/codec.js';
import { codeOf } from '../support/error-code.js';

const partial = new Uint8Array(96).fill(7);

function grantedWith(fields: Record<string, unknown>) {
  const frame = encodeMessage({ type: 'reply', id: 1, outcome: { status: 'granted', partial, ...fields } } as never);
  const message = decodeServerMessage(frame);
  if (message.type !== 'reply') throw new Error(`decoded a ${message.type}`);
  return parseOutcome('acquire', message.outcome);
}

describe('the share generation of a grant', () => {
  it('is absent for generation 0 and carried for 1 .. 2^32-1', () => {
    expect(grantedWith({})).toEqual({ status: 'granted', partial });
    expect(grantedWith({ generation: 1 })).toEqual({ status: 'granted', partial, generation: 1 });
    expect(grantedWith({ generation: 0xffff_ffff, epoch: 5n })).toEqual({
      status: 'granted',
      partial,
      epoch: 5n,
      generation: 0xffff_ffff,
    });
  });

  it('refuses 0 written out, a value past u32, a negative one and a string (PROTOCOL_ERROR)', () => {
    for (const generation of [0, 0x1_0000_0000, -1, '1'])
      expect(codeOf(() => grantedWith({ generation }))).toBe('PROTOCOL_ERROR');
  });

  it('is refused on any outcome but granted (PROTOCOL_ERROR)', () => {
    const frame = encodeMessage({
      type: 'reply',
      id: 1,
      outcome: { status: 'stale', epoch: 3n, generation: 1 },
    } as never);
    const message = decodeServerMessage(frame);
    expect(codeOf(() => message.type === 'reply' && parseOutcome('acquire', message.outcome))).toBe('PROTOCOL_ERROR');
  });
});

describe('the REPLICA_FROZEN error frame', () => {
  it('decodes, and an unknown code is still refused', () => {
    expect(
      decodeServerMessage(encodeMessage({ type: 'error', id: 3, code: 'REPLICA_FROZEN', message: 'frozen' })),
    ).toEqual({
      type: 'error',
      id: 3,
      code: 'REPLICA_FROZEN',
      message: 'frozen',
    });
    const unknown = encodeMessage({ type: 'error', id: 3, code: 'NOT_A_CODE', message: 'x' } as never);
    expect(codeOf(() => decodeServerMessage(unknown))).toBe('PROTOCOL_ERROR');
  });
});
