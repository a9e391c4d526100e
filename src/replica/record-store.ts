/**
 * What the replica's service needs of its signing record. The LMDB `SigningRecord` (signing-record.ts) is the one
 * production runs; the simulator (src/simulation) runs the same service over a simulated disk with crash
 * semantics. Every implementation keeps the rule of check-and-record.ts: a decision is taken against the durable
 * record inside the resource's critical section, and what it records is on stable storage before it resolves.
 */
import type { RecordChange } from './check-and-record.js';
import type { FrozenState } from './freeze-marker.js';
import type { SignedRecord } from './policy.js';
import type { CompactionStep, CompactionTest } from './signing-record.js';

export interface RecordStore {
  /** Resources found when the store was opened (each counts as leased for maxTtl after a restart). */
  readonly openedWith: { readonly resources: number };
  /** The replica-wide epoch floor (docs/storage.md). */
  readonly floor: bigint;
  /** Records held now. */
  readonly size: number;
  /** The reshare freeze, when the store is frozen. */
  readonly frozen: FrozenState | undefined;
  /** The durable record of a resource, or undefined when it has none. */
  get(resource: string): SignedRecord | undefined;
  /** The one way to change the record (check-and-record.ts). */
  checkAndRecord<T>(resource: string, decide: (current: SignedRecord | undefined) => RecordChange<T>): Promise<T>;
  /** One step of compaction: removes the records `test` accepts, raising the floor in the same durable step. */
  compactStep(from: Buffer | undefined, limit: number, test: CompactionTest): CompactionStep;
  /** Freezes the store for a reshare (resharing.md); resolves once the marker is durable. */
  freeze(reason: string): Promise<FrozenState>;
  close(): Promise<void>;
}
