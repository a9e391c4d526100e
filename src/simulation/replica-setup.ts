/**
 * What a simulated replica is given and whom it tells (replica-node.ts): its setup (network, disk, clock rate, keys,
 * limits, a Byzantine part), the planted bugs it may run with, and the observer the run's checks listen through.
 * Types only, apart from the node itself so that the run's parts (world.ts, mutations.ts) can name them alone.
 */
import type { Cluster } from '../cluster/description.js';
import type { SecretKey } from '../crypto/backend.js';
import type { Outcome } from '../protocol/messages.js';
import type { AccessRules } from '../replica/access.js';
import type { inLineOrder } from '../replica/core/line-core.js';
import type { helloVerifies } from '../replica/connections.js';
import type { LinePlacement } from '../replica/handoff-queue.js';
import type { ReplicaLimits } from '../replica/options.js';
import type { decide, PolicyConfig, precheck } from '../replica/policy.js';
import type { LeaseDecisionNote } from '../replica/service.js';
import type { RecordEntry } from '../replica/signing-record.js';
import type { ByzantineBehaviour, ByzantineParams } from '../testing/byzantine/behaviours.js';
import type { SeededRandom } from '../testing/seeded-random.js';
import type { SimDisk } from './disk.js';
import type { SimNetwork } from './network.js';
import type { Scheduler } from './scheduler.js';

/** What the run's checks hear from a replica. */
export interface ReplicaObserver {
  /** An acquire that may wait its turn (`waitMs`) arrived; `key` names it until it is answered. */
  waiting(replica: number, resource: string, key: string, fixedEpoch: bigint | undefined): void;
  /**
   * Every acquire's answer: `key` is set for one that arrived with `waitMs` (from `waiting`); `grant` names what a
   * `granted` answer signed (its epoch and holder).
   */
  answered(
    replica: number,
    resource: string,
    key: string | undefined,
    outcome: Outcome,
    grant: { readonly epoch: bigint; readonly holder: Uint8Array } | undefined,
  ): void;
  /** The service failed a request with anything but REPLICA_FROZEN: a bug. */
  failed(replica: number, message: string): void;
  /** The process (re)started at `at` (its clock) with these records (the lease ledger's restart rule). */
  started(at: number, records: readonly RecordEntry[], toVirtual: (local: number) => number): void;
  /** The service took a decision that changed a lease (src/replica/service.ts, onLeaseDecision). */
  decided(note: LeaseDecisionNote, toVirtual: (local: number) => number): void;
}

/** The planted bugs a replica can run with (mutations.ts); none in an honest run. */
export interface ReplicaMutation {
  /** The rules' parameters as the replica believes them (for the service's evidence checks as for its rules). */
  readonly policy?: (config: PolicyConfig) => PolicyConfig;
  readonly decide?: typeof decide;
  readonly precheck?: typeof precheck;
  readonly acknowledgeBeforeFlush?: boolean;
  readonly linePlacement?: LinePlacement;
  readonly turnsToldAhead?: number;
  readonly lineOrder?: typeof inLineOrder;
  /** The hello check instead of the server's (src/replica/connections.ts, helloVerifies). */
  readonly helloVerifies?: typeof helloVerifies;
}

export interface ReplicaNodeSetup {
  readonly index: number;
  /** Its network address (a reshare's new members get new ones). */
  readonly address: string;
  readonly scheduler: Scheduler;
  readonly network: SimNetwork;
  /** The node's own stream (its Byzantine choices and forgeries). */
  readonly random: SeededRandom;
  readonly cluster: Cluster;
  readonly secretKey: SecretKey;
  readonly limits: ReplicaLimits;
  readonly access: AccessRules;
  readonly disk: SimDisk;
  /** Local ms per virtual ms. */
  readonly rate: number;
  readonly wallClock: () => number;
  readonly byzantine?: {
    readonly behaviours: readonly ByzantineBehaviour[];
    readonly params: ByzantineParams;
    /** Another Byzantine replica's share, for `other-replica`. */
    readonly otherKey?: SecretKey;
  };
  readonly mutation: ReplicaMutation;
  readonly observer: ReplicaObserver;
  /** Told when this replica's disk begins a flush (the fault schedule may crash machines then). */
  readonly onFlushStart: () => void;
}
