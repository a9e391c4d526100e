/**
 * The faults seen during one call (replicas that broke the protocol, sent partials that do not verify), one entry
 * per (replica, kind), as every call's result names them. Plain data (a list) changed by the functions here, so a
 * core's state can hold it; `CallFaults` is the same list behind a handle, for the calls that keep one.
 */
import type { FaultKind, ReplicaFault } from '../evidence.js';
import type { ReplicaAnswer, RequestKind } from '../replica-channel.js';

/** Adds a fault unless one of that kind is already listed for the replica. */
export function addFault(faults: ReplicaFault[], replica: number, kind: FaultKind, message: string): void {
  if (faults.some((f) => f.replica === replica && f.kind === kind)) return;
  faults.push({ replica, kind, message });
}

/** Records the fault an answer shows, if any. */
export function faultFromAnswer(faults: ReplicaFault[], replica: number, answer: ReplicaAnswer<RequestKind>): void {
  if (answer.kind === 'faulty') addFault(faults, replica, 'protocol', answer.message);
}

/** The faults as a call's result names them: by replica. */
export function faultList(faults: readonly ReplicaFault[]): readonly ReplicaFault[] {
  return [...faults].sort((a, b) => a.replica - b.replica);
}

/** The faults seen during one call, one entry per (replica, kind). */
export class CallFaults {
  readonly #faults: ReplicaFault[] = [];

  add(replica: number, kind: FaultKind, message: string): void {
    addFault(this.#faults, replica, kind, message);
  }

  /** Records the fault an answer shows, if any. */
  fromAnswer(replica: number, answer: ReplicaAnswer<RequestKind>): void {
    faultFromAnswer(this.#faults, replica, answer);
  }

  list(): readonly ReplicaFault[] {
    return faultList(this.#faults);
  }
}
