/**
 * The evidence the console keeps, each item with the document it is downloaded as: what clients hand it or its own
 * client records (an equivocation, a partial that fails its key share) and the first proof of each kind the console
 * finds against a replica in its own polls (view.ts: an impossible or falling epoch, two leases, a protocol break, an
 * identity mismatch). It lists the newest items and, apart from them, the first item of each kind that convicts each
 * replica, so a conviction and its download stay however much evidence arrives after it (bounded by replicas × kinds,
 * not by recency). Everything kept can be written out and read back (console-store.ts).
 */
import { verifyEquivocation, type Evidence } from '../client/evidence.js';
import { toHex } from '../common/bytes.js';
import type { Cluster } from '../cluster/description.js';
import {
  EVIDENCE_FORMAT,
  equivocationFromJson,
  equivocationToJson,
  observationFromJson,
  observationToJson,
  type EquivocationJson,
  type ObservationJson,
} from './evidence-json.js';
import { isFaultKind, type FaultKind, type NewConviction } from './view.js';

/** Evidence items listed on the page, newest kept. */
const MAX_LISTED_EVIDENCE = 64;

export type EvidenceDocument = EquivocationJson | ObservationJson;

interface Kept {
  readonly id: number;
  readonly kind: string;
  readonly replica: number;
  readonly resource: string;
  readonly epoch: string;
  readonly observedAt: string;
  readonly reason: string;
  /** What it proves, or undefined (an equivocation pair that does not verify proves nothing). */
  readonly convicts: FaultKind | undefined;
  /** A verified equivocation: anyone holding cluster.json can check it. */
  readonly transferable: boolean;
  readonly document: EvidenceDocument;
}

export interface EvidenceRow {
  readonly id: number;
  readonly kind: string;
  readonly replica: number;
  /** The resource and epoch it is about, or '' (a protocol break or an identity mismatch is about neither). */
  readonly resource: string;
  readonly epoch: string;
  readonly observedAt: string;
  /** What it shows, in words. */
  readonly reason: string;
  /** Offered as a JSON document at /api/evidence/<id>.json (every item is). */
  readonly downloadable: boolean;
  /** The document convinces anyone holding cluster.json (a verified equivocation), not only those who trust the console. */
  readonly transferable: boolean;
}

/** What a piece of evidence proves against its replica, or undefined when it proves nothing. */
export interface EvidenceConviction {
  readonly replica: number;
  readonly kind: FaultKind;
  readonly reason: string;
  readonly at: string;
}

/** One kept item as written to the console's store: its id and its document. */
export interface StoredEvidence {
  readonly id: number;
  readonly document: unknown;
}

const EQUIVOCATION_REASON =
  'two holders signed at one resource and epoch, both signatures verified under its key share';
const INVALID_PARTIAL_REASON = 'sent the console a partial signature that does not verify under its key share';

export class EvidenceStore {
  readonly #cluster: Cluster;
  readonly #listed: Kept[] = [];
  /** `replica kind` → the first item of that kind that convicts the replica. */
  readonly #convicting = new Map<string, Kept>();
  #nextId = 1;

  constructor(cluster: Cluster) {
    this.#cluster = cluster;
  }

  /**
   * Keeps an item the client's evidence log recorded (or a client handed over); returns what it proves. An
   * equivocation proves a fault when both signatures verify; an invalid or undecodable partial is the console's own
   * client's observation (it never asks for signatures, so in practice there are none).
   */
  note(item: Evidence): { id: number; conviction: EvidenceConviction | undefined } {
    const verified = item.kind === 'equivocation' && verifyEquivocation(item, this.#cluster);
    const convicts: FaultKind | undefined = verified
      ? 'equivocation'
      : item.kind !== 'equivocation'
        ? 'invalid_partial'
        : undefined;
    const reason = verified
      ? EQUIVOCATION_REASON
      : convicts
        ? INVALID_PARTIAL_REASON
        : 'two signatures that do not both verify: no proof';
    const document: EvidenceDocument = verified
      ? equivocationToJson(item)
      : observationToJson({
          clusterId: this.#cluster.idHex,
          replica: item.replica,
          kind: item.kind,
          reason,
          observedAt: item.observedAt,
          observed: {
            resource: item.grant.resource,
            epoch: item.grant.epoch.toString(),
            holder: toHex(item.grant.holder),
            partial: toHex(item.partial),
          },
        });
    const kept = this.#keep({
      kind: item.kind,
      replica: item.replica,
      resource: item.grant.resource,
      epoch: item.grant.epoch.toString(),
      observedAt: item.observedAt,
      reason,
      convicts,
      transferable: verified,
      document,
    });
    const conviction = convicts && {
      replica: item.replica,
      kind: convicts,
      reason: verified ? `convicted: verified equivocation evidence (${EQUIVOCATION_REASON})` : INVALID_PARTIAL_REASON,
      at: item.observedAt,
    };
    return { id: kept.id, conviction };
  }

  /** Keeps the first proof of a kind a poll found against a replica (ConsoleJudge's newConvictions). */
  noteConviction(found: NewConviction): number {
    return this.#keep({
      kind: found.kind,
      replica: found.replica,
      resource: found.observed.resource ?? '',
      epoch: found.observed.epoch ?? '',
      observedAt: found.at,
      reason: found.reason,
      convicts: found.kind,
      transferable: false,
      document: observationToJson({ clusterId: this.#cluster.idHex, ...found, observedAt: found.at }),
    }).id;
  }

  #keep(fields: Omit<Kept, 'id'>): Kept {
    const kept: Kept = { id: this.#nextId++, ...fields };
    this.#listed.push(kept);
    if (this.#listed.length > MAX_LISTED_EVIDENCE) this.#listed.shift();
    const key = `${kept.replica} ${kept.convicts}`;
    if (kept.convicts && !this.#convicting.has(key)) this.#convicting.set(key, kept);
    return kept;
  }

  /** The id of a verified item with the same replica, (resource, epoch) and pair of holders, if one is kept. */
  findSame(evidence: Evidence): number | undefined {
    const wanted = equivocationToJson(evidence);
    return this.#all().find((e) => e.transferable && sameEquivocation(e.document as EquivocationJson, wanted))?.id;
  }

  /** The document of item `id`, listed or convicting. */
  document(id: number): EvidenceDocument | undefined {
    return this.#all().find((e) => e.id === id)?.document;
  }

  /** The convicting items no longer among the newest, then the newest; oldest first. */
  rows(): EvidenceRow[] {
    return this.#all().map((e) => ({
      id: e.id,
      kind: e.kind,
      replica: e.replica,
      resource: e.resource,
      epoch: e.epoch,
      observedAt: e.observedAt,
      reason: e.reason,
      downloadable: true,
      transferable: e.transferable,
    }));
  }

  /** Everything kept, for the console's store. */
  stored(): { nextId: number; items: StoredEvidence[] } {
    return { nextId: this.#nextId, items: this.#all().map((e) => ({ id: e.id, document: e.document })) };
  }

  /**
   * Takes back what an earlier run kept: each document is read again, field by field, and an equivocation verified
   * again (an observation is the console's own record and comes back as it was written); one that does not read is
   * skipped. The convictions themselves come back with the judge's (console-store.ts).
   */
  restore(stored: { nextId: number; items: readonly StoredEvidence[] }): { restored: number; skipped: number } {
    let skipped = 0;
    for (const { id, document } of [...stored.items].sort((a, b) => a.id - b.id)) {
      try {
        if (!Number.isSafeInteger(id) || id < 1) throw new Error('bad id');
        const fields = this.#fieldsOf(document);
        const kept: Kept = { id, ...fields };
        this.#listed.push(kept);
        if (this.#listed.length > MAX_LISTED_EVIDENCE) this.#listed.shift();
        const key = `${kept.replica} ${kept.convicts}`;
        if (kept.convicts && !this.#convicting.has(key)) this.#convicting.set(key, kept);
        this.#nextId = Math.max(this.#nextId, id + 1);
      } catch {
        skipped++;
      }
    }
    if (Number.isSafeInteger(stored.nextId)) this.#nextId = Math.max(this.#nextId, stored.nextId);
    return { restored: stored.items.length - skipped, skipped };
  }

  #fieldsOf(document: unknown): Omit<Kept, 'id'> {
    if ((document as { format?: unknown } | null)?.format === EVIDENCE_FORMAT) {
      const evidence = equivocationFromJson(document, this.#cluster);
      return {
        kind: 'equivocation',
        replica: evidence.replica,
        resource: evidence.grant.resource,
        epoch: evidence.grant.epoch.toString(),
        observedAt: evidence.observedAt,
        reason: EQUIVOCATION_REASON,
        convicts: 'equivocation',
        transferable: true,
        document: equivocationToJson(evidence),
      };
    }
    const observation = observationFromJson(document, this.#cluster);
    const kind = observation.kind;
    return {
      kind,
      replica: observation.replica,
      resource: observation.observed.resource ?? '',
      epoch: observation.observed.epoch ?? '',
      observedAt: observation.observedAt,
      reason: observation.reason,
      // Only a verified signature pair convicts of equivocation.
      convicts:
        kind === 'equivocation'
          ? undefined
          : isFaultKind(kind)
            ? kind
            : kind === 'undecodable_partial'
              ? 'invalid_partial'
              : undefined,
      transferable: false,
      document: observation,
    };
  }

  #all(): Kept[] {
    const listedIds = new Set(this.#listed.map((e) => e.id));
    const older = [...this.#convicting.values()].filter((e) => !listedIds.has(e.id));
    return [...older, ...this.#listed].sort((a, b) => a.id - b.id);
  }
}

/** One replica, one (resource, epoch), the same two holders in either order. */
function sameEquivocation(a: EquivocationJson, b: EquivocationJson): boolean {
  const holders = (e: EquivocationJson) => [e.grant.holder, e.conflicting.grant.holder].sort().join();
  return (
    a.replica === b.replica &&
    a.grant.resource === b.grant.resource &&
    a.grant.epoch === b.grant.epoch &&
    holders(a) === holders(b)
  );
}
