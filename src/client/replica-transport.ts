/**
 * What a replica connection (replica-connection.ts) needs of the wire under it: open a link to a replica's
 * endpoint, send binary frames and pings on it, close it; and hear the link open, a frame arrive, a pong, the link
 * close or fail. Everything above it (the handshake, requests, pings' timing, backoff) is the connection's and is
 * the same over any transport.
 *
 * Two implement it: the SDK's WebSocket (ws-transport.ts), the default for every user, and the simulator's link
 * over its simulated network (src/simulation/sim-transport.ts), so that a seeded run drives the SDK's own
 * connection code.
 */

/** What a link tells its connection. After `close` or `error`, or once the connection closed the link, nothing more. */
export interface LinkEvents {
  /** The link is up: frames may be sent. */
  open(): void;
  /** One frame from the replica: bytes for a binary frame, a string for a text frame (which the protocol forbids). */
  frame(data: Uint8Array | string): void;
  /** The answer to a ping, with the ping's data. */
  pong(data: Uint8Array): void;
  /** The replica (or the network) closed the link. */
  close(code: number, reason: string): void;
  /** The link failed (refused, reset, a transport error). */
  error(message: string): void;
}

/** One open (or opening) link to one replica. */
export interface ReplicaLink {
  /** Frames can be sent now (the link opened and is not closing). */
  readonly isOpen: boolean;
  send(frame: Uint8Array): void;
  /** A transport-level ping: the replica's transport answers it (a pong) while the process runs. */
  ping(data: Uint8Array): void;
  /** Closes the link (`code`, `reason` go to the replica when it is open); no event of it is delivered after this. */
  close(code: number, reason: string): void;
}

export interface LinkOptions {
  /** The largest frame accepted from the replica. */
  readonly maxFrameBytes: number;
  /** The transport's own bound on opening (the connection keeps its own deadline for the whole handshake too). */
  readonly handshakeTimeoutMs: number;
}

export interface ReplicaTransport {
  /**
   * Opens a link to `endpoint`; its events arrive through `events`, never synchronously from this call.
   * @throws when the endpoint cannot even be tried (a malformed address): the connection counts it as unreachable.
   */
  connect(endpoint: string, options: LinkOptions, events: LinkEvents): ReplicaLink;
}
