/**
 * The end of one participant's key ceremony: a member drafts its result from
 * the qualified dealers (the group key's description, the cluster id it
 * confirms, its Δ-scaled share) and keeps it once t members confirmed that
 * cluster id; when t members confirmed another id, it takes that result if
 * its own deals and shares give exactly that id (it does not sign it). An
 * outside dealer, with no result of its own, counts the members'
 * confirmations of one cluster id. Pure: no I/O; the state machine applies
 * what these return.
 */
import { toHex } from '../common/bytes.js';
import type { ClusterDescriptionJson } from '../cluster/description.js';
import type { DealingRule } from './dealing.js';
import { describeCeremonyKey } from './describe.js';
import type { CeremonyResult, DealerOnlyResult } from './events.js';
import type { Packet } from './packets.js';
import type { Proposal } from './proposal.js';
import type { SettledDeal } from './qualification.js';
import { scaledShareBytes } from './vss.js';

/** A member's result before the confirmations: what it signs in the confirm round. */
export interface ResultDraft {
  readonly cluster: ClusterDescriptionJson;
  readonly qualified: number[];
  readonly clusterId: Uint8Array;
  readonly share: Uint8Array;
}

/** Why the ceremony ends without a result, and the members (or dealers) it names. */
export interface Unconfirmed {
  readonly ok: false;
  readonly reason: string;
  readonly members: number[];
}

function excludedList(excluded: ReadonlyMap<number, string>): { dealer: number; reason: string }[] {
  return [...excluded].map(([dealer, reason]) => ({ dealer, reason })).sort((a, b) => a.dealer - b.dealer);
}

/**
 * The result of a given qualified set from this member's deals and shares; undefined unless it holds a deal and a
 * checked share of every one of them and they are enough.
 */
export function draftOf(
  proposal: Proposal,
  rule: DealingRule,
  deals: ReadonlyMap<number, SettledDeal>,
  myShares: ReadonlyMap<number, bigint>,
  qualified: readonly number[],
): ResultDraft | undefined {
  const sorted = [...new Set(qualified)].sort((a, b) => a - b);
  if (sorted.length < rule.minimumQualified || sorted.some((d) => !deals.has(d) || !myShares.has(d))) return undefined;
  const { share, commitments } = rule.combine(
    sorted.map((dealer) => ({ dealer, share: myShares.get(dealer)!, commitments: deals.get(dealer)!.commitments })),
  );
  const { cluster, clusterId } = describeCeremonyKey(proposal, commitments);
  return { cluster, qualified: sorted, clusterId, share: scaledShareBytes(share, proposal.n) };
}

/** The member's draft from the qualified dealers' deals and its shares; too few qualified aborts. */
export function draftResult(
  proposal: Proposal,
  rule: DealingRule,
  deals: ReadonlyMap<number, SettledDeal>,
  excluded: ReadonlyMap<number, string>,
  myShares: ReadonlyMap<number, bigint>,
): { ok: true; draft: ResultDraft } | Unconfirmed {
  const qualified = [...deals.keys()].filter((d) => !excluded.has(d)).sort((a, b) => a - b);
  if (qualified.length < rule.minimumQualified) {
    const out = rule.dealers.filter((d) => !qualified.includes(d));
    return {
      ok: false,
      reason: `only ${qualified.length} qualified dealers, ${rule.minimumQualified} needed; excluded: ${out
        .map((d) => `${d} (${excluded.get(d) ?? 'no deal'})`)
        .join(', ')}`,
      members: out,
    };
  }
  // Every qualified dealer's share to this member was checked (or this member complained, and the dealer left).
  return { ok: true, draft: draftOf(proposal, rule, deals, myShares, qualified)! };
}

/** Confirmations by cluster id (hex), one per member per id. */
function byClusterId(confirms: readonly Packet<'confirm'>[]): Map<string, Packet<'confirm'>[]> {
  const ids = new Map<string, Packet<'confirm'>[]>();
  for (const p of confirms) {
    const id = toHex(p.body.clusterId);
    const list = ids.get(id) ?? [];
    if (!list.some((q) => q.from === p.from)) list.push(p);
    ids.set(id, list);
  }
  return ids;
}

function resultOf(
  draft: ResultDraft,
  agreeing: readonly Packet<'confirm'>[],
  excluded: readonly { dealer: number; reason: string }[],
): CeremonyResult {
  return {
    cluster: draft.cluster,
    qualified: draft.qualified,
    excluded: [...excluded],
    signatures: agreeing.map((p) => ({ index: p.from, signature: p.body.signature })).sort((a, b) => a.index - b.index),
    scaledSecretShare: draft.share,
  };
}

/**
 * A member's end. Its draft becomes its result once t members confirmed the same cluster id. Otherwise, when t
 * members confirmed another id (here or in a certificate another member sent), it takes that result if `redraft`
 * gives exactly that id from the qualified set they name: its own deals and checked shares then make a share of
 * that key. No other id can have t confirmations, so a member that can do neither aborts.
 */
export function confirmResult(
  proposal: Proposal,
  draft: ResultDraft,
  confirms: readonly Packet<'confirm'>[],
  receivers: readonly number[],
  excluded: ReadonlyMap<number, string>,
  dealers: readonly number[],
  redraft: (qualified: readonly number[]) => ResultDraft | undefined,
): { ok: true; result: CeremonyResult; confirms: Packet<'confirm'>[]; adopted: boolean } | Unconfirmed {
  const ids = byClusterId(confirms);
  const mine = ids.get(toHex(draft.clusterId)) ?? [];
  if (mine.length >= proposal.t) {
    return { ok: true, result: resultOf(draft, mine, excludedList(excluded)), confirms: mine, adopted: false };
  }
  for (const [id, agreeing] of ids) {
    if (agreeing.length < proposal.t) continue;
    for (const qualified of new Set(agreeing.map((p) => p.body.qualified.join(',')))) {
      const other = redraft(qualified.split(',').map(Number));
      if (!other || toHex(other.clusterId) !== id) continue;
      const left = dealers
        .filter((d) => !other.qualified.includes(d))
        .map((dealer) => ({
          dealer,
          reason: excluded.get(dealer) ?? `not qualified by the ${agreeing.length} members that confirmed the result`,
        }));
      return { ok: true, result: resultOf(other, agreeing, left), confirms: agreeing, adopted: true };
    }
  }
  const others = receivers.filter((i) => !mine.some((p) => p.from === i));
  return {
    ok: false,
    reason: `only ${mine.length} members confirmed this result, ${proposal.t} needed; not confirming: ${others.join(', ')}`,
    members: others,
  };
}

/** An outside dealer's end: done once t members confirmed one cluster id; it cannot check more than that. */
export function confirmDealing(
  proposal: Proposal,
  dealer: number,
  confirms: readonly Packet<'confirm'>[],
  receivers: readonly number[],
  excluded: ReadonlyMap<number, string>,
): { ok: true; dealt: DealerOnlyResult } | Unconfirmed {
  const [clusterId, agreeing] = [...byClusterId(confirms)].sort((a, b) => b[1].length - a[1].length)[0] ?? ['', []];
  if (agreeing.length < proposal.t) {
    const others = receivers.filter((i) => !agreeing.some((p) => p.from === i));
    return {
      ok: false,
      reason: `only ${agreeing.length} members confirmed one result, ${proposal.t} needed; not confirming: ${others.join(', ')}`,
      members: others,
    };
  }
  const qualified = agreeing[0]!.body.qualified.slice().sort((a, b) => a - b);
  return {
    ok: true,
    dealt: {
      clusterId,
      qualified,
      dealer,
      confirmedBy: agreeing.map((p) => p.from).sort((a, b) => a - b),
      excluded: excludedList(excluded),
    },
  };
}
