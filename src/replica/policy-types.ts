/**
 * What the replica rules (policy.ts) read and answer: the durable record of a resource with its volatile lease state
 * (`PolicyRecord`, and `floorRecord` for a resource the floor stands for), the rules' configuration, the caller,
 * other replicas' catch-up evidence, and the `Decision` the service carries out. Apart from the rules so that the
 * store, the lease table and the codec, which only hold these shapes, do not depend on the rules themselves.
 */
import type { Outcome, ReleaseOutcome, RenewOutcome } from '../protocol/messages.js';
import type { AccessRules } from './access.js';

/** What the signing record keeps durably per resource (never lowered). */
export interface SignedRecord {
  /** The highest epoch signed for the resource. */
  readonly epoch: bigint;
  /** The holder signed at that epoch. */
  readonly holder: Uint8Array;
  /** grantDigest of (cluster, resource, epoch, holder): 32 bytes. */
  readonly grantDigest: Uint8Array;
}

/** A grant a lease belongs to: its epoch and holder. */
export interface LeaseGrant {
  readonly epoch: bigint;
  readonly holder: Uint8Array;
}

/** A lease joined below the record (docs/protocol.md, "Leases that outlive f signers"): its grant, session, release. */
export interface JoinedLease extends LeaseGrant {
  readonly session: string;
  readonly released: boolean;
}

/** The durable record plus the volatile lease state. */
export interface PolicyRecord extends SignedRecord {
  /** When the lease now (the joined one, or the record's grant's) ends (monotonic ms; 0 when no lease runs). */
  readonly leaseEndsAt: number;
  /** The holder of the record's grant released its lease since this replica started (volatile, see policy.ts's header). */
  readonly released: boolean;
  /**
   * The client session holding the record's grant's lease ('' for a sessionless client), or undefined when unknown:
   * the replica restarted since (volatile, docs/protocol.md "Sessions").
   */
  readonly session?: string | undefined;
  /**
   * The lease this replica joined below its record, when the lease now is that one and not the record's grant's
   * (volatile); `leaseEndsAt` is then its end.
   */
  readonly joined?: JoinedLease | undefined;
  /**
   * There is no record (compacted, or never signed): the floor stands for it (`epoch`, with no holder), and this
   * carries only a lease joined below the floor (`joined`).
   */
  readonly compacted?: boolean;
}

/** No holder: the place of a record's holder in a record that stands for the floor (no Ed25519 key is all zeros). */
const NO_HOLDER = new Uint8Array(32);

/**
 * A resource without a record, as the policy sees it while a lease joined below the floor runs there: the floor in the
 * record's place, holding only that lease.
 */
export function floorRecord(floor: bigint, joined: JoinedLease, leaseEndsAt: number): PolicyRecord {
  return {
    epoch: floor,
    holder: NO_HOLDER,
    grantDigest: NO_HOLDER,
    compacted: true,
    joined,
    leaseEndsAt,
    released: false,
  };
}

export interface PolicyConfig {
  readonly clusterId: Uint8Array;
  readonly minTtlMs: number;
  readonly maxTtlMs: number;
  /** How far above a resource's record an acquire may go without evidence (step 6). */
  readonly freeEpochStep: bigint;
  /** How far above the record (without one: above the floor, with no evidence) an acquire may go with evidence from fewer than f+1 replicas. */
  readonly maxEpochStep: bigint;
  /** The cluster's f: evidence from f+1 replicas includes an honest one. */
  readonly faultTolerance: number;
  readonly access: AccessRules;
}

/** Another replica's verified partial on a grant of the request's resource to the same holder at `epoch`. */
export interface EpochSupport {
  readonly replica: number;
  readonly epoch: bigint;
}

export type Decision =
  /** Answer without changing any state (refusals, status, idempotent release). */
  | { readonly action: 'reply'; readonly outcome: Outcome }
  /** Record this first (durably), set the lease, then sign and answer `granted`. */
  | { readonly action: 'grant'; readonly record: SignedRecord; readonly leaseEndsAt: number }
  /** The identical grant again: sign it again (same bytes) and answer `granted`. */
  | { readonly action: 'resend'; readonly leaseEndsAt: number }
  /**
   * Set the volatile lease end; nothing durable changes. `joined`: the lease renewed is that joined grant's (undefined:
   * the record's grant's, which it becomes again if a joined lease was there before).
   */
  | {
      readonly action: 'renew';
      readonly leaseEndsAt: number;
      readonly joined?: LeaseGrant;
      readonly outcome: RenewOutcome;
    }
  /**
   * A renew that joins a lease this replica does not hold yet, then answers `renewed`; nothing is signed (the holder
   * already has its token). Above the record: `record` is written first (durably), as for a grant. At or below it:
   * the lease is kept in memory for `joined`, a grant this replica never signed.
   */
  | {
      readonly action: 'join';
      readonly record?: SignedRecord;
      readonly joined?: LeaseGrant;
      readonly leaseEndsAt: number;
      readonly outcome: RenewOutcome;
    }
  /**
   * End the lease and remember the release (volatile: a release lost in a crash
   * only means the restart rule keeps the lease for maxTtl, a liveness cost, so
   * it is not worth an fsync), then answer.
   */
  | { readonly action: 'release'; readonly outcome: ReleaseOutcome };

/** Who asks: the authenticated holder key and the client session of its connection ('' for none). */
export interface Caller {
  readonly holder: Uint8Array;
  readonly session: string;
}
