/**
 * What travels between a simulated client and a simulated replica: the link's own life (open, accepted, close,
 * closed, ping, pong), as a WebSocket's would be, and the protocol's frames as the bytes the project's codec writes
 * (src/protocol/codec.ts). The client's side is the SDK's own connection code (src/client/replica-connection.ts)
 * over the simulated transport (sim-transport.ts); the replica's side decodes each frame as the server does, its
 * handshake included (challenge, signed hello, welcome). A Byzantine replica's lies are frames too, written by the
 * project's lying front (src/testing/byzantine/lies.ts).
 */
import { decodeClientMessage } from '../protocol/codec.js';
import type { ServerMessage, WireRequest } from '../protocol/messages.js';

export type ToReplica =
  | { readonly kind: 'open'; readonly conn: number }
  | { readonly kind: 'frame'; readonly conn: number; readonly frame: Uint8Array }
  | { readonly kind: 'close'; readonly conn: number; readonly code: number }
  /** A WebSocket ping: the replica's transport answers it (a pong) while the process runs, whatever its requests. */
  | { readonly kind: 'ping'; readonly conn: number; readonly data: Uint8Array };

export type ToClient =
  /** The replica took the connection (the WebSocket upgrade completed). */
  | { readonly kind: 'accepted'; readonly conn: number }
  | { readonly kind: 'frame'; readonly conn: number; readonly frame: Uint8Array | string }
  /** The replica closed the connection, or its kernel reset one it does not know (a restart). */
  | { readonly kind: 'closed'; readonly conn: number; readonly code: number; readonly reason: string }
  | { readonly kind: 'pong'; readonly conn: number; readonly data: Uint8Array };

/** A short description of a client's frame for the trace and the digest (decoded again: the network sees bytes). */
export function describeClientFrame(frame: Uint8Array): string {
  try {
    const message = decodeClientMessage(frame, Number.MAX_SAFE_INTEGER);
    return message.type === 'hello' ? 'hello' : describeRequest(message);
  } catch {
    return `frame ${frame.length}B`;
  }
}

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
