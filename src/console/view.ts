/**
 * The console's (f+1)-th rules, pure: what it believes about leases and which replicas contradict the others.
 * Every input is some replica's word; the rules keep f liars from painting the page:
 *
 * - A lease is shown only when at least f+1 replicas list the same (resource, epoch, holder), so at least one
 *   honest replica vouches for it; its time left is the (f+1)-th largest of theirs (f inflated times cannot
 *   push it above what an honest replica reports).
 * - A replica contradicts the others for a resource when the highest epoch it claims there (its status answer,
 *   or a lease it lists) is above the (f+1)-th largest epoch the other replicas report: fewer than f+1 others
 *   confirm it. Lagging behind is not a contradiction: an acquire needs only 2f+1 signers, so an honest
 *   replica routinely misses grants. A contradiction makes a replica faulty only when it lasts `persistPolls`
 *   polls in a row, so a grant caught between two answers does not.
 */
import { fPlusOneLargest } from '../client/epoch-choice.js';
import { toHex } from '../common/bytes.js';
import type { ActiveLease } from '../protocol/messages.js';

/** One replica's answers in one poll: its lease list (undefined: no answer) and its status epochs by resource. */
export interface ReplicaObservation {
  readonly replica: number;
  readonly leases: readonly ActiveLease[] | undefined;
  /** Resource → the epoch its status answer reported (absent: no answer for that resource). */
  readonly statusEpochs: ReadonlyMap<string, bigint>;
}

export interface QuorumLease {
  readonly resource: string;
  readonly epoch: bigint;
  /** The holder's key, lowercase hex. */
  readonly holder: string;
  /** The (f+1)-th largest remaining time among the replicas listing it. */
  readonly remainingMs: number;
  /** The replicas that list it, ascending. */
  readonly reportedBy: readonly number[];
}

export interface Contradiction {
  readonly replica: number;
  readonly resource: string;
  /** The highest epoch the replica claims for the resource. */
  readonly claimed: bigint;
  /** The (f+1)-th largest epoch the other replicas report. */
  readonly confirmed: bigint;
}

function leaseKey(resource: string, epoch: bigint, holder: string): string {
  return `${epoch}\u0000${holder}\u0000${resource}`;
}

/** The leases at least f+1 replicas list identically, ending last first. */
export function confirmedLeases(observations: readonly ReplicaObservation[], f: number): QuorumLease[] {
  const seen = new Map<string, { lease: ActiveLease; holder: string; replicas: number[]; remaining: bigint[] }>();
  for (const observation of observations) {
    const listedHere = new Set<string>();
    for (const lease of observation.leases ?? []) {
      const holder = toHex(lease.holder);
      const key = leaseKey(lease.resource, lease.epoch, holder);
      // A replica that lists one lease twice still counts once.
      if (listedHere.has(key)) continue;
      listedHere.add(key);
      const entry = seen.get(key) ?? { lease, holder, replicas: [], remaining: [] };
      entry.replicas.push(observation.replica);
      entry.remaining.push(BigInt(lease.remainingMs));
      seen.set(key, entry);
    }
  }
  const confirmed: QuorumLease[] = [];
  for (const entry of seen.values()) {
    if (entry.replicas.length < f + 1) continue;
    confirmed.push({
      resource: entry.lease.resource,
      epoch: entry.lease.epoch,
      holder: entry.holder,
      remainingMs: Number(fPlusOneLargest(entry.remaining, f)!),
      reportedBy: [...entry.replicas].sort((a, b) => a - b),
    });
  }
  return confirmed.sort((a, b) => b.remainingMs - a.remainingMs || a.resource.localeCompare(b.resource));
}

/** Every (replica, resource) where the replica claims an epoch fewer than f+1 other replicas confirm. */
export function findContradictions(observations: readonly ReplicaObservation[], f: number): Contradiction[] {
  const resources = new Set<string>();
  for (const o of observations) for (const resource of o.statusEpochs.keys()) resources.add(resource);
  const found: Contradiction[] = [];
  for (const resource of resources) {
    for (const o of observations) {
      let claimed = o.statusEpochs.get(resource);
      for (const lease of o.leases ?? [])
        if (lease.resource === resource && (claimed === undefined || lease.epoch > claimed)) claimed = lease.epoch;
      if (claimed === undefined) continue;
      const others = observations
        .filter((other) => other.replica !== o.replica)
        .map((other) => other.statusEpochs.get(resource))
        .filter((epoch): epoch is bigint => epoch !== undefined);
      const confirmed = fPlusOneLargest(others, f);
      if (confirmed !== undefined && claimed > confirmed)
        found.push({ replica: o.replica, resource, claimed, confirmed });
    }
  }
  return found;
}

/** Replicas whose contradictions lasted `persistPolls` polls in a row, with the latest one as the reason. */
export class ContradictionTracker {
  readonly #persistPolls: number;
  /** Replica → consecutive polls with a contradiction, and the latest. */
  readonly #streaks = new Map<number, { polls: number; latest: Contradiction }>();

  constructor(persistPolls = 3) {
    this.#persistPolls = persistPolls;
  }

  /** Takes one poll's contradictions; a replica without one in this poll starts over. */
  update(contradictions: readonly Contradiction[]): void {
    const now = new Map<number, Contradiction>();
    for (const c of contradictions) if (!now.has(c.replica)) now.set(c.replica, c);
    for (const replica of [...this.#streaks.keys()]) if (!now.has(replica)) this.#streaks.delete(replica);
    for (const [replica, latest] of now)
      this.#streaks.set(replica, { polls: (this.#streaks.get(replica)?.polls ?? 0) + 1, latest });
  }

  /** The lasting contradiction of `replica`, or undefined when it has none. */
  faultOf(replica: number): Contradiction | undefined {
    const streak = this.#streaks.get(replica);
    return streak && streak.polls >= this.#persistPolls ? streak.latest : undefined;
  }
}

/** How many more replicas may fail before acquires stop: those available minus the 2f+1 an acquire needs. */
export function quorumMargin(available: number, f: number): number {
  return available - (2 * f + 1);
}
