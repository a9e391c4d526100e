/**
 * A Byzantine replica in a simulated run: the real replica's service behind the project's lying front, as the
 * Byzantine replica process runs it (src/testing/byzantine/front.ts). Each request is handled by one of the
 * replica's behaviours, picked by its seeded stream (`pickBehaviour`); what a behaviour does to an answer is
 * the project's own `answerWithBehaviour` (lies.ts): forged, replayed or garbage partials, lying epochs,
 * silence, slowness, floods, malformed frames, dropped connections, ignored releases, a record wiped at every
 * restart. Its forgeries use its own share (and, with `other-replica`, another Byzantine replica's, never an
 * honest one's: that would be one faulty replica more than the run says).
 */
import { encodeMessage } from '../protocol/codec.js';
import type { ServerMessage, WireRequest } from '../protocol/messages.js';
import { pickBehaviour, type ByzantineBehaviour, type ByzantineParams } from '../testing/byzantine/behaviours.js';
import { PartialForger } from '../testing/byzantine/forge.js';
import { answerWithBehaviour, type Outcome } from '../testing/byzantine/lies.js';
import type { SeededRandom } from '../testing/seeded-random.js';
import type { Cluster } from '../cluster/description.js';
import type { SecretKey } from '../crypto/backend.js';

export interface ByzantineSetup {
  readonly cluster: Cluster;
  readonly secretKey: SecretKey;
  readonly random: SeededRandom;
  readonly byzantine?: {
    readonly behaviours: readonly ByzantineBehaviour[];
    readonly params: ByzantineParams;
    /** Another Byzantine replica's share, for `other-replica`. */
    readonly otherKey?: SecretKey;
    /** Virtual ms from which it lies; it answers honestly before (default 0). */
    readonly from?: number;
  };
}

/** What the front needs of one client connection. */
export interface FrontIo {
  /** The real replica handles `request`; `answer` gets its reply or error. */
  handle(request: WireRequest, answer: (message: ServerMessage) => void): void;
  toClient(frame: Uint8Array | string): void;
  send(message: ServerMessage): void;
  drop(): void;
}

export class ByzantineFrontSim {
  readonly #setup: ByzantineSetup;
  readonly #behaviours: ByzantineBehaviour[];
  readonly #forger: PartialForger;
  readonly #later: (ms: number, run: () => void) => void;
  readonly #now: () => number;
  /** `no-record`: the record is wiped at every restart. */
  readonly wipesRecord: boolean;

  /** `now`: virtual time, for `from`. */
  constructor(setup: ByzantineSetup, later: (ms: number, run: () => void) => void, now: () => number) {
    this.#setup = setup;
    const behaviours = setup.byzantine?.behaviours ?? [];
    this.wipesRecord = behaviours.includes('no-record');
    this.#behaviours = behaviours.filter((b) => b !== 'no-record');
    const random = setup.random;
    const bytes = (length: number) => Uint8Array.from({ length }, () => random.int(0, 255));
    const other = setup.byzantine?.otherKey;
    this.#forger = new PartialForger(
      setup.cluster.backend,
      { secretKey: setup.secretKey },
      other && { secretKey: other },
      bytes,
    );
    this.#later = later;
    this.#now = now;
  }

  /** One request from a client holding `holder`, through the chosen behaviour. */
  relay(holder: Uint8Array, request: WireRequest, io: FrontIo): void {
    const { random } = this.#setup;
    const { params, from = 0 } = this.#setup.byzantine!;
    if (this.#now() < from) return io.handle(request, (message) => io.send(message));
    const behaviour = pickBehaviour(random, this.#behaviours, params.rate);
    if (behaviour === 'silent') return;
    if (behaviour === 'ignore-release' && request.type === 'release') {
      io.toClient(encodeMessage({ type: 'reply', id: request.id, outcome: { status: 'released' } }));
      return;
    }
    io.handle(request, (message) => {
      if (message.type !== 'reply' || !behaviour) return io.send(message);
      answerWithBehaviour(
        { request, behaviour },
        message.outcome as Outcome,
        holder,
        encodeMessage(message),
        { toClient: io.toClient, drop: io.drop },
        {
          clusterId: this.#setup.cluster.id,
          forger: this.#forger,
          random,
          params,
          act: () => undefined,
          later: this.#later,
        },
      );
    });
  }
}
