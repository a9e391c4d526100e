/**
 * One grant's partials behind a handle, for the collector's tests: the functions of src/client/partial-collector.ts
 * over one PartialSet, as the acquire core runs them over the set in its state (combining in place here, where the
 * core combines a copy and applies the outcome with combinedInto).
 */
import type { EvidenceLog } from '../../src/client/evidence.js';
import {
  addPartial,
  combinePartials,
  newPartialSet,
  type AddOutcome,
  type CombineOutcome,
  type PartialChecks,
} from '../../src/client/partial-collector.js';
import type { BlsBackend } from '../../src/crypto/backend.js';
import type { Grant } from '../../src/token/grant.js';

export interface PartialHandle {
  /** Partials held that are not known to be bad. */
  readonly count: number;
  add(replica: number, bytes: Uint8Array, generation?: number): AddOutcome;
  tryCombine(): Promise<CombineOutcome>;
}

export function partialHandle(
  cluster: PartialChecks['cluster'],
  backend: BlsBackend,
  grant: Grant,
  evidence: EvidenceLog,
): PartialHandle {
  const checks: PartialChecks = { cluster, backend, evidence };
  const set = newPartialSet(grant);
  return {
    get count() {
      return set.held.length;
    },
    add: (replica, bytes, generation = 0) => addPartial(set, checks, replica, bytes, generation),
    tryCombine: () => combinePartials(set, checks),
  };
}
