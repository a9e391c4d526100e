/** Access rules: who may use which resources. */
import { describe, expect, it } from 'vitest';
import { toHex } from '../../src/common/bytes.js';
import { mayAccess, OPEN_ACCESS, parseAccessRules } from '../../src/replica/access.js';
import { codeOf } from '../support/error-code.js';

const alice = new Uint8Array(32).fill(0xa1);
const bob = new Uint8Array(32).fill(0xb0);

describe('access rules', () => {
  it('lets everyone use everything without a config', () => {
    expect(mayAccess(OPEN_ACCESS, alice, 'anything/at/all')).toBe(true);
  });

  it('gives a listed holder exactly its prefixes, and others the defaults', () => {
    const rules = parseAccessRules({
      format: 'quorumfence/replica-access/v1',
      defaultPrefixes: ['public/'],
      holders: { [toHex(alice)]: ['orders/', 'jobs/1'] },
    });
    expect(mayAccess(rules, alice, 'orders/9')).toBe(true);
    expect(mayAccess(rules, alice, 'jobs/12')).toBe(true);
    expect(mayAccess(rules, alice, 'public/x')).toBe(false);
    expect(mayAccess(rules, bob, 'public/x')).toBe(true);
    expect(mayAccess(rules, bob, 'orders/9')).toBe(false);
    const closed = parseAccessRules({ format: 'quorumfence/replica-access/v1' });
    expect(mayAccess(closed, alice, 'x')).toBe(false);
  });

  it('refuses malformed configs naming the field', () => {
    expect(codeOf(() => parseAccessRules({ format: 'nope' }))).toBe('UNKNOWN_VERSION');
    expect(codeOf(() => parseAccessRules({ format: 'quorumfence/replica-access/v1', holders: { XYZ: [] } }))).toBe(
      'INVALID_OPTION',
    );
    expect(codeOf(() => parseAccessRules({ format: 'quorumfence/replica-access/v1', defaultPrefixes: [1] }))).toBe(
      'INVALID_OPTION',
    );
    expect(codeOf(() => parseAccessRules({ format: 'quorumfence/replica-access/v1', typo: true }))).toBe(
      'INVALID_OPTION',
    );
  });
});
