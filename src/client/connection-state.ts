/**
 * The life of one connection to one replica, as a pure transition function
 * `(state, event) -> state`. The socket code (replica-connection.ts) feeds it
 * events and acts on the phase it lands in: open a socket, send hello, start
 * a reconnect timer. Keeping the rules here lets tests walk every path
 * without sockets.
 *
 *   connecting ─open→ awaiting_challenge ─challenge ok→ awaiting_welcome ─welcome→ ready
 *        ↑                    │ failed / fault (any phase but closed)                 │
 *        └──retry── backoff ←─┴───────────────────────────────────────────────────────┘
 *   close (any phase) → closed, for good
 *
 * Besides its phase, a connection keeps the replica's epoch floor as it last said it (the welcome, acquire answers).
 */

export type ConnectionPhase = 'connecting' | 'awaiting_challenge' | 'awaiting_welcome' | 'ready' | 'backoff' | 'closed';

/** Why a connection attempt ended. `protocol` and `bad_challenge` mean the replica itself misbehaved. */
export type ConnectionFailure =
  /** Could not open the socket (refused, unreachable, DNS). */
  | 'unreachable'
  /** No challenge or welcome within the handshake timeout: a silent or overloaded replica. */
  | 'handshake_timeout'
  /** The replica closed the connection or the socket errored. */
  | 'closed'
  /** The replica refused our authentication (an error frame during the handshake). */
  | 'unauthenticated'
  /** The replica sent a frame that fails validation, or a message out of order. */
  | 'protocol'
  /** The challenge names another cluster or another replica index. */
  | 'bad_challenge';

export interface ConnectionState {
  readonly phase: ConnectionPhase;
  /** Failed attempts since the connection was last ready; sets the reconnect delay. */
  readonly failures: number;
  /** How the last attempt ended, for status displays. */
  readonly lastFailure: { readonly kind: ConnectionFailure; readonly message: string } | undefined;
  /**
   * The replica's epoch floor as it said it on this connection (its welcome, then its acquire answers, which only
   * raise it); absent: 0. A client proposes the first acquire of a resource above its first signers' floors
   * (docs/protocol.md, "Epoch choice").
   */
  readonly floor?: bigint;
}

export type ConnectionEvent =
  | { readonly type: 'socket_open' }
  | { readonly type: 'challenge_accepted' }
  | { readonly type: 'welcome'; readonly floor?: bigint }
  /** The replica named its floor in an answer. */
  | { readonly type: 'floor'; readonly floor: bigint }
  | { readonly type: 'failed'; readonly kind: ConnectionFailure; readonly message: string }
  | { readonly type: 'retry' }
  | { readonly type: 'close' };

export const INITIAL_CONNECTION_STATE: ConnectionState = Object.freeze({
  phase: 'connecting',
  failures: 0,
  lastFailure: undefined,
});

/**
 * Applies one event. Events that make no sense in the current phase (a late
 * timer, a second close) leave the state unchanged, because sockets and
 * timers race and the late one must be harmless.
 */
export function transition(state: ConnectionState, event: ConnectionEvent): ConnectionState {
  if (state.phase === 'closed') return state;
  switch (event.type) {
    case 'close':
      return { ...state, phase: 'closed' };
    case 'socket_open':
      return state.phase === 'connecting' ? { ...state, phase: 'awaiting_challenge' } : state;
    case 'challenge_accepted':
      return state.phase === 'awaiting_challenge' ? { ...state, phase: 'awaiting_welcome' } : state;
    case 'welcome':
      return welcomed(state, event.floor);
    case 'floor':
      return raisedFloor(state, event.floor);
    case 'failed':
      if (state.phase === 'backoff') return state;
      return {
        phase: 'backoff',
        failures: state.failures + 1,
        lastFailure: { kind: event.kind, message: event.message },
      };
    case 'retry':
      return state.phase === 'backoff' ? { ...state, phase: 'connecting' } : state;
  }
}

/** Ready after the welcome; each connection takes the replica's floor afresh (a replaced replica may start lower). */
function welcomed(state: ConnectionState, floor: bigint | undefined): ConnectionState {
  if (state.phase !== 'awaiting_welcome') return state;
  return { phase: 'ready', failures: 0, lastFailure: undefined, ...(floor === undefined ? {} : { floor }) };
}

/** A floor named in an answer raises the connection's, never lowers it. */
function raisedFloor(state: ConnectionState, floor: bigint): ConnectionState {
  if (state.phase !== 'ready' || (state.floor !== undefined && floor <= state.floor)) return state;
  return { ...state, floor };
}

/** A request can be sent now. */
export function isReady(state: ConnectionState): boolean {
  return state.phase === 'ready';
}

/** A connection attempt is under way: the replica may be ready soon, so a round that needs it may wait. */
export function isPending(state: ConnectionState): boolean {
  return state.phase === 'connecting' || state.phase === 'awaiting_challenge' || state.phase === 'awaiting_welcome';
}

/** The last failure was the replica's own misbehaviour, not the network's. */
export function isFaultFailure(kind: ConnectionFailure): boolean {
  return kind === 'protocol' || kind === 'bad_challenge';
}
