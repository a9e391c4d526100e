/** The replica limits object: defaults and refusals. */
import { describe, expect, it } from 'vitest';
import { DEFAULT_REPLICA_LIMITS, replicaLimits } from '../../src/replica/options.js';
import { codeOf } from '../support/error-code.js';

describe('replica limits', () => {
  it('fills defaults and refuses contradictions up front', () => {
    expect(replicaLimits()).toEqual(DEFAULT_REPLICA_LIMITS);
    expect(replicaLimits({ maxTtlMs: 5_000, minTtlMs: undefined })).toMatchObject({
      maxTtlMs: 5_000,
      minTtlMs: DEFAULT_REPLICA_LIMITS.minTtlMs,
    });
    expect(codeOf(() => replicaLimits({ minTtlMs: 10_000, maxTtlMs: 1_000 }))).toBe('INVALID_OPTION');
    expect(codeOf(() => replicaLimits({ maxFrameBytes: 100 }))).toBe('INVALID_OPTION');
    expect(codeOf(() => replicaLimits({ maxInFlightPerConnection: 0 }))).toBe('INVALID_OPTION');
    expect(codeOf(() => replicaLimits({ signingWorkers: -1 }))).toBe('INVALID_OPTION');
    expect(codeOf(() => replicaLimits({ maxEpochStep: 0n }))).toBe('INVALID_OPTION');
    expect(codeOf(() => replicaLimits({ maxTtlMs: 2 ** 31 }))).toBe('INVALID_OPTION');
    expect(codeOf(() => replicaLimits({ retentionMs: 0 }))).toBe('INVALID_OPTION');
    expect(codeOf(() => replicaLimits({ compactionIntervalMs: 0 }))).toBe('INVALID_OPTION');
    expect(codeOf(() => replicaLimits({ compactionIntervalMs: 2 ** 31 }))).toBe('INVALID_OPTION');
  });
});
