/** Interchange documents: every field checked at the boundary. */
import { describe, expect, it } from 'vitest';
import { toHex } from '../../src/common/bytes.js';
import { grantDigest } from '../../src/token/grant.js';
import {
  INTERCHANGE_FORMAT,
  INTERCHANGE_FORMAT_SIGNED,
  INTERCHANGE_FORMAT_V1,
  parseInterchange,
} from '../../src/replica/interchange.js';
import { codeOf } from '../support/error-code.js';

const alice = new Uint8Array(32).fill(0xa1);

describe('interchange parsing', () => {
  const clusterId = new Uint8Array(32).fill(4);
  const entry = (resource: string, epoch: bigint) => ({
    resource,
    epoch: epoch.toString(),
    holder: toHex(alice),
    grantDigest: toHex(grantDigest({ clusterId, resource, epoch, holder: alice })),
  });
  const doc = (entries: unknown[]) => ({
    format: INTERCHANGE_FORMAT,
    clusterId: toHex(clusterId),
    replica: 1,
    floor: '0',
    entries,
  });

  it('accepts a well-formed document', () => {
    expect(parseInterchange(doc([entry('a', 1n), entry('b', (1n << 63n) - 1n)]), clusterId).entries).toHaveLength(2);
  });

  it('reads the floor of a v2 document, and a v1 document (no floor) as floor 0', () => {
    expect(parseInterchange({ ...doc([]), floor: '9223372036854775807' }, clusterId).floor).toBe((1n << 63n) - 1n);
    const v1 = { format: INTERCHANGE_FORMAT_V1, clusterId: toHex(clusterId), replica: 1, entries: [entry('a', 3n)] };
    expect(parseInterchange(v1, clusterId)).toMatchObject({ floor: 0n, replica: 1 });
    for (const floor of [undefined, 5, '-1', '01', '9223372036854775808', '1e3'])
      expect(codeOf(() => parseInterchange({ ...doc([]), floor }, clusterId))).toBe('BAD_INTERCHANGE');
  });

  it("reads the record of a signed (v3) export like v2 (the signature is readFrozenExport's to check), and no other format", () => {
    const v3 = { ...doc([entry('a', 3n)]), format: INTERCHANGE_FORMAT_SIGNED, floor: '2', signature: '00' };
    expect(parseInterchange(v3, clusterId)).toMatchObject({ floor: 2n, replica: 1 });
    expect(codeOf(() => parseInterchange({ ...v3, floor: undefined }, clusterId))).toBe('BAD_INTERCHANGE');
    expect(codeOf(() => parseInterchange({ ...v3, format: 'quorumfence/signing-record/v4' }, clusterId))).toBe(
      'UNKNOWN_VERSION',
    );
  });

  it('refuses every malformed field with BAD_INTERCHANGE', () => {
    for (const bad of [
      doc([{ ...entry('a', 1n), epoch: '0' }]),
      doc([{ ...entry('a', 1n), epoch: '01' }]),
      doc([{ ...entry('a', 1n), epoch: (1n << 63n).toString() }]),
      doc([{ ...entry('a', 1n), holder: 'zz' }]),
      doc([{ ...entry('a', 1n), resource: '' }]),
      doc([entry('a', 1n), entry('a', 2n)]),
      doc([{ ...entry('a', 1n), grantDigest: entry('a', 2n).grantDigest }]),
      { ...doc([]), replica: 0 },
      { ...doc([]), replica: 32 }, // above MAX_REPLICAS: a signed export binds the index as a u16
      { ...doc([]), entries: {} },
      [],
    ]) {
      expect(codeOf(() => parseInterchange(bad, clusterId))).toBe('BAD_INTERCHANGE');
    }
    expect(codeOf(() => parseInterchange({ ...doc([]), clusterId: '11'.repeat(32) }, clusterId))).toBe(
      'CLUSTER_MISMATCH',
    );
  });
});
