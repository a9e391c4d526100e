/**
 * The replica core's decision before a catch-up evidence check (src/replica/core/evidence-need.ts): no pairing is
 * spent on a request refused whatever it carries, nor on one within the free step of the record (or of the floor,
 * with the larger first step, when there is no record); above it, the check counts from the record or the floor.
 */
import { describe, expect, it } from 'vitest';
import { evidenceNeed, type EvidenceFacts } from '../../src/replica/core/evidence-need.js';

const STEPS = { freeEpochStep: 8n, maxEpochStep: 128n };
const AT = (requestedEpoch: bigint, recordEpoch: bigint | undefined, refused = false): EvidenceFacts => ({
  requestedEpoch,
  recordEpoch,
  floor: 100n,
  refused,
});

describe("the replica core's evidence need", () => {
  it('checks nothing within the free step of the record, and counts from the record above it', () => {
    expect(evidenceNeed(AT(18n, 10n), STEPS)).toEqual({ check: false });
    expect(evidenceNeed(AT(19n, 10n), STEPS)).toEqual({ check: true, current: 10n, hasRecord: true });
  });

  it('without a record, counts from the floor with the larger first step', () => {
    expect(evidenceNeed(AT(228n, undefined), STEPS)).toEqual({ check: false });
    expect(evidenceNeed(AT(229n, undefined), STEPS)).toEqual({ check: true, current: 100n, hasRecord: false });
  });

  it('spends nothing on a request steps 1 and 2 refuse, however far it asks', () => {
    expect(evidenceNeed(AT(10_000n, 10n, true), STEPS)).toEqual({ check: false });
    expect(evidenceNeed(AT(10_000n, undefined, true), STEPS)).toEqual({ check: false });
  });
});
