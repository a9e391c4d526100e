/**
 * The messages from one replica, as its connection (replica-connection.ts) receives them: each frame decoded
 * strictly and read by the connection's phase. Awaiting the challenge, the challenge is checked (this cluster, this
 * replica) and answered with a signed hello; awaiting the welcome, a welcome makes the connection ready and an error
 * frame is a refused authentication; once ready, replies and error frames settle their request by id (replies decoded
 * by the request's kind), and `released` and `turn` notices go to the client's listeners. Anything else is the
 * replica breaking the protocol: a fault, and the connection drops.
 *
 * Apart from the link's life (opening, deadlines, backoff, pings, dropping) and from the requests' bookkeeping
 * (in-flight-requests.ts) because this is where nothing the replica sends is trusted: every judgement of a replica's
 * frame is here, and it acts only through what the connection lends it (MessageHost).
 */
import { bytesEqual } from '../common/bytes.js';
import { QuorumFenceError } from '../common/errors.js';
import { decodeServerMessage, encodeMessage, parseOutcome } from '../protocol/codec.js';
import { CloseCode, authTranscript, type OutcomeByRequest, type ServerMessage } from '../protocol/messages.js';
import type { ConnectionEvent, ConnectionFailure, ConnectionPhase } from './connection-state.js';
import { HELLO_ID, type InFlightRequests } from './in-flight-requests.js';
import type { RequestKind } from './replica-channel.js';
import type { ConnectionContext } from './replica-connection.js';
import type { ReplicaLatency } from './replica-latency.js';

/** What the replica's messages may read and do on the connection they arrive on (replica-connection.ts lends it). */
export interface MessageHost {
  readonly index: number;
  readonly context: ConnectionContext;
  readonly requests: InFlightRequests;
  readonly latency: ReplicaLatency;
  phase(): ConnectionPhase;
  /** Sends on the connection's link (the hello). */
  send(frame: Uint8Array): void;
  apply(event: ConnectionEvent): void;
  /** The handshake is over: its deadline is cleared, the connection is ready (`event`), and pings start. */
  welcomed(event: ConnectionEvent): void;
  noteFloor(outcome: OutcomeByRequest[RequestKind]): void;
  /** The replica broke the protocol: report it, drop the connection, fail what is in flight, reconnect later. */
  fault(kind: 'protocol' | 'bad_challenge' | 'invalid_reply', message: string): void;
  fail(kind: ConnectionFailure, message: string): void;
  dropLink(code: number, reason: string): void;
}

/** One frame from the replica (bytes; a string for a text frame), read by the connection's phase. */
export function readFrame(host: MessageHost, frame: Uint8Array | string): void {
  if (typeof frame === 'string') {
    host.fault('protocol', 'a text frame (only binary frames are spoken)');
    return;
  }
  let message: ServerMessage;
  try {
    message = decodeServerMessage(frame, host.context.options.maxFrameBytes);
  } catch (error) {
    host.fault('protocol', error instanceof QuorumFenceError ? error.message : String(error));
    return;
  }
  switch (host.phase()) {
    case 'awaiting_challenge':
      onChallenge(host, message);
      return;
    case 'awaiting_welcome':
      onWelcome(host, message);
      return;
    case 'ready':
      onReady(host, message);
      return;
    default:
      host.fault('protocol', `a ${message.type} frame before the connection opened`);
  }
}

function onChallenge(host: MessageHost, message: ServerMessage): void {
  if (message.type !== 'challenge') {
    host.fault('protocol', `expected a challenge, got ${message.type}`);
    return;
  }
  const { clusterId, identity, session } = host.context;
  if (!bytesEqual(message.clusterId, clusterId)) {
    host.fault('bad_challenge', 'the challenge names another cluster id');
    return;
  }
  if (message.replica !== host.index) {
    host.fault('bad_challenge', `the challenge names replica ${message.replica}, expected ${host.index}`);
    return;
  }
  const signature = identity.sign(authTranscript(message.nonce, clusterId, host.index, session));
  host.send(encodeMessage({ type: 'hello', id: HELLO_ID, holder: identity.publicKey, signature, session }));
  host.apply({ type: 'challenge_accepted' });
}

function onWelcome(host: MessageHost, message: ServerMessage): void {
  if (message.type === 'error') {
    host.fail('unauthenticated', `${message.code}: ${message.message}`);
    host.dropLink(CloseCode.NORMAL, 'authentication refused');
    return;
  }
  if (message.type !== 'welcome' || message.id !== HELLO_ID || message.replica !== host.index) {
    host.fault(
      'protocol',
      message.type === 'welcome'
        ? 'a welcome with the wrong id or replica index'
        : `expected a welcome, got ${message.type}`,
    );
    return;
  }
  host.welcomed(message.floor === undefined ? { type: 'welcome' } : { type: 'welcome', floor: message.floor });
}

function onReady(host: MessageHost, message: ServerMessage): void {
  if (message.type === 'reply' || (message.type === 'error' && message.id !== undefined))
    host.latency.answered(
      `r${message.id!}`,
      host.context.options.clock.now(),
      message.type === 'reply' ? message.outcome : undefined,
    );
  if (message.type === 'reply') {
    const kind = host.requests.kindOf(message.id);
    // A reply to a request that timed out or was aborted: late, not wrong.
    if (kind === undefined) return;
    let outcome: OutcomeByRequest[RequestKind];
    try {
      outcome = parseOutcome(kind, message.outcome);
    } catch (error) {
      const text = error instanceof QuorumFenceError ? error.message : String(error);
      host.requests.settle(message.id, { kind: 'faulty', message: text });
      host.fault('invalid_reply', text);
      return;
    }
    host.noteFloor(outcome);
    host.requests.settle(message.id, { kind: 'reply', outcome });
    return;
  }
  if (message.type === 'error') {
    if (message.id !== undefined)
      host.requests.settle(message.id, { kind: 'error', code: message.code, message: message.message });
    return;
  }
  if (message.type === 'released') {
    host.context.onReleased?.(host.index, message.resource);
    return;
  }
  if (message.type === 'turn') {
    host.context.onTurn?.(host.index, message.resource, message.epoch);
    return;
  }
  host.fault('protocol', `an unexpected ${message.type} after the handshake`);
}
