/**
 * What the protocol promises about leases, checked from outside the rules (docs/protocol.md, "Replica rules",
 * "Sessions", "Leases that outlive f signers", "Epoch steps"; docs/testing.md, "What each run checks"). The ledger
 * hears every decision of every replica that starts, extends or ends a lease (the service's `onLeaseDecision`),
 * every replica start (its records: the restart rule's leases), every clock jump, and every client's view of its
 * lease; it keeps its own model of each honest replica's leases, built from those decisions alone, and reports:
 *
 * - overlap: an honest replica started or extended a lease while, by its own earlier decisions (and the restart
 *   rule), another holder's lease, or the same holder's under another session (unless the request resumed), ran
 *   there unreleased;
 * - management: an honest replica renewed or released a lease for someone who is not its holder, or for a session
 *   that did not hold it (a session it does not know, after a restart, only while the lease runs), or revived a
 *   lease that was released there and that it still knows released (its record's grant; a joined grant's release is
 *   forgotten once another lease replaced it, and a late renew may then join it again: that costs a lease, not
 *   exclusion); a lease longer than maxTtl (the restart rule's premise); a lease decided for a
 *   holder the access rules do not give the resource;
 * - epoch steps: an honest replica granted (or joined above its record) an epoch beyond the free step of what it
 *   held with no other replica ever having signed that holder a grant at or above it, or beyond the maximum step
 *   with f or fewer such replicas (each Byzantine replica counts as one: it may sign anything);
 * - views: a client's view of its lease (held token, until its view ends) ran past what its replicas promised:
 *   fewer than t honest replicas (less the Byzantine ones, and any whose clock jumped) held that lease until the
 *   view's end when the view was set; and two clients' views of one resource overlapped in time, in a run whose
 *   lease faults (Byzantine replicas, honest ones whose clock jumped) stay within f.
 *
 * Times of a replica's leases are on its own clock (as it decides); views are in virtual time, and a replica's lease
 * ends are carried into virtual time with its clock when decided.
 */
import { toHex } from '../common/bytes.js';
import type { LeaseDecisionNote } from '../replica/service.js';

export interface LedgerConfig {
  readonly f: number;
  readonly t: number;
  /** Byzantine replicas in the run (the same indices in every share generation). */
  readonly byzantine: number;
  readonly maxTtlMs: number;
  readonly freeEpochStep: bigint;
  readonly maxEpochStep: bigint;
  /** The replicas' access rules (docs/protocol.md, step 2). */
  readonly mayAccess: (holder: Uint8Array, resource: string) => boolean;
}

/** A replica as the ledger hears of it. */
export interface LedgerReplica {
  /** Its network address (r3, or r3.g1 after a reshare): one per replica and share generation. */
  readonly address: string;
  readonly generation: number;
  readonly honest: boolean;
  /** Virtual time of a reading of its clock (now). */
  readonly toVirtual: (local: number) => number;
}

interface ModelLease {
  readonly epoch: bigint;
  readonly holder: string;
  /** undefined: unknown (a lease the replica holds by the restart rule). */
  readonly session: string | undefined;
  readonly endsAt: number;
  readonly endsAtVirtual: number;
  readonly released: boolean;
}

interface ReplicaModel {
  readonly replica: LedgerReplica;
  readonly leases: Map<string, ModelLease>;
  /** Resource → `epoch holder` → the session that last held that grant's lease here (since the replica started). */
  readonly sessions: Map<string, Map<string, string>>;
  /**
   * Resource → the `epoch holder` of the grants whose lease was released here and which the replica still knows
   * released: its record's grant (since the replica started), and the lease now. A joined grant's release is
   * forgotten with it once another lease replaces it (docs/protocol.md, "Leases that outlive f signers").
   */
  readonly released: Map<string, Set<string>>;
  /** Resource → the `epoch holder` of the record's grant (what it recorded: a grant, or a join above its record). */
  readonly records: Map<string, string>;
}

interface View {
  readonly client: string;
  readonly resource: string;
  readonly epoch: bigint;
  readonly holder: string;
  readonly session: string;
  endsAt: number;
}

export class LeaseLedger {
  readonly violations: string[] = [];
  readonly #config: LedgerConfig;
  readonly #replicas = new Map<string, ReplicaModel>();
  /** Honest replicas whose clock jumped: their leases end early, one lease fault each. */
  readonly #jumped = new Set<string>();
  /** `generation resource holder` → replica address → the highest epoch it signed that holder (any replica). */
  readonly #signed = new Map<string, Map<string, bigint>>();
  /** Views running now, by client and resource. */
  readonly #views = new Map<string, View>();

  constructor(config: LedgerConfig) {
    this.#config = config;
  }

  /** A replica (re)started with these records: each counts as leased for maxTtl from now (the restart rule). */
  replicaStarted(
    replica: LedgerReplica,
    at: number,
    records: readonly { readonly resource: string; readonly epoch: bigint; readonly holder: Uint8Array }[],
  ): void {
    const model: ReplicaModel = {
      replica,
      leases: new Map(),
      sessions: new Map(),
      released: new Map(),
      records: new Map(),
    };
    const endsAt = at + this.#config.maxTtlMs;
    for (const record of records) {
      model.records.set(record.resource, `${record.epoch} ${toHex(record.holder)}`);
      model.leases.set(record.resource, {
        epoch: record.epoch,
        holder: toHex(record.holder),
        session: undefined,
        endsAt,
        endsAtVirtual: replica.toVirtual(endsAt),
        released: false,
      });
    }
    this.#replicas.set(replica.address, model);
  }

  /** A replica's clock jumped forward: its leases end early on its clock, which is a fault of its own. */
  clockJumped(address: string): void {
    if (this.#replicas.get(address)?.replica.honest) this.#jumped.add(address);
  }

  /** A replica decided `note` (src/replica/service.ts, onLeaseDecision). */
  decided(replica: LedgerReplica, note: LeaseDecisionNote): void {
    const holder = toHex(note.holder);
    if (note.action === 'grant' || note.action === 'resend') this.#noteSigned(replica, note, holder);
    const model = this.#replicas.get(replica.address);
    if (!model || !replica.honest) return;
    if (!note.hadRecord && model.records.has(note.resource)) forgetCompacted(model, note.resource);
    const where = `replica ${replica.address}, ${note.resource}`;
    const lease = model.leases.get(note.resource);
    const grantKey = `${note.epoch} ${holder}`;
    if (note.action === 'release' || note.action === 'renew') {
      const refused = manageRefusal(lease, model.sessions.get(note.resource)?.get(grantKey), note, holder);
      if (refused) this.#report(`${where}: ${note.action} of epoch ${note.epoch} by ${short(holder)}: ${refused}`);
    }
    if (!this.#config.mayAccess(note.holder, note.resource))
      this.#report(`${where}: ${note.action} for ${short(holder)}, whom the access rules do not give it`);
    if (note.action !== 'release') {
      if (note.leaseEndsAt - note.at > this.#config.maxTtlMs)
        this.#report(`${where}: a lease of ${round(note.leaseEndsAt - note.at)} ms, above maxTtl`);
      if (model.released.get(note.resource)?.has(grantKey))
        this.#report(`${where}: ${note.action} of epoch ${note.epoch} for ${short(holder)}, whose lease was released`);
      const blocker = inTheWay(lease, note, holder);
      if (blocker)
        this.#report(
          `${where}: ${note.action} of epoch ${note.epoch} to ${short(holder)}/${short(note.session)} while ${blocker}`,
        );
      if (note.action === 'grant' || (note.action === 'join' && note.epoch > note.recordEpoch))
        this.#checkStep(replica, note, holder, where);
      if ((note.action === 'grant' || note.action === 'join') && note.lineWaits && !note.fromLine)
        this.#report(
          `${where}: ${note.action} of epoch ${note.epoch} to ${short(holder)} decided outside the line while it waited (overtook it)`,
        );
    }
    model.leases.set(note.resource, {
      epoch: note.epoch,
      holder,
      session: note.session,
      endsAt: note.leaseEndsAt,
      endsAtVirtual: replica.toVirtual(note.leaseEndsAt),
      released: note.action === 'release',
    });
    const sessions = model.sessions.get(note.resource) ?? new Map<string, string>();
    model.sessions.set(note.resource, sessions.set(grantKey, note.session));
    this.#noteReleased(model, note, grantKey);
  }

  /** What the replica knows released on `note.resource` after `note` (the record's grant's, and the lease now's). */
  #noteReleased(model: ReplicaModel, note: LeaseDecisionNote, grantKey: string): void {
    if (note.action === 'grant' || (note.action === 'join' && note.epoch > note.recordEpoch))
      model.records.set(note.resource, grantKey);
    const released = model.released.get(note.resource) ?? new Set<string>();
    model.released.set(note.resource, released);
    for (const key of released) if (key !== grantKey && key !== model.records.get(note.resource)) released.delete(key);
    if (note.action === 'release') released.add(grantKey);
  }

  /** A client holds a token: its view runs until `endsAt` (virtual ms), from `at`. */
  viewStarted(
    view: Omit<View, 'endsAt' | 'holder'> & { readonly holder: Uint8Array },
    at: number,
    endsAt: number,
  ): void {
    const held: View = { ...view, holder: toHex(view.holder), endsAt };
    for (const other of this.#views.values()) {
      if (other.resource !== held.resource || other.endsAt <= at) continue;
      if (other.holder === held.holder && other.session === held.session) continue;
      if (this.#leaseFaults() <= this.#config.f)
        this.#report(
          `${held.client} holds ${held.resource} at epoch ${held.epoch} from ${round(at)} while ${other.client}'s view of epoch ${other.epoch} runs until ${round(other.endsAt)}`,
        );
    }
    this.#views.set(`${held.client} ${held.resource}`, held);
    this.#checkBacked(held, at);
  }

  /** A renewal moved a client's view: it now ends at `endsAt` (virtual ms). */
  viewExtended(client: string, resource: string, at: number, endsAt: number): void {
    const view = this.#views.get(`${client} ${resource}`);
    if (!view || endsAt <= view.endsAt) return;
    view.endsAt = endsAt;
    this.#checkBacked(view, at);
  }

  /** A client's view ended (released, expired or lost) at `at` (virtual ms). */
  viewEnded(client: string, resource: string, at: number): void {
    const view = this.#views.get(`${client} ${resource}`);
    if (!view) return;
    view.endsAt = Math.min(view.endsAt, at);
    this.#views.delete(`${client} ${resource}`);
  }

  #report(line: string): void {
    if (this.violations.length < 20) this.violations.push(line);
  }

  #leaseFaults(): number {
    return this.#config.byzantine + this.#jumped.size;
  }

  #noteSigned(replica: LedgerReplica, note: LeaseDecisionNote, holder: string): void {
    const key = `${replica.generation} ${note.resource} ${holder}`;
    const signed = this.#signed.get(key) ?? new Map<string, bigint>();
    this.#signed.set(key, signed);
    if ((signed.get(replica.address) ?? 0n) < note.epoch) signed.set(replica.address, note.epoch);
  }

  /**
   * Epoch steps: beyond the free step only with another replica's partial at or above the epoch, beyond the maximum
   * step only with f+1 of them. What other replicas signed is the ledger's own record; a Byzantine replica counts as
   * having signed anything.
   */
  #checkStep(replica: LedgerReplica, note: LeaseDecisionNote, holder: string, where: string): void {
    const { freeEpochStep, maxEpochStep, byzantine, f } = this.#config;
    const distance = note.epoch - note.recordEpoch;
    if (distance <= (note.hadRecord ? freeEpochStep : maxEpochStep)) return;
    const signed = this.#signed.get(`${replica.generation} ${note.resource} ${holder}`);
    let supporters = byzantine;
    for (const [address, epoch] of signed ?? [])
      if (address !== replica.address && epoch >= note.epoch && this.#replicas.get(address)?.replica.honest)
        supporters++;
    const needed = distance > maxEpochStep ? f + 1 : 1;
    if (supporters < needed)
      this.#report(
        `${where}: ${note.action} of epoch ${note.epoch} ${distance} above ${note.recordEpoch} with ${supporters} replicas (Byzantine ones included) ever at or above it, ${needed} needed`,
      );
  }

  /**
   * A view is backed when t confirmations stand behind it: at least t honest replicas (less the Byzantine ones, which
   * may have confirmed anything, and those whose clock jumped) hold that grant's lease, unreleased, until its end.
   */
  #checkBacked(view: View, at: number): void {
    const { t, byzantine } = this.#config;
    let backers = 0;
    for (const model of this.#replicas.values()) {
      if (!model.replica.honest || this.#jumped.has(model.replica.address)) continue;
      const lease = model.leases.get(view.resource);
      if (!lease || lease.released || lease.epoch !== view.epoch || lease.holder !== view.holder) continue;
      if (lease.endsAtVirtual >= view.endsAt - 1e-6) backers++;
    }
    const needed = t - byzantine - this.#jumped.size;
    if (backers < needed)
      this.#report(
        `${view.client}'s view of ${view.resource} at epoch ${view.epoch} runs until ${round(view.endsAt)} (set at ${round(at)}), held that long by ${backers} honest replicas, ${needed} needed`,
      );
  }
}

/**
 * A decision without a record on a resource the replica recorded: compaction dropped the record (only once no lease
 * ran there), and with it all the replica kept of the resource: who held it, under which session, what was released.
 */
function forgetCompacted(model: ReplicaModel, resource: string): void {
  model.records.delete(resource);
  model.released.delete(resource);
  model.sessions.delete(resource);
  model.leases.delete(resource);
}

/** Why an honest replica must not have renewed or released this lease for `note`'s caller (undefined: it may). */
function manageRefusal(
  lease: ModelLease | undefined,
  lastSession: string | undefined,
  note: LeaseDecisionNote,
  holder: string,
): string | undefined {
  if (lease && lease.epoch === note.epoch && lease.holder === holder) {
    if (lease.session === undefined)
      return running(lease, note.at) ? undefined : 'a lease held by the restart rule that ran out, by a new session';
    return lease.session === note.session ? undefined : `the lease is session ${short(lease.session)}'s`;
  }
  // The grant's lease is not the one here now (a lease joined below the record ran since): only its last session
  // takes it up again, once the other is over.
  if (note.action === 'renew' && lastSession === note.session && !(lease && running(lease, note.at))) return undefined;
  if (!lease) return 'no lease is known here';
  return `the lease here is epoch ${lease.epoch} of ${short(lease.holder)}`;
}

/** Which running lease, not the caller's, is in the way of starting or extending one for `note` (undefined: none). */
function inTheWay(lease: ModelLease | undefined, note: LeaseDecisionNote, holder: string): string | undefined {
  if (!lease || !running(lease, note.at)) return undefined;
  if (lease.holder === holder && (lease.session === note.session || (note.resume && note.action === 'grant')))
    return undefined;
  // A renewal of the restart rule's lease makes it the renewing session's (its management is checked above).
  if (note.action === 'renew' && lease.session === undefined && lease.holder === holder && lease.epoch === note.epoch)
    return undefined;
  return `epoch ${lease.epoch} of ${short(lease.holder)}/${short(lease.session ?? '?')} runs until ${round(lease.endsAt)} (now ${round(note.at)})`;
}

function running(lease: ModelLease, now: number): boolean {
  return !lease.released && lease.endsAt > now;
}

function short(hex: string): string {
  return hex === '' ? "''" : hex.slice(0, 8);
}

function round(ms: number): string {
  return ms.toFixed(1);
}
