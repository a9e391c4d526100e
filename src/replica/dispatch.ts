/**
 * What a replica does with an authenticated request, written once for the server (server.ts, over WebSockets) and
 * the simulator (src/simulation/replica-node.ts, over its simulated network): `leases` answered at once from memory;
 * any other request handed to `ReplicaService.handle` with the connection's session, its close signal, an evidence
 * budget and `turn` pushes; then the reply (none to a quiet release), and the `released` notices (who learned that a
 * resource is held is told of its release); REPLICA_FROZEN answered as itself, any other failure answered INTERNAL.
 *
 * What differs between the two is the host's (`DispatchHost`): how a frame reaches a connection, the watchers, the
 * evidence allowance, and what observes a request's course (the server's request log and in-flight counts; the
 * simulator's checks, and its crashed process whose answers must not go out). Which frames an outcome or a failure
 * produces is decided by the pure functions below.
 */
import { QuorumFenceError, isQuorumFenceError } from '../common/errors.js';
import {
  isQuietRelease,
  type ErrorMessage,
  type LeasesOutcome,
  type Outcome,
  type Reply,
  type Request,
  type ServerMessage,
  type WireRequest,
} from '../protocol/messages.js';
import type { EvidenceBudget } from './grant-evidence.js';
import { noticeAfter, type ReleaseWatchers } from './release-notices.js';
import type { ReplicaService } from './service.js';

/** What the dispatch reads of a connection (the server's and the simulator's both have it). */
export interface DispatchedConnection {
  /** The client session its hello named, as hex ('' for a sessionless client; docs/protocol.md, "Sessions"). */
  readonly session: string;
  /** Aborted when the connection closes: its acquires waiting their turn leave the line. */
  readonly closed: AbortController;
}

/** How a host follows one request's course; every part is optional. */
export interface RequestWatch {
  /**
   * Asked when the service settles: false drops the answer and its notices (the simulator's process that crashed
   * meanwhile: the answer dies with it). Absent: always wanted.
   */
  readonly wanted?: () => boolean;
  /** The service's answer, before its reply goes out. */
  readonly answered?: (outcome: Outcome | LeasesOutcome) => void;
  /** The service failed with anything but REPLICA_FROZEN (a bug), before the INTERNAL error goes out. */
  readonly failed?: (error: unknown) => void;
  /** The request is done: answered, failed or dropped. */
  readonly settled?: () => void;
}

/** What differs between the server and the simulator around one dispatch. */
export interface DispatchHost<C extends DispatchedConnection> {
  /** The service answering now. */
  service(): ReplicaService;
  /** The connections told that a resource is held (release-notices.ts), read when an answer obliges. */
  watchers(): ReleaseWatchers<C>;
  /** Sends a frame that answers no request (`turn`, `released`) to a connection. */
  push(connection: C, message: ServerMessage): void;
  /** The evidence pairing checks the request may spend (grant-evidence.ts). */
  evidenceBudget(connection: C, holder: Uint8Array): EvidenceBudget;
  /** A request from `holder` is taken, before the service sees it; `replies` is false for a quiet release. */
  begin?(connection: C, request: WireRequest, holder: Uint8Array, replies: boolean): RequestWatch | undefined;
}

/** Where one request's reply or error frame goes: its connection, or a Byzantine front that may alter it. */
export type Answer = (message: ServerMessage) => void;

/** What an answered request sends and obliges: its reply (none to a quiet release) and its `released` duty. */
export interface AfterOutcome {
  readonly reply: Reply | undefined;
  readonly notice: ReturnType<typeof noticeAfter>;
}

/** The frames and duties of a request the service answered (pure). */
export function afterOutcome(request: Request, outcome: Outcome): AfterOutcome {
  // A quiet release gets no reply: its client waits for none (docs/protocol.md, isQuietRelease).
  const reply: Reply | undefined = isQuietRelease(request) ? undefined : { type: 'reply', id: request.id, outcome };
  return { reply, notice: noticeAfter(request, outcome) };
}

/** What a failed request sends: its error frame, and whether the failure is unexpected (a bug to report). */
export interface AfterFailure {
  readonly frame: ErrorMessage;
  readonly unexpected: boolean;
}

/**
 * The error frame of a request the service failed (pure). Frozen for a reshare is an expected answer of its own
 * (clients count this replica as unable to vote); anything else is INTERNAL, naming only a QuorumFenceError's code.
 * An error frame goes out even for a quiet release: its client drops it, as any answer it no longer waits on.
 */
export function afterFailure(request: Request, error: unknown): AfterFailure {
  if (isQuorumFenceError(error, 'REPLICA_FROZEN'))
    return {
      frame: { type: 'error', id: request.id, code: 'REPLICA_FROZEN', message: error.message },
      unexpected: false,
    };
  const message = error instanceof QuorumFenceError ? error.code : 'internal error';
  return { frame: { type: 'error', id: request.id, code: 'INTERNAL', message }, unexpected: true };
}

/** The dispatch of authenticated requests over one host. */
export class RequestDispatch<C extends DispatchedConnection> {
  readonly #host: DispatchHost<C>;

  constructor(host: DispatchHost<C>) {
    this.#host = host;
  }

  /** Handles `received` from `connection` (authenticated as `holder`); its reply or error goes to `answer`. */
  dispatch(connection: C, received: WireRequest, holder: Uint8Array, answer: Answer): void {
    const watch = this.#host.begin?.(connection, received, holder, !isQuietRelease(received));
    if (received.type === 'leases') {
      // Answered at once from memory: no record is written, nothing waits.
      const outcome = this.#host.service().activeLeases(received, holder);
      watch?.answered?.(outcome);
      answer({ type: 'reply', id: received.id, outcome });
      watch?.settled?.();
      return;
    }
    const request: Request = received;
    void this.#host
      .service()
      .handle(request, holder, {
        session: connection.session,
        signal: connection.closed.signal,
        evidenceBudget: this.#host.evidenceBudget(connection, holder),
        onTurn: (epoch) => this.#host.push(connection, { type: 'turn', resource: request.resource, epoch }),
      })
      .then(
        (outcome) => {
          try {
            if (watch?.wanted?.() !== false) this.#answered(connection, request, outcome, answer, watch);
          } finally {
            watch?.settled?.();
          }
        },
        (error: unknown) => {
          try {
            if (watch?.wanted?.() !== false) this.#failed(request, error, answer, watch);
          } finally {
            watch?.settled?.();
          }
        },
      );
  }

  #answered(connection: C, request: Request, outcome: Outcome, answer: Answer, watch: RequestWatch | undefined): void {
    const { reply, notice } = afterOutcome(request, outcome);
    watch?.answered?.(outcome);
    if (reply) answer(reply);
    if (notice === 'watch') this.#host.watchers().watch(request.resource, connection);
    else if (notice === 'announce')
      for (const waiter of this.#host.watchers().take(request.resource))
        this.#host.push(waiter, { type: 'released', resource: request.resource });
  }

  #failed(request: Request, error: unknown, answer: Answer, watch: RequestWatch | undefined): void {
    const { frame, unexpected } = afterFailure(request, error);
    if (unexpected) watch?.failed?.(error);
    answer(frame);
  }
}
