/**
 * The end of one participant's key ceremony: a member drafts its result from
 * the qualified dealers (the group key's description, the cluster id it
 * confirms, its Δ-scaled share) and keeps it once t members confirmed that
 * cluster id; an outside dealer, with no result of its own, counts the
 * members' confirmations of one cluster id. Pure: no I/O; the state machine
 * applies what these return.
 */
import { bytesEqual, toHex } from '../common/bytes.js';
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
  const { share, commitments } = rule.combine(
    qualified.map((dealer) => ({
      dealer,
      share: myShares.get(dealer)!,
      commitments: deals.get(dealer)!.commitments,
    })),
  );
  const { cluster, clusterId } = describeCeremonyKey(proposal, commitments);
  return { ok: true, draft: { cluster, qualified, clusterId, share: scaledShareBytes(share, proposal.n) } };
}

/** A member's end: its draft becomes its result once t members (receivers) confirmed the same cluster id. */
export function confirmResult(
  proposal: Proposal,
  draft: ResultDraft,
  confirms: Packet<'confirm'>[],
  receivers: number[],
  excluded: ReadonlyMap<number, string>,
): { ok: true; result: CeremonyResult } | Unconfirmed {
  const agreeing = confirms.filter((p) => bytesEqual(p.body.clusterId, draft.clusterId));
  const others = receivers.filter((i) => !agreeing.some((p) => p.from === i));
  if (agreeing.length < proposal.t) {
    return {
      ok: false,
      reason: `only ${agreeing.length} members confirmed this result, ${proposal.t} needed; not confirming: ${others.join(', ')}`,
      members: others,
    };
  }
  return {
    ok: true,
    result: {
      cluster: draft.cluster,
      qualified: draft.qualified,
      excluded: excludedList(excluded),
      signatures: agreeing
        .map((p) => ({ index: p.from, signature: p.body.signature }))
        .sort((a, b) => a.index - b.index),
      scaledSecretShare: draft.share,
    },
  };
}

/** An outside dealer's end: done once t members confirmed one cluster id; it cannot check more than that. */
export function confirmDealing(
  proposal: Proposal,
  dealer: number,
  confirms: Packet<'confirm'>[],
  receivers: number[],
  excluded: ReadonlyMap<number, string>,
): { ok: true; dealt: DealerOnlyResult } | Unconfirmed {
  const byId = new Map<string, Packet<'confirm'>[]>();
  for (const p of confirms) {
    const id = toHex(p.body.clusterId);
    byId.set(id, [...(byId.get(id) ?? []), p]);
  }
  const [clusterId, agreeing] = [...byId].sort((a, b) => b[1].length - a[1].length)[0] ?? ['', []];
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
