/**
 * Which dealers qualify, for one participant of the key ceremony: after the
 * echo round, one well-formed deal per dealer that the dealing rule accepts,
 * with this member's share opened and checked (or a complaint decided); after
 * the justification round, every complaint answered by a revealed share that
 * matches the dealer's commitments, or the dealer excluded. Pure: it reads the
 * packets the state machine kept and writes into its ledger; no I/O.
 */
import type { DealingRule } from './dealing.js';
import type { NodeKey } from './node-key.js';
import type { DealBody, Packet } from './packets.js';
import type { Proposal } from './proposal.js';
import { openShare } from './share-box.js';
import { decodeCommitments, scalarFromBytes, shareMatchesCommitments, type G1Point } from './vss.js';

/** A deal in force after the echo round, with its decoded commitments. */
export interface SettledDeal {
  readonly body: DealBody;
  readonly commitments: G1Point[];
}

/** What settling reads and writes of one participant's state (CeremonyMember's own maps). */
export interface QualificationLedger {
  readonly proposal: Proposal;
  /** This participant's sender number. */
  readonly self: number;
  /** A member receives shares; an outside dealer only deals. */
  readonly receives: boolean;
  readonly rule: DealingRule;
  readonly nodeKey: NodeKey;
  /** Deals in force, by dealer number. */
  readonly deals: Map<number, SettledDeal>;
  readonly excluded: ReadonlyMap<number, string>;
  /** The share each dealer gave this member (after justifications replace disputed ones). */
  readonly myShares: Map<number, bigint>;
  senderOf(dealer: number): number | undefined;
  /** Excludes a dealer (the first reason stands) and reports it. */
  exclude(dealer: number, reason: string): void;
}

/**
 * After the echo round: one version per dealer, well-formed, accepted by the rule; open my shares; decide my
 * complaints. Returns the dealers this member complains against.
 */
export function settleDeals(
  ledger: QualificationLedger,
  dealVersions: ReadonlyMap<number, Packet<'deal'>[]>,
): number[] {
  const { rule, nodeKey, proposal, self } = ledger;
  const complaints: number[] = [];
  for (const dealer of rule.dealers) {
    const sender = ledger.senderOf(dealer);
    const versions = sender === undefined ? [] : (dealVersions.get(sender) ?? []);
    if (versions.length === 0) {
      ledger.exclude(dealer, 'sent no deal');
      continue;
    }
    if (versions.length > 1) {
      ledger.exclude(dealer, 'equivocated: signed two different deals');
      continue;
    }
    const body = versions[0]!.body;
    let commitments: G1Point[];
    try {
      commitments = decodeCommitments(body.commitments, proposal.t);
    } catch (error) {
      ledger.exclude(dealer, `malformed commitments: ${(error as Error).message}`);
      continue;
    }
    if (!rule.acceptsCommitments(dealer, commitments)) {
      ledger.exclude(dealer, 'commitments refused by the dealing rule');
      continue;
    }
    ledger.deals.set(dealer, { body, commitments });
    if (!ledger.receives) continue;
    const opened = openShare(
      (peer) => nodeKey.sharedSecret(peer),
      body.ephemeral,
      proposal.digest,
      dealer,
      self,
      body.shares[self - 1]!,
    );
    const share = opened ? scalarFromBytes(opened) : null;
    if (share !== null && shareMatchesCommitments(share, self, commitments)) ledger.myShares.set(dealer, share);
    else complaints.push(dealer);
  }
  return complaints;
}

/**
 * Every complaint against a dealer needs a revealed share that matches its commitments: the complaints delivered,
 * and this member's own even when it was not delivered here in time (this member holds no share of that dealer
 * otherwise, and a result without it would not be this member's share).
 */
export function settleJustifications(
  ledger: QualificationLedger,
  complaints: ReadonlyMap<number, Packet>,
  justifications: ReadonlyMap<number, Packet>,
  ownComplaints: readonly number[],
): void {
  for (const [dealer, deal] of ledger.deals) {
    if (ledger.excluded.has(dealer)) continue;
    const accusers = [...complaints.values()]
      .filter((p) => (p as Packet<'complaint'>).body.against.includes(dealer))
      .map((p) => p.from);
    if (ownComplaints.includes(dealer) && !accusers.includes(ledger.self)) accusers.push(ledger.self);
    const sender = ledger.senderOf(dealer);
    const reveals = (
      (sender === undefined ? undefined : justifications.get(sender)) as Packet<'justification'> | undefined
    )?.body.reveals;
    for (const accuser of accusers) {
      const reveal = reveals?.find((r) => r.to === accuser);
      const share = reveal ? scalarFromBytes(reveal.share) : null;
      const valid = share !== null && shareMatchesCommitments(share, accuser, deal.commitments);
      // A valid reveal to this member is its share of that dealer, whatever became of the other complaints.
      if (valid && accuser === ledger.self) ledger.myShares.set(dealer, share!);
      if (valid) continue;
      ledger.exclude(
        dealer,
        reveal
          ? `answered the complaint of member ${accuser} with a share that fails its commitments`
          : `did not answer the complaint of member ${accuser}`,
      );
    }
  }
}
