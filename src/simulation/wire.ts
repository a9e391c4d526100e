/**
 * What travels between a simulated client and a simulated replica. A connection is opened with the client's
 * holder key and session (the handshake's proof is not simulated: the simulated network cannot forge a sender) and carries
 * the project's own request and server messages as values; a Byzantine replica's lies travel as the encoded
 * frames the project's lying front writes (src/testing/byzantine/lies.ts), which the client decodes as it
 * decodes any frame, faults included.
 */
import type { ServerMessage, WireRequest } from '../protocol/messages.js';

export type ToReplica =
  | { readonly kind: 'open'; readonly conn: number; readonly holder: Uint8Array; readonly session: Uint8Array }
  | { readonly kind: 'request'; readonly conn: number; readonly request: WireRequest }
  | { readonly kind: 'close'; readonly conn: number }
  /** A WebSocket ping: the replica's transport answers it (a pong) while the process runs, whatever its requests. */
  | { readonly kind: 'ping'; readonly conn: number; readonly ping: number };

export type ToClient =
  | { readonly kind: 'welcome'; readonly conn: number; readonly floor: bigint }
  | { readonly kind: 'message'; readonly conn: number; readonly message: ServerMessage }
  | { readonly kind: 'frame'; readonly conn: number; readonly frame: Uint8Array | string }
  | { readonly kind: 'closed'; readonly conn: number }
  | { readonly kind: 'pong'; readonly conn: number; readonly ping: number };

/** A short description of a request for the trace and the digest. */
export function describeRequest(request: WireRequest): string {
  switch (request.type) {
    case 'acquire':
      return `acquire#${request.id} ${request.resource} e${request.epoch}${request.waitMs ? ` wait${request.waitMs}` : ''}${request.nextEpoch ? ' next' : ''}${request.evidence ? ` ev${request.evidence.length}` : ''}`;
    case 'renew':
    case 'release':
      return `${request.type}#${request.id} ${request.resource} e${request.epoch}`;
    case 'status':
      return `status#${request.id} ${request.resource}`;
    case 'leases':
      return `leases#${request.id}`;
  }
}

/** A short description of a server message for the trace and the digest. */
export function describeMessage(message: ServerMessage): string {
  switch (message.type) {
    case 'reply': {
      const o = message.outcome as { status?: unknown; epoch?: unknown };
      return `reply#${message.id} ${String(o.status)}${o.epoch === undefined ? '' : ` e${String(o.epoch)}`}`;
    }
    case 'error':
      return `error#${message.id ?? '-'} ${message.code}`;
    case 'released':
      return `released ${message.resource}`;
    case 'turn':
      return `turn ${message.resource} e${message.epoch}`;
    default:
      return message.type;
  }
}
