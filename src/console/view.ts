/**
 * The console's rules, pure: which leases it believes, and when it calls a replica faulty. Every input is some
 * replica's word (docs/console.md, "Why these rules"):
 *
 * - A lease is shown only when at least f+1 replicas list the same (resource, epoch, holder), so at least one
 *   honest replica vouches for it; its time left is the (f+1)-th largest of theirs (f inflated times cannot
 *   push it above what an honest replica reports).
 * - A replica is faulty only on proof: something no honest replica can say under at most f faults (lies
 *   below), its answers breaking the protocol, a /healthz naming another cluster or replica, or evidence
 *   (ConsoleJudge.convict). Comparing epochs across replicas proves nothing: an acquire asks t signers, so
 *   the others lag; a client can be granted by one replica alone, which then runs far ahead; and once a
 *   signer is down only 2f replicas list a lease. A replica that does not answer is unreachable, never faulty.
 * - The margin counts the replicas that answered and are not proven faulty. Since no honest replica is ever
 *   proven faulty, it is never below the true margin (the honest replicas that answer, minus 2f+1).
 */
import { fPlusOneLargest } from '../client/epoch-choice.js';
import { BoundedMap } from '../common/bounded-map.js';
import { toHex } from '../common/bytes.js';
import { HONEST_EPOCH_CEILING } from '../common/limits.js';
import type { ActiveLease } from '../protocol/messages.js';

/** One replica's answers in one poll, in the order they came: its lease list, then its status answers. */
export interface ReplicaObservation {
  readonly replica: number;
  /**
   * ok: it answered the leases request on a ready connection; unreachable: no answer (down, partitioned,
   * silent, slow, refused); protocol: the console's client closed its connection for breaking the protocol.
   */
  readonly answer: 'ok' | 'unreachable' | 'protocol';
  /** With `protocol`: what it broke. */
  readonly message?: string;
  /** Its lease list (undefined: no answer). */
  readonly leases: readonly ActiveLease[] | undefined;
  /**
   * It said its list was cut (`more`): it left leases out, or may have (protocol.md, `leases`). Not listing a lease
   * then proves nothing about it.
   */
  readonly more?: boolean;
  /** Resource → the epoch its status answer reported (absent: no answer for that resource). */
  readonly statusEpochs: ReadonlyMap<string, bigint>;
  /**
   * The console's connection to it is not the one of the previous poll: it restarted, or a reshare put a new
   * member at its index (the console cannot tell), whose inherited records may be lower. Its history starts over.
   */
  readonly newConnection: boolean;
  /** Its /healthz names another cluster or replica index: what it says, else null. */
  readonly identityMismatch: string | null;
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
  /**
   * Fewer than t = 2f+1 replicas list it, even counting every replica whose list was cut as one that might: its next
   * renewal cannot gather t answers, so it ends at its time left unless replicas come back.
   */
  readonly atRisk: boolean;
}

/** What proves a replica faulty; each kind is something an honest replica never does. */
export type FaultKind =
  /** An epoch at or above HONEST_EPOCH_CEILING. */
  | 'impossible_epoch'
  /** An epoch lower than one it reported earlier on the same connection: records and floors never go down. */
  | 'epoch_went_down'
  /** Two different leases on one resource in one list: a replica keeps one record per resource. */
  | 'two_leases'
  /** The console's client closed its connection for a frame or answer that breaks the protocol or the codec. */
  | 'protocol'
  /** Its /healthz names another cluster or replica index. */
  | 'identity'
  /** Verified equivocation evidence: two holders signed at one (resource, epoch). */
  | 'equivocation'
  /** A partial signature that fails its public key share, seen by the console's own client. */
  | 'invalid_partial';

/** Every kind, in the order of the table in docs/console.md. */
export const FAULT_KINDS: readonly FaultKind[] = [
  'impossible_epoch',
  'epoch_went_down',
  'two_leases',
  'protocol',
  'identity',
  'equivocation',
  'invalid_partial',
];

export function isFaultKind(kind: unknown): kind is FaultKind {
  return (FAULT_KINDS as readonly unknown[]).includes(kind);
}

export interface Lie {
  readonly kind: FaultKind;
  readonly reason: string;
  /** What the replica said, as the console read it (kept with the evidence). */
  readonly observed: Readonly<Record<string, string>>;
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
  const t = 2 * f + 1;
  const cut = observations.filter((o) => o.answer === 'ok' && o.more === true).map((o) => o.replica);
  const confirmed: QuorumLease[] = [];
  for (const entry of seen.values()) {
    if (entry.replicas.length < f + 1) continue;
    const mightList = entry.replicas.length + cut.filter((r) => !entry.replicas.includes(r)).length;
    confirmed.push({
      resource: entry.lease.resource,
      epoch: entry.lease.epoch,
      holder: entry.holder,
      remainingMs: Number(fPlusOneLargest(entry.remaining, f)!),
      reportedBy: [...entry.replicas].sort((a, b) => a - b),
      atRisk: mightList < t,
    });
  }
  return confirmed.sort((a, b) => b.remainingMs - a.remainingMs || a.resource.localeCompare(b.resource));
}

/**
 * What in one poll's answers no honest replica can say, given the highest epoch it reported per resource
 * earlier on the same connection (`earlier`). Its lease list came before its status answers, so every epoch
 * it reports must be at least every one it reported before (records and the floor only rise; compaction
 * raises the floor to at least the epoch of the record it removes).
 */
export function provableLies(observation: ReplicaObservation, earlier: ReadonlyMap<string, bigint>): Lie[] {
  const lies: Lie[] = [];
  /** What this poll's own answers raised, over `earlier` (which is not copied: it may hold thousands). */
  const raised = new Map<string, bigint>();
  const report = (resource: string, epoch: bigint, what: string) => {
    const name = JSON.stringify(resource);
    const observed = { answer: what === 'reports' ? 'status' : 'leases', resource, epoch: epoch.toString() };
    if (epoch >= HONEST_EPOCH_CEILING)
      lies.push({
        kind: 'impossible_epoch',
        reason: `${what} epoch ${epoch} for ${name}: no honest replica reaches 2^62 (epochs rise at most 10^6 per grant)`,
        observed,
      });
    const before = raised.get(resource) ?? earlier.get(resource);
    if (before !== undefined && epoch < before)
      lies.push({
        kind: 'epoch_went_down',
        reason: `${what} epoch ${epoch} for ${name} after reporting ${before} on the same connection (records never go down)`,
        observed: { ...observed, earlierEpoch: before.toString() },
      });
    if (before === undefined || epoch > before) raised.set(resource, epoch);
  };
  const listed = new Map<string, ActiveLease>();
  for (const lease of observation.leases ?? []) {
    const other = listed.get(lease.resource);
    if (other && (other.epoch !== lease.epoch || toHex(other.holder) !== toHex(lease.holder)))
      lies.push({
        kind: 'two_leases',
        reason: `lists two leases on ${JSON.stringify(lease.resource)} (epochs ${other.epoch} and ${lease.epoch}): a replica keeps one record per resource`,
        observed: {
          answer: 'leases',
          resource: lease.resource,
          epoch: other.epoch.toString(),
          otherEpoch: lease.epoch.toString(),
          holder: toHex(other.holder),
          otherHolder: toHex(lease.holder),
        },
      });
    listed.set(lease.resource, lease);
  }
  // Leases first (their answer came first), each resource at its highest listed epoch; then the status answers.
  const listedHighest = new Map<string, bigint>();
  for (const lease of observation.leases ?? [])
    if ((listedHighest.get(lease.resource) ?? -1n) < lease.epoch) listedHighest.set(lease.resource, lease.epoch);
  for (const [resource, epoch] of listedHighest) report(resource, epoch, 'lists a lease at');
  for (const [resource, epoch] of observation.statusEpochs) report(resource, epoch, 'reports');
  return lies;
}

/** How many more replicas may fail before acquires stop: those available minus the 2f+1 an acquire needs. */
export function quorumMargin(available: number, f: number): number {
  return available - (2 * f + 1);
}

export interface Conviction {
  readonly kind: FaultKind;
  /** The first proof of this kind, in words. */
  readonly reason: string;
  /** When it was first and last seen (ISO 8601, UTC), and how often. */
  readonly firstAt: string;
  readonly lastAt: string;
  readonly count: number;
}

export interface ReplicaVerdict {
  readonly replica: number;
  readonly reachable: boolean;
  /** The first proof against it, or null: it is faulty only with one. */
  readonly faulty: string | null;
  readonly faultySince: string | null;
  readonly convictions: readonly Conviction[];
}

/** A proof this poll found for the first time against a replica (for that kind): kept as evidence. */
export interface NewConviction {
  readonly replica: number;
  readonly kind: FaultKind;
  readonly reason: string;
  readonly at: string;
  readonly observed: Readonly<Record<string, string>>;
}

export interface PollVerdict {
  readonly replicas: readonly ReplicaVerdict[];
  /** The proofs of kinds not held before against their replica, in the order found. */
  readonly newConvictions: readonly NewConviction[];
  /** Replicas reachable and not faulty. */
  readonly available: number;
  readonly margin: number;
}

/** Resources whose highest epoch is remembered per replica: the oldest updated go first (fewer checks, never a false one). */
const REMEMBERED_RESOURCES = 4096;

/**
 * The console's verdicts, poll after poll. A conviction stays for the console's life: an honest replica never
 * earns one, so a replica that did is compromised (or misconfigured) whatever it says afterwards. Bounded by
 * replica and kind, never by how much evidence arrives after it.
 */
export class ConsoleJudge {
  readonly #f: number;
  /** Replica → kind → conviction. */
  readonly #convictions = new Map<number, Map<FaultKind, Conviction>>();
  /** Replica → resource → the highest epoch it reported on its current connection. */
  readonly #epochs = new Map<number, BoundedMap<string, bigint>>();
  /**
   * Replicas that reported an epoch at or above the ceiling. Once more than f did, one of them is honest: the
   * cluster's epochs crossed it (a reshare that inherited a lie before inherit refused such lies), and an epoch
   * there proves nothing against anyone, so those convictions no longer count.
   */
  readonly #beyondCeiling = new Set<number>();

  constructor(f: number) {
    this.#f = f;
  }

  /** Records a proof against `replica` (evidence, or one of the lies a poll found); true when its kind is new for it. */
  convict(replica: number, kind: FaultKind, reason: string, at: string): boolean {
    const byKind = this.#convictions.get(replica) ?? new Map<FaultKind, Conviction>();
    this.#convictions.set(replica, byKind);
    const known = byKind.get(kind);
    byKind.set(
      kind,
      known ? { ...known, lastAt: at, count: known.count + 1 } : { kind, reason, firstAt: at, lastAt: at, count: 1 },
    );
    return known === undefined;
  }

  /** Takes back convictions kept from an earlier run of the console (console-store.ts): they stay for its life. */
  restore(replica: number, conviction: Conviction): void {
    const byKind = this.#convictions.get(replica) ?? new Map<FaultKind, Conviction>();
    this.#convictions.set(replica, byKind);
    if (!byKind.has(conviction.kind)) byKind.set(conviction.kind, conviction);
  }

  /** Every conviction held, by replica (what the console keeps across restarts). */
  allConvictions(): { replica: number; conviction: Conviction }[] {
    return [...this.#convictions].flatMap(([replica, byKind]) =>
      [...byKind.values()].map((conviction) => ({ replica, conviction })),
    );
  }

  /** Judges one poll's answers (one observation per replica) at time `at`. */
  poll(observations: readonly ReplicaObservation[], at: string): PollVerdict {
    const newConvictions: NewConviction[] = [];
    const convict = (replica: number, lie: Lie) => {
      if (this.convict(replica, lie.kind, lie.reason, at)) newConvictions.push({ replica, ...lie, at });
    };
    for (const o of observations) {
      if (o.newConnection) this.#epochs.delete(o.replica);
      if (o.answer === 'protocol')
        convict(o.replica, {
          kind: 'protocol',
          reason: `broke the protocol: ${o.message ?? ''}`,
          observed: { answer: 'a frame or reply that breaks the protocol', message: o.message ?? '' },
        });
      if (o.identityMismatch !== null)
        convict(o.replica, { kind: 'identity', reason: o.identityMismatch, observed: { said: o.identityMismatch } });
      if (o.answer !== 'ok') continue;
      const memory = this.#epochs.get(o.replica) ?? new BoundedMap<string, bigint>(REMEMBERED_RESOURCES);
      this.#epochs.set(o.replica, memory);
      for (const lie of provableLies(o, memory)) {
        if (lie.kind === 'impossible_epoch') this.#beyondCeiling.add(o.replica);
        convict(o.replica, lie);
      }
      for (const lease of o.leases ?? []) remember(memory, lease.resource, lease.epoch);
      for (const [resource, epoch] of o.statusEpochs) remember(memory, resource, epoch);
    }
    const replicas = observations.map((o): ReplicaVerdict => {
      const convictions = this.convictions(o.replica);
      const first = convictions[0];
      return {
        replica: o.replica,
        reachable: o.answer === 'ok',
        faulty: first ? first.reason : null,
        faultySince: first ? first.firstAt : null,
        convictions,
      };
    });
    const available = replicas.filter((r) => r.reachable && r.faulty === null).length;
    return { replicas, newConvictions, available, margin: quorumMargin(available, this.#f) };
  }

  /** The proofs against `replica`, first found first (an impossible epoch only while at most f replicas reported one). */
  convictions(replica: number): Conviction[] {
    const ceilingProves = this.#beyondCeiling.size <= this.#f;
    return [...(this.#convictions.get(replica)?.values() ?? [])]
      .filter((c) => ceilingProves || c.kind !== 'impossible_epoch')
      .sort((a, b) => a.firstAt.localeCompare(b.firstAt));
  }
}

function remember(memory: BoundedMap<string, bigint>, resource: string, epoch: bigint): void {
  const before = memory.get(resource);
  if (before === undefined || epoch > before) memory.set(resource, epoch);
}
