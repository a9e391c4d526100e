/**
 * The byte codecs are plain JavaScript (the token decoder runs in browsers), so here they are held to Node's
 * own Buffer codecs, which they replaced: same text for every byte string, and the same strictness.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fromBase64Url, fromHex, toBase64Url, toHex } from '../../src/common/bytes.js';
import { codeOf } from '../support/error-code.js';

describe('byte codecs without Buffer', () => {
  it('hex and base64url match Buffer for every byte string, and round-trip', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => {
        const buffer = Buffer.from(bytes);
        expect(toHex(bytes)).toBe(buffer.toString('hex'));
        expect(toBase64Url(bytes)).toBe(buffer.toString('base64url'));
        expect(fromHex(toHex(bytes), bytes.length, 'x')).toEqual(new Uint8Array(bytes));
        expect(fromBase64Url(toBase64Url(bytes), 'x')).toEqual(new Uint8Array(bytes));
      }),
    );
  });

  it('refuses exactly the base64url texts that do not re-encode to themselves', () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[A-Za-z0-9_-]{0,12}$/), (text) => {
        const canonical = text.length % 4 !== 1 && Buffer.from(text, 'base64url').toString('base64url') === text;
        expect(codeOf(() => fromBase64Url(text, 'x'))).toBe(canonical ? undefined : 'BAD_ENCODING');
      }),
    );
  });
});
