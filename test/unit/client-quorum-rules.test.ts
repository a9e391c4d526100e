/** The client's pure rules: epoch choice, busy waits, backoff, the lease view, option checks. */
import { describe, expect, it } from 'vitest';
import { MAX_EPOCH } from '../../src/common/limits.js';
import { backoffDelay } from '../../src/client/backoff.js';
import { chooseEpoch, quorumRemainingMs } from '../../src/client/epoch-choice.js';
import { expiryMarginMs, localExpiry, renewalTime } from '../../src/client/lease-timing.js';
import { DEFAULT_CLIENT_OPTIONS, resolveClientOptions } from '../../src/client/options.js';
import { codeOf } from '../support/error-code.js';

describe('epoch choice: the (f+1)-th largest reported epoch, plus one', () => {
  it('takes the (f+1)-th largest', () => {
    expect(chooseEpoch([5n, 5n, 5n], 1)).toBe(6n);
    expect(chooseEpoch([0n, 0n, 0n, 0n], 1)).toBe(1n);
    expect(chooseEpoch([9n, 3n, 4n], 1)).toBe(5n);
    expect(chooseEpoch([100n, 100n, 7n, 7n, 7n], 2)).toBe(8n);
  });

  it('ignores f liars reporting a huge epoch', () => {
    expect(chooseEpoch([MAX_EPOCH, 10n, 10n, 10n], 1)).toBe(11n);
    expect(chooseEpoch([1n << 62n, 1n << 62n, 3n, 3n, 3n], 2)).toBe(4n);
  });

  it('honours a floor', () => {
    expect(chooseEpoch([1n, 1n, 1n], 1, 9n)).toBe(9n);
  });

  it('needs 2f+1 answers and refuses to leave the epoch range', () => {
    expect(codeOf(() => chooseEpoch([1n, 2n], 1))).toBe('INVALID_ARGUMENT');
    expect(codeOf(() => chooseEpoch([MAX_EPOCH, MAX_EPOCH, MAX_EPOCH], 1))).toBe('EPOCH_OUT_OF_RANGE');
  });
});

describe('busy wait: the (f+1)-th smallest remaining time', () => {
  it('is not shortened by f liars reporting 0 nor lengthened by f reporting forever', () => {
    expect(quorumRemainingMs([0, 500, 520], 1)).toBe(500);
    expect(quorumRemainingMs([500, 520, 0x7fffffff], 1)).toBe(520);
    expect(quorumRemainingMs([0, 0, 800, 900, 950], 2)).toBe(800);
  });

  it('needs f+1 reports', () => {
    expect(quorumRemainingMs([100], 1)).toBeUndefined();
  });
});

describe('jittered exponential backoff', () => {
  const policy = { baseMs: 10, maxMs: 1000 };
  it('doubles from base, stays within [half, full] of the capped delay, and never exceeds max', () => {
    expect(backoffDelay(0, policy, 0)).toBe(5);
    expect(backoffDelay(0, policy, 0.999)).toBeLessThan(10);
    expect(backoffDelay(3, policy, 0)).toBe(40);
    expect(backoffDelay(30, policy, 0.999)).toBeLessThanOrEqual(1000);
    expect(backoffDelay(1000, policy, 0.5)).toBe(750);
    expect(backoffDelay(-1, policy, 0)).toBe(5);
  });
});

describe("the holder's lease view ends before any replica's lease", () => {
  const policy = { expiryMarginFraction: 0.01, minExpiryMarginMs: 20, renewAtFraction: 0.5 };
  it('ends at sentAt + ttl - margin, with the margin at least the minimum and at most half the ttl', () => {
    expect(expiryMarginMs(10_000, policy)).toBe(100);
    expect(expiryMarginMs(500, policy)).toBe(20);
    expect(expiryMarginMs(30, policy)).toBe(15);
    expect(localExpiry(1000, 10_000, policy)).toBe(1000 + 10_000 - 100);
  });

  it('renews at a share of the ttl, never after the view ends', () => {
    expect(renewalTime(1000, 10_000, policy)).toBe(6000);
    expect(renewalTime(0, 100, { ...policy, renewAtFraction: 0.99 })).toBe(80);
  });
});

describe('client options', () => {
  it('fills defaults', () => {
    const options = resolveClientOptions();
    expect(options.handshakeTimeoutMs).toBe(DEFAULT_CLIENT_OPTIONS.handshakeTimeoutMs);
  });

  it('refuses unknown, out-of-range and contradictory options', () => {
    expect(codeOf(() => resolveClientOptions({ handshakeTimeoutMs: 0 }))).toBe('INVALID_ARGUMENT');
    expect(codeOf(() => resolveClientOptions({ reconnectBaseMs: 100, reconnectMaxMs: 50 }))).toBe('INVALID_ARGUMENT');
    expect(codeOf(() => resolveClientOptions({ retryBaseMs: 100, retryMaxMs: 50 }))).toBe('INVALID_ARGUMENT');
    expect(codeOf(() => resolveClientOptions({ renewAtFraction: 1 }))).toBe('INVALID_ARGUMENT');
    expect(codeOf(() => resolveClientOptions({ expiryMarginFraction: 0.5 }))).toBe('INVALID_ARGUMENT');
    expect(codeOf(() => resolveClientOptions({ maxInFlightPerReplica: 1.5 }))).toBe('INVALID_ARGUMENT');
    expect(codeOf(() => resolveClientOptions({ nonsense: 1 } as never))).toBe('INVALID_ARGUMENT');
  });
});
