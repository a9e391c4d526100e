/**
 * What an acquire call ends with (docs/protocol.md, Client rules): a grant, or a refusal and its reason. These are
 * the acquire core's own types (core/acquire.ts makes them); src/client/acquire.ts re-exports them for its callers,
 * so the core imports nothing from the driver files that run it.
 */
import type { GrantEvidence } from '../../protocol/messages.js';
import type { AdmissionToken } from '../../token/admission-token.js';
import type { ReplicaFault } from '../evidence.js';

export interface AcquiredGrant {
  readonly token: AdmissionToken;
  /** Client clock reading taken before the first acquire request for this epoch left. */
  readonly sentAt: number;
  readonly ttlMs: number;
  /** Replicas whose partials made the token. */
  readonly signers: readonly number[];
  /**
   * f+1 of the signers' partials: the evidence a replica that did not sign may need to join the lease when its
   * record lags far behind (docs/protocol.md, "Leases that outlive f signers"). Empty when none is known.
   */
  readonly evidence: readonly GrantEvidence[];
}

export type AcquireRefusalReason = 'busy' | 'timeout' | 'unavailable' | 'aborted' | 'forbidden' | 'invalid';

export type AcquireRefusal =
  | {
      readonly ok: false;
      /** Another holder's lease runs (per at least f+1 replicas) past the caller's wait time. */
      readonly reason: 'busy';
      readonly message: string;
      /** The epoch of the lease in the way, as f+1 replicas report it. */
      readonly epoch: bigint;
      /** How long at least one honest replica says that lease still runs. */
      readonly remainingMs: number;
      readonly faults: readonly ReplicaFault[];
    }
  | {
      readonly ok: false;
      readonly reason: Exclude<AcquireRefusalReason, 'busy'>;
      readonly message: string;
      readonly faults: readonly ReplicaFault[];
    };

export type AcquireGrantResult =
  { readonly ok: true; readonly grant: AcquiredGrant; readonly faults: readonly ReplicaFault[] } | AcquireRefusal;

/** What a granted acquire leaves the next call of this client on the resource (src/client/acquire.ts keeps it). */
export interface EpochHint {
  readonly epoch: bigint;
  readonly contended: boolean;
}
