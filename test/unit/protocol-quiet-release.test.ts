/**
 * A quiet release on the wire (docs/protocol.md, "Release and renewal off the holder's path"): `quiet` is absent or
 * `true` (each request has one encoding, the rule an acquire's `resume` follows too); only a release with it is one
 * the replica answers with nothing.
 */
import { describe, expect, it } from 'vitest';
import { decodeClientMessage, encodeMessage } from '../../src/protocol/codec.js';
import { isQuietRelease, type WireRequest } from '../../src/protocol/messages.js';
import { codeOf } from '../support/error-code.js';

const release = (fields: Record<string, unknown>) =>
  decodeClientMessage(encodeMessage({ type: 'release', id: 4, resource: 'jobs/1', epoch: 7n, ...fields } as never));

describe('a quiet release on the wire', () => {
  it('decodes with quiet: true, and without the field', () => {
    expect(release({ quiet: true })).toEqual({ type: 'release', id: 4, resource: 'jobs/1', epoch: 7n, quiet: true });
    expect(release({})).toEqual({ type: 'release', id: 4, resource: 'jobs/1', epoch: 7n });
  });

  it('refuses quiet spelt as false, a number or a string (PROTOCOL_ERROR)', () => {
    for (const quiet of [false, 1, 'true']) expect(codeOf(() => release({ quiet }))).toBe('PROTOCOL_ERROR');
  });

  it('is refused on any other request (PROTOCOL_ERROR)', () => {
    const renew = { type: 'renew', id: 5, resource: 'jobs/1', epoch: 7n, ttlMs: 1000, quiet: true };
    expect(codeOf(() => decodeClientMessage(encodeMessage(renew as never)))).toBe('PROTOCOL_ERROR');
  });
});

describe("an acquire's resume follows the same rule", () => {
  const acquire = (fields: Record<string, unknown>) =>
    decodeClientMessage(
      encodeMessage({ type: 'acquire', id: 5, resource: 'jobs/1', epoch: 7n, ttlMs: 1000, ...fields } as never),
    );

  it('decodes with resume: true and without it; refuses false, a number or a string (PROTOCOL_ERROR)', () => {
    expect(acquire({ resume: true })).toMatchObject({ resume: true });
    expect(acquire({})).not.toHaveProperty('resume');
    for (const resume of [false, 1, 'true']) expect(codeOf(() => acquire({ resume }))).toBe('PROTOCOL_ERROR');
  });
});

describe('isQuietRelease', () => {
  it('holds for a release with quiet: true only', () => {
    expect(isQuietRelease(release({ quiet: true }) as WireRequest)).toBe(true);
    expect(isQuietRelease(release({}) as WireRequest)).toBe(false);
    const status: WireRequest = { type: 'status', id: 1, resource: 'jobs/1' };
    expect(isQuietRelease(status)).toBe(false);
  });
});
