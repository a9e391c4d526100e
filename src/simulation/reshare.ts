/**
 * A reshare in a simulated run (docs/resharing.md): every old replica is frozen (its record final), the records of
 * r of them (the plan draws r from 2f+1 to N) are inherited by the new members (per resource the (r-2f)-th largest
 * epoch, `inheritRecords`), and the new
 * members start with new shares of the same group key at the next share generation; clients then follow the new
 * membership. The coordinator takes the records a hostile network would hand it first: the Byzantine replicas'
 * (which report nothing) and then the honest replicas furthest behind. With r >= 2f+1 of them, at least r-2f honest
 * replicas that signed each grant are among them; the planted `reshare-inherits-f-plus-1` takes fewer.
 */
import type { Cluster } from '../cluster/description.js';
import { inheritRecords, type OldRecordReport } from '../replica/inherit.js';
import { dealRunKeys, type SimKeys } from './crypto.js';
import type { SimReplica } from './replica-node.js';
import type { World } from './world.js';

export interface Reshare {
  readonly before: Cluster;
  readonly after: Cluster;
}

export interface ReshareDone {
  readonly keys: SimKeys;
  readonly reshare: Reshare;
  /** Gives each new member the inherited record before it starts. */
  readonly seed: (replicas: readonly SimReplica[]) => void;
}

/** Freezes the old set and works out the new one; undefined when the old set could not be frozen. */
export async function reshare(world: World, generation: number, records: number): Promise<ReshareDone | undefined> {
  const old = world.replicas;
  const before = world.keys.cluster;
  const frozen = await Promise.all(old.map((replica) => replica.freeze(`reshare to generation ${generation}`)));
  if (!frozen.every(Boolean)) return undefined;
  const reports = old.map((replica) => reportOf(replica));
  const highest = (report: OldRecordReport) =>
    report.entries.reduce((top, entry) => (entry.record.epoch > top ? entry.record.epoch : top), report.floor);
  // Liars first, then the honest records furthest behind.
  const ordered = [...reports].sort((a, b) => {
    const liar = Number(old[b.replica - 1]!.byzantine) - Number(old[a.replica - 1]!.byzantine);
    if (liar !== 0) return liar;
    const lag = highest(a) - highest(b);
    return lag < 0n ? -1 : lag > 0n ? 1 : a.replica - b.replica;
  });
  const f = before.f;
  const planted = world.options.mutation.reshareRecords?.(f);
  // r reports, 2f+1 <= r <= N, the liars' and the laggards' first (the inherit rule takes the (r-2f)-th largest).
  const count = planted ?? Math.min(before.n, Math.max(2 * f + 1, records));
  // inheritRecords refuses fewer than 2f+1 reports: the planted bug believes its count is enough.
  const oldF = planted === undefined ? f : Math.floor((count - 1) / 2);
  const inherited = inheritRecords(ordered.slice(0, count), oldF, before.id);
  const keys = dealRunKeys('sim', before.n, 0, () => undefined, {
    groupSecret: world.keys.groupSecret!,
    membershipVersion: generation,
    backend: before.backend,
  });
  return {
    keys,
    reshare: { before, after: keys.cluster },
    seed: (replicas) => {
      for (const replica of replicas) replica.inherit(inherited.entries, inherited.floor);
    },
  };
}

/** An old replica's export: its record and floor; a Byzantine one reports nothing. */
function reportOf(replica: SimReplica): OldRecordReport {
  const store = replica.store;
  if (replica.byzantine || !store) return { replica: replica.index, floor: 0n, entries: [] };
  return { replica: replica.index, floor: store.floor, entries: store.entries() };
}
