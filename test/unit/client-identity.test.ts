/** Client identities: key files written 0600 and never overwritten; loading checks every field. */
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ed25519 } from '@noble/curves/ed25519.js';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createIdentityFile,
  generateIdentity,
  identityFromSecretKey,
  IDENTITY_FORMAT,
  loadIdentityFile,
  parseIdentity,
} from '../../src/client/identity.js';
import { codeOf } from '../support/error-code.js';

const dir = mkdtempSync(join(tmpdir(), 'qf-client-identity-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('client identity', () => {
  it('signs with Ed25519 under its public key', () => {
    const identity = generateIdentity();
    const message = new TextEncoder().encode('transcript');
    expect(identity.publicKey).toHaveLength(32);
    expect(identity.publicKeyHex).toMatch(/^[0-9a-f]{64}$/);
    expect(ed25519.verify(identity.sign(message), message, identity.publicKey)).toBe(true);
  });

  it('signs the same bytes as the RFC 8032 reference, under the same public key (property)', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.uint8Array({ minLength: 0, maxLength: 300 }),
        (seed, message) => {
          const identity = identityFromSecretKey(seed);
          expect(identity.publicKey).toEqual(ed25519.getPublicKey(seed));
          expect(identity.sign(message)).toEqual(ed25519.sign(message, seed));
        },
      ),
      { numRuns: 100 },
    );
  });

  it('is determined by its secret key, and copies it', () => {
    const secret = new Uint8Array(32).fill(7);
    const a = identityFromSecretKey(secret);
    secret.fill(0);
    expect(identityFromSecretKey(new Uint8Array(32).fill(7)).publicKeyHex).toBe(a.publicKeyHex);
    expect(codeOf(() => identityFromSecretKey(new Uint8Array(31)))).toBe('BAD_LENGTH');
  });

  it('writes a key file with mode 0600, loads it back, and refuses to overwrite it', () => {
    const path = join(dir, 'id.key');
    const made = createIdentityFile(path);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(loadIdentityFile(path).publicKeyHex).toBe(made.publicKeyHex);
    expect(codeOf(() => createIdentityFile(path))).toBe('FILE_EXISTS');
    expect(loadIdentityFile(path).publicKeyHex).toBe(made.publicKeyHex);
  });

  it('refuses missing, malformed and inconsistent files with their codes', () => {
    expect(codeOf(() => loadIdentityFile(join(dir, 'missing.key')))).toBe('IO_ERROR');
    const garbage = join(dir, 'garbage.key');
    writeFileSync(garbage, 'not json');
    expect(codeOf(() => loadIdentityFile(garbage))).toBe('BAD_KEY_FILE');

    const good = generateIdentity();
    const secret = '11'.repeat(32);
    const publicKey = identityFromSecretKey(new Uint8Array(32).fill(0x11)).publicKeyHex;
    expect(parseIdentity({ format: IDENTITY_FORMAT, publicKey, secretKey: secret }).publicKeyHex).toBe(publicKey);
    expect(codeOf(() => parseIdentity({ format: 'quorumfence/identity/v9', publicKey, secretKey: secret }))).toBe(
      'UNKNOWN_VERSION',
    );
    expect(
      codeOf(() => parseIdentity({ format: IDENTITY_FORMAT, publicKey: good.publicKeyHex, secretKey: secret })),
    ).toBe('BAD_KEY_FILE');
    expect(codeOf(() => parseIdentity({ format: IDENTITY_FORMAT, publicKey, secretKey: 'AB'.repeat(32) }))).toBe(
      'BAD_KEY_FILE',
    );
    expect(codeOf(() => parseIdentity({ format: IDENTITY_FORMAT, publicKey, secretKey: '11'.repeat(31) }))).toBe(
      'BAD_KEY_FILE',
    );
    expect(codeOf(() => parseIdentity([]))).toBe('BAD_KEY_FILE');
  });
});
