/**
 * What every quorum call (acquire, renew, release, status) works with: the
 * cluster, the caller's identity, the options, the connections, and where
 * misbehaviour is reported.
 */
import { BoundedMap } from '../common/bounded-map.js';
import type { Cluster } from '../cluster/description.js';
import type { BlsBackend } from '../crypto/backend.js';
import type { EvidenceLog } from './evidence.js';
import type { Identity } from './identity.js';
import type { ClientOptions } from './options.js';
import type { ReplicaChannel } from './replica-channel.js';
import type { GrantLatency } from './signer-choice.js';
import type { CoreRules } from './core/env.js';
import type { EpochHint } from './core/results.js';

// The per-call fault list and the epoch hint are the cores' types; re-exported for the driver files.
export { CallFaults } from './core/faults.js';
export type { EpochHint } from './core/results.js';

/** The connections a call draws on, with a way to hear when any of them changes state. */
export interface ChannelSet {
  readonly channels: readonly ReplicaChannel[];
  /** Calls `listener` after any channel's state changes; returns a function that unsubscribes. */
  subscribe(listener: () => void): () => void;
}

export interface QuorumContext {
  readonly cluster: Cluster;
  readonly backend: BlsBackend;
  readonly identity: Identity;
  readonly options: ClientOptions;
  readonly channels: ChannelSet;
  readonly evidence: EvidenceLog;
  /**
   * Per resource (bounded LRU): the last epoch this client was granted, so a repeat acquire can skip the status
   * round, and whether getting it took retries, so a repeat acquire of a contended resource starts leader-first.
   */
  readonly epochHints: BoundedMap<string, EpochHint>;
  /** How long acquires take to reach t partials: when the first t replicas asked count as late. */
  readonly grantLatency?: GrantLatency;
  /**
   * Answered release rounds still running (lease-calls.ts adds each and removes it when it ends): closing the
   * client waits for these rather than cutting them off. A plain `lease.release()` is quiet and has none.
   */
  readonly releases?: Set<Promise<unknown>>;
  /** The client rules the cores apply (default: src/client's; the simulator plants its mutations here). */
  readonly rules?: CoreRules;
  /** Listens for replicas' release notices on `resource`; returns a function that stops listening. */
  onReleased(resource: string, listener: () => void): () => void;
  /** Listens for turn notices on `resource` (which replica says our turn comes next, at which epoch). */
  onTurn?(resource: string, listener: (replica: number, epoch: bigint) => void): () => void;
}
