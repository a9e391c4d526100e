/**
 * What the driver (drive.ts) and the cores need of a connection to one replica: send a request and get one
 * answer for it, or send one nobody waits on. The SDK's WebSocket connection (replica-connection.ts), the
 * simulator's channel (src/simulation/channel.ts) and test doubles implement it.
 */
import type { OutcomeByRequest, WireErrorCode, WireRequest } from '../protocol/messages.js';
import type { ConnectionState } from './connection-state.js';

export type RequestKind = WireRequest['type'];
/** A request without its id: the connection numbers requests itself. */
export type RequestBody<K extends RequestKind> = Omit<Extract<WireRequest, { type: K }>, 'id'>;

/** How one request to one replica ended. Only `reply` carries a (validated) answer. */
export type ReplicaAnswer<K extends RequestKind> =
  | { readonly kind: 'reply'; readonly outcome: OutcomeByRequest[K] }
  /** The replica answered with an error frame (rate limited, internal failure); no vote. */
  | { readonly kind: 'error'; readonly code: WireErrorCode; readonly message: string }
  /** The replica broke the protocol while this request was open. */
  | { readonly kind: 'faulty'; readonly message: string }
  /** Not connected, or the connection dropped before the answer. */
  | { readonly kind: 'unreachable'; readonly message: string }
  | { readonly kind: 'timeout' }
  | { readonly kind: 'aborted' };

/** What the rounds (fan-out) need from a connection; tests may supply their own. */
export interface ReplicaChannel {
  readonly index: number;
  readonly state: ConnectionState;
  /** How quickly the replica answers, as of now (ReplicaLatency.estimateMs); undefined when not measured. */
  readonly latencyMs?: number | undefined;
  /** How quickly it answers as a line's keeper (ReplicaLatency.lineEstimateMs); undefined when not measured. */
  readonly lineLatencyMs?: number | undefined;
  /** Whether it is due a probe, should it count as slow (ReplicaLatency.probeDue). */
  readonly probeDue?: boolean | undefined;
  /** Whether it missed this client's last turn in a line (ReplicaLatency.missedTurn). */
  readonly missedTurn?: boolean | undefined;
  request<K extends RequestKind>(
    body: RequestBody<K>,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<ReplicaAnswer<K>>;
  /**
   * Sends a request nobody waits on (a quiet release: the replica sends no reply). It takes no in-flight slot
   * and is not queued behind requests waiting for one. False when the connection is not ready: nothing was sent.
   */
  notify(body: RequestBody<'release'> & { readonly quiet: true }): boolean;
}
