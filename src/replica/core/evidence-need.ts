/**
 * The replica core's decision before a catch-up evidence check (issue 44, item 2): whether the evidence an acquire or
 * renew carries needs checking at all, with no awaits or store of its own. None is checked (no pairing spent) for a
 * request refused whatever it carries (bounds, access: steps 1 and 2), nor for one within the free step of what this
 * replica holds now (the record's epoch, or the floor's with the larger first step when there is no record). The
 * check itself is the driver's I/O (service.ts: grant-evidence.ts batches the pairings, within the asker's budget).
 */
import type { PolicyConfig } from '../policy-types.js';

/** What the service reads before the record's critical section, for a request that carries evidence. */
export interface EvidenceFacts {
  readonly requestedEpoch: bigint;
  /** The durable record's epoch now; undefined when there is none (the floor stands for it). */
  readonly recordEpoch: bigint | undefined;
  readonly floor: bigint;
  /** Steps 1 and 2 (bounds, access) refuse it. */
  readonly refused: boolean;
}

export type EvidenceNeed =
  | { readonly check: false }
  /** Check it, counting support against the epoch-step rule from `current` (`hasRecord`: the record's, not the floor's). */
  | { readonly check: true; readonly current: bigint; readonly hasRecord: boolean };

/**
 * Whether the evidence needs checking. A record that moves before the decision only changes whether the evidence was
 * needed, never what it proves.
 */
export function evidenceNeed(
  facts: EvidenceFacts,
  config: Pick<PolicyConfig, 'freeEpochStep' | 'maxEpochStep'>,
): EvidenceNeed {
  if (facts.refused) return { check: false };
  const hasRecord = facts.recordEpoch !== undefined;
  const current = facts.recordEpoch ?? facts.floor;
  const free = hasRecord ? config.freeEpochStep : config.maxEpochStep;
  if (facts.requestedEpoch - current <= free) return { check: false };
  return { check: true, current, hasRecord };
}
