/**
 * The faults seen during one call (replicas that broke the protocol, sent partials that do not verify), one entry
 * per (replica, kind), as every call's result names them.
 */
import type { FaultKind, ReplicaFault } from '../evidence.js';
import type { ReplicaAnswer, RequestKind } from '../replica-channel.js';

/** The faults seen during one call, one entry per (replica, kind). */
export class CallFaults {
  readonly #faults: ReplicaFault[] = [];

  add(replica: number, kind: FaultKind, message: string): void {
    if (this.#faults.some((f) => f.replica === replica && f.kind === kind)) return;
    this.#faults.push({ replica, kind, message });
  }

  /** Records the fault an answer shows, if any. */
  fromAnswer(replica: number, answer: ReplicaAnswer<RequestKind>): void {
    if (answer.kind === 'faulty') this.add(replica, 'protocol', answer.message);
  }

  list(): readonly ReplicaFault[] {
    return [...this.#faults].sort((a, b) => a.replica - b.replica);
  }
}
