/**
 * Step 6 of acquire, and of a renew that joins above the record (docs/protocol.md, "Epoch steps"): how far above a
 * resource's record, or the floor, a grant may go for the catch-up evidence the request carries. Apart from the rules
 * because the service asks it too, before the record's critical section, to check no more evidence than the rule
 * still needs (service.ts, grant-evidence.ts).
 */
import type { EpochSupport, PolicyConfig } from './policy-types.js';

/**
 * Step 6: may a grant at `epoch` follow `current` (the record's epoch, or the floor when `hasRecord` is false)?
 * `support` is verified evidence from distinct other replicas (the caller checked the partials).
 */
export function epochStepAllowed(
  current: bigint,
  hasRecord: boolean,
  epoch: bigint,
  support: readonly EpochSupport[],
  config: PolicyConfig,
): boolean {
  const distance = epoch - current;
  // A resource without a record starts from the floor, which honest replicas compact at different times: the
  // wide step keeps a new resource's first acquire one round trip while their floors differ.
  if (distance <= (hasRecord ? config.freeEpochStep : config.maxEpochStep)) return true;
  let supporters = 0;
  for (const entry of support) if (entry.epoch >= epoch) supporters++;
  if (supporters > config.faultTolerance) return true;
  return supporters > 0 && distance <= config.maxEpochStep;
}
