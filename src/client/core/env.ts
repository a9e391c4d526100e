/**
 * What every client core works with: the cluster's numbers, the holder, the options it decides by, and the
 * call's running state (its outbox, the connections as last reported, whether the caller aborted). Built by the
 * driver (src/client/drive.ts) from a QuorumContext, or by the simulator from its own parts.
 */
import { catchUpStep } from '../catch-up.js';
import { chooseEpoch } from '../epoch-choice.js';
import type { ClientOptions } from '../options.js';
import type { PartialChecks } from '../partial-collector.js';
import type { GrantLatency } from '../signer-choice.js';
import { newOutbox, type ConnectionView, type Outbox } from './io.js';

/** The parts of a cluster description the cores decide by. */
export interface CoreCluster {
  readonly n: number;
  readonly f: number;
  /** Partials a token needs (2f+1). */
  readonly t: number;
  readonly id: Uint8Array;
  /** The share generation partials must carry to be combined (docs/resharing.md). */
  readonly membershipVersion: number;
}

export type CoreOptions = Pick<
  ClientOptions,
  'requestTimeoutMs' | 'stragglerMinMs' | 'maxEpochStep' | 'retryBaseMs' | 'retryMaxMs' | 'busyPollMs'
>;

/**
 * The client rules the cores apply where one pure function decides (docs/protocol.md, Client rules): the epoch
 * choice and the catch-up step. The SDK always applies these; the simulator plants its mutations through them.
 */
export interface CoreRules {
  readonly chooseEpoch: typeof chooseEpoch;
  readonly catchUpStep: typeof catchUpStep;
}

export const CLIENT_RULES: CoreRules = { chooseEpoch, catchUpStep };

export interface CoreEnv {
  readonly cluster: CoreCluster;
  /** The caller's identity: the holder of every grant it asks for. */
  readonly holder: Uint8Array;
  readonly options: CoreOptions;
  /** Numbers in [0, 1) for jitter (the client's `random` option). */
  readonly random: () => number;
  /** How long acquires take to reach t partials (shared by a client's calls): when first signers count as late. */
  readonly grantLatency: GrantLatency | undefined;
  /** What checking a grant's partials needs (decoding, evidence, combining: partial-collector.ts). */
  readonly partials: PartialChecks;
  /** The rules the cores apply (default CLIENT_RULES). */
  readonly rules?: CoreRules | undefined;
}

/** The running state one call's cores share (plain data, part of the call's state). */
export interface CallState {
  readonly out: Outbox;
  connections: readonly ConnectionView[];
  aborted: boolean;
}

export function newCallState(connections: readonly ConnectionView[], aborted: boolean): CallState {
  return { out: newOutbox(), connections, aborted };
}
