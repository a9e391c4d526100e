/**
 * The simulated guard: the real guard core (src/guard/core.ts: the token check, batched on virtual time, the
 * resource check, the fence, the log entries) deciding every write against a barrier per resource, with the
 * barrier, the data version and the log entry changed in one step, as the store adapters' transactions do. The
 * guard itself does not crash or lose data in a run (docs/testing.md says what is not modelled). Its log is what
 * the history checker reads.
 */
import type { Cluster } from '../cluster/description.js';
import { GuardCore, type GuardRequest } from '../guard/core.js';
import type { Barrier, decideFence } from '../guard/fence.js';
import type { GuardLogEntry, GuardOutcomeLabel } from '../guard/log.js';
import type { SimNetwork } from './network.js';

/** A guarded write from a client: put `key` of `resource` with the token. */
export interface WriteRequest {
  readonly kind: 'write';
  readonly id: number;
  readonly token: string;
  readonly resource: string;
  readonly key: string;
}

export interface WriteAnswer {
  readonly kind: 'written';
  readonly id: number;
  readonly accepted: boolean;
  readonly outcome: GuardOutcomeLabel;
  /** The data version an accepted write stamped (its log seq). */
  readonly version: number | null;
}

export const GUARD_ADDRESS = 'g';

export class SimGuard {
  readonly log: GuardLogEntry[] = [];
  readonly #core: GuardCore;
  readonly #network: SimNetwork;
  readonly #barriers = new Map<string, Barrier>();
  /** `resource \0 key` → the version it holds (the history checker's final versions). */
  readonly versions = new Map<string, number>();
  #seq = 0;

  constructor(network: SimNetwork, cluster: Cluster, fence?: typeof decideFence) {
    this.#network = network;
    this.#core = new GuardCore(cluster, fence ? { fence } : {});
    network.attach(GUARD_ADDRESS, (from, message) => this.#receive(from, message as WriteRequest));
  }

  /** Barriers held now (bounded-state check). */
  get barriers(): number {
    return this.#barriers.size;
  }

  #receive(from: string, write: WriteRequest): void {
    const request: GuardRequest = { token: write.token, resource: write.resource, op: 'put', key: write.key };
    void this.#core.admit(request).then((admission) => {
      const barrier = this.#barriers.get(write.resource);
      const seq = ++this.#seq;
      const entry = (
        outcome: GuardOutcomeLabel,
        after: bigint | undefined,
        version: number | null,
        conflict?: Uint8Array,
      ) =>
        this.#core.entry({
          seq,
          request,
          admission,
          outcome,
          barrierBefore: barrier?.epoch,
          barrierAfter: after,
          version,
          ...(conflict ? { conflictingToken: conflict } : {}),
        });
      let logged: GuardLogEntry;
      if (!admission.ok) logged = entry(admission.reason, barrier?.epoch, null);
      else {
        const decision = this.#core.decide(admission, barrier);
        if (!decision.ok) {
          logged = entry(
            decision.reason,
            barrier?.epoch,
            null,
            decision.reason === 'conflict' ? decision.barrierToken : undefined,
          );
        } else {
          this.#barriers.set(write.resource, decision.barrier);
          this.versions.set(`${write.resource}\u0000${write.key}`, seq);
          logged = entry('accepted', decision.barrier.epoch, seq);
        }
      }
      this.log.push(logged);
      this.#core.committed(logged);
      const answer: WriteAnswer = {
        kind: 'written',
        id: write.id,
        accepted: logged.accepted,
        outcome: logged.outcome,
        version: logged.version,
      };
      this.#network.send(GUARD_ADDRESS, from, answer, `written#${write.id} ${logged.outcome}`);
    });
  }
}
