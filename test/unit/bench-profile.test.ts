/**
 * The benchmark's profile reduction (src/bench/profile.ts) on a tiny synthetic
 * .cpuprofile: self time per function from the gaps between samples, idle left
 * out, the time window, the buckets, and the division by grants.
 */
import { describe, expect, it } from 'vitest';
import { breakdown, bucketOf, parseProfile, selfTimeMs, type CpuProfile } from '../../src/bench/profile.js';
import { QuorumFenceError } from '../../src/common/errors.js';

const frame = (functionName: string, url = '') => ({ functionName, url, lineNumber: 9 });

// Samples at 1000 (sign), 1500 (sign), 2500 (idle), 3000 (writev), 3100 (gc); end 3400.
const profile: CpuProfile = {
  nodes: [
    { id: 1, callFrame: frame('(root)') },
    { id: 2, callFrame: frame('sign', 'file:///app/node_modules/@chainsafe/blst/blst.js') },
    { id: 3, callFrame: frame('(idle)') },
    { id: 4, callFrame: frame('writev') },
    { id: 5, callFrame: frame('(garbage collector)') },
  ],
  startTime: 0,
  endTime: 3400,
  samples: [2, 2, 3, 4, 5],
  timeDeltas: [1000, 500, 1000, 500, 100],
};

describe('bench profile reduction', () => {
  it('counts each sample as the gap to the next one and leaves idle out', () => {
    const totals = selfTimeMs(profile);
    expect(totals.get('sign blst.js:10')).toEqual({ ms: 1.5, bucket: 'crypto' });
    expect(totals.get('writev')?.ms).toBeCloseTo(0.1);
    expect(totals.get('writev')?.bucket).toBe('socket I/O');
    expect(totals.get('(garbage collector)')).toEqual({ ms: 0.3, bucket: 'gc' });
    expect([...totals.keys()].some((k) => k.startsWith('(idle)'))).toBe(false);
  });

  it('keeps only samples inside the window', () => {
    const totals = selfTimeMs(profile, { fromUs: 1200, toUs: 3000 });
    expect(totals.get('sign blst.js:10')?.ms).toBe(1);
    expect(totals.get('writev')?.ms).toBeCloseTo(0.1);
    expect(totals.has('(garbage collector)')).toBe(false);
  });

  it('sums profiles of one kind into ms per grant by bucket, top functions first', () => {
    const result = breakdown([profile, profile], 2);
    expect(result.buckets.crypto).toBeCloseTo(1.5);
    expect(result.buckets['socket I/O']).toBeCloseTo(0.1);
    expect(result.buckets.gc).toBeCloseTo(0.3);
    expect(result.buckets.other).toBe(0);
    expect(result.totalMsPerGrant).toBeCloseTo(1.9);
    expect(result.top[0]).toEqual({ fn: 'sign blst.js:10', bucket: 'crypto', msPerGrant: 1.5 });
    expect(result.profiles).toBe(2);
    expect(result.sampledMsPerGrant).toBeCloseTo(1.9);
  });

  it('scales every figure to the measured CPU time, keeping the proportions of the samples', () => {
    const result = breakdown([profile], 1, { cpuMsPerGrant: 0.95 });
    expect(result.sampledMsPerGrant).toBeCloseTo(1.9);
    expect(result.totalMsPerGrant).toBeCloseTo(0.95);
    expect(result.buckets.crypto).toBeCloseTo(0.75);
    expect(result.top[0]!.msPerGrant).toBeCloseTo(0.75);
  });

  it('buckets by script and name', () => {
    expect(bucketOf('get', 'file:///app/node_modules/lmdb/read.js')).toBe('lmdb/fsync');
    expect(bucketOf('unpack', 'file:///app/node_modules/msgpackr/unpack.js')).toBe('msgpack');
    expect(bucketOf('send', 'file:///app/node_modules/ws/lib/sender.js')).toBe('socket I/O');
    expect(bucketOf('custom_gc', '')).toBe('crypto');
    expect(bucketOf('sigValidate', '')).toBe('crypto');
    expect(bucketOf('decide', 'file:///app/dist/src/replica/policy.js')).toBe('other');
  });

  it('refuses what is not a profile, and zero grants, with INVALID_ARGUMENT', () => {
    const codeOf = (fn: () => unknown) => {
      try {
        fn();
      } catch (error) {
        return error instanceof QuorumFenceError ? error.code : 'not a QuorumFenceError';
      }
      return 'no error';
    };
    expect(codeOf(() => parseProfile('{"nodes": []}'))).toBe('INVALID_ARGUMENT');
    expect(codeOf(() => breakdown([profile], 0))).toBe('INVALID_ARGUMENT');
    expect(parseProfile(JSON.stringify(profile)).samples).toHaveLength(5);
  });
});
