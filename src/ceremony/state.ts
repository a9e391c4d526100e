/**
 * One member's side of the key ceremony as a state machine: inputs are
 * packets (bytes, untrusted) and clock ticks; outputs are packets to send and
 * progress events. No I/O, no timers, no clock of its own: the runner feeds it
 * time, so a test runs a whole ceremony on fake time. Randomness is drawn once
 * at construction.
 *
 * Phases (each ends when every member's packet for it is in, or at its
 * deadline on this member's own clock):
 *   accept         every member signs the proposal digest; all n are needed
 *   deal           each dealer sends commitments + one sealed share per member
 *   echo           each member relays every signed deal it received, so a
 *                  dealer that showed two versions is caught by every honest member
 *   complaint      each member names dealers whose share to it fails the Feldman check
 *   justification  each accused dealer reveals the disputed shares in the clear
 *   confirm        each member signs the resulting cluster id; t matching
 *                  signatures are needed, so honest members never keep two keys
 * Complaints and justifications go through a reliable broadcast (echo and
 * ready rounds, broadcast-ledger.ts): a member counts one only once it is
 * delivered, so honest members count the same ones.
 *
 * Roles. A member receives shares and keeps a result; in a fresh key every
 * member also deals. A reshare that removes replicas has outside dealers
 * (participants n+1..): old members not in the new set. They accept, deal,
 * and answer complaints against them like any dealer, send no echo,
 * complaint or confirmation, receive no share, and finish by counting the
 * members' confirmations (`dealt`), so their operator learns whether the new
 * set took the deal. Dealer numbers (old indices in a reshare) name deals,
 * complaints and the qualified set; sender numbers name packets.
 *
 * This file keeps the phases and what is sent; the packets kept and their
 * bounds are packet-store.ts's, which dealers qualify is decided in
 * qualification.ts, and the result drafted and the confirmations counted in
 * confirmation.ts.
 */
import { QuorumFenceError } from '../common/errors.js';
import type {
  CeremonyPhase,
  CeremonyResult,
  DealerOnlyResult,
  Outgoing,
  OutgoingRewrite,
  ProgressEvent,
} from './events.js';
import type { RandomSource } from '../crypto/random.js';
import type { DealingRule } from './dealing.js';
import type { NodeKey } from './node-key.js';
import {
  clusterSignatureMessage,
  decodePacket,
  encodePacket,
  PHASES,
  type BodyByPhase,
  type Packet,
  type PacketKind,
  type PacketPhase,
} from './packets.js';
import { emptyLedgerOutput, type LedgerOutput } from './broadcast-ledger.js';
import { expectedSenders, PacketStore } from './packet-store.js';
import { senderOfDealer, type Proposal } from './proposal.js';
import { settleDeals, settleJustifications, type QualificationLedger, type SettledDeal } from './qualification.js';
import { confirmDealing, confirmResult, draftOf, draftResult, type ResultDraft } from './confirmation.js';
import { ephemeralKey } from './share-box.js';
import { commit, evaluate, scalarToBytes, type Polynomial } from './vss.js';

export interface MemberOptions {
  readonly proposal: Proposal;
  readonly nodeKey: NodeKey;
  /** This participant's sender number: a member's index, or n+k for a reshare's k-th outside dealer. */
  readonly self: number;
  readonly rule: DealingRule;
  readonly random: RandomSource;
  /** Test-only: turns this member Byzantine. */
  readonly rewrite?: OutgoingRewrite;
}

export class CeremonyMember {
  readonly proposal: Proposal;
  readonly self: number;
  #phase: CeremonyPhase = 'accept';
  #phaseStartedAt = 0;
  #started = false;
  readonly #options: MemberOptions;
  /** The dealer number this participant deals under; undefined when it does not deal. */
  readonly #myDealer: number | undefined;
  /** A member receives shares and a result; an outside dealer only deals. */
  readonly #receives: boolean;
  readonly #polynomial: Polynomial;
  readonly #ephemeral = ephemeralKey();
  /** The packets kept: each sender's first per phase, deal versions, delivered complaints and justifications. */
  readonly #kept: PacketStore;
  /** Deals in force after the echo round, with their decoded commitments, by dealer number. */
  readonly #deals = new Map<number, SettledDeal>();
  readonly #excluded = new Map<number, string>();
  /** The share each dealer gave this member (after justifications replace disputed ones). */
  readonly #myShares = new Map<number, bigint>();
  #myComplaints: number[] = [];
  #result: CeremonyResult | undefined;
  #dealt: DealerOnlyResult | undefined;
  #resultDraft: ResultDraft | undefined;
  #abortReason: { reason: string; members: number[] } | undefined;

  constructor(options: MemberOptions) {
    this.#options = options;
    this.proposal = options.proposal;
    this.self = options.self;
    const me = options.proposal.participants[options.self - 1];
    if (!me) throw new QuorumFenceError('INVALID_ARGUMENT', `participant ${options.self} is not in the proposal`);
    this.#receives = me.receives;
    this.#myDealer = me.dealer !== undefined && options.rule.dealers.includes(me.dealer) ? me.dealer : undefined;
    if (!me.receives && this.#myDealer === undefined)
      throw new QuorumFenceError('INVALID_ARGUMENT', `outside dealer ${options.self} is not among the rule's dealers`);
    this.#polynomial =
      this.#myDealer !== undefined ? options.rule.polynomial(this.#myDealer, options.proposal.t, options.random) : [];
    this.#kept = new PacketStore(options.proposal, options.self, me.receives);
  }

  /** "member" receives a share; "dealer-only" is a reshare's outside dealer, which deals and receives nothing. */
  get role(): 'member' | 'dealer-only' {
    return this.#receives ? 'member' : 'dealer-only';
  }

  get phase(): CeremonyPhase {
    return this.#phase;
  }
  get result(): CeremonyResult | undefined {
    return this.#result;
  }
  /** A dealer-only participant's outcome once t members confirmed one result. */
  get dealt(): DealerOnlyResult | undefined {
    return this.#dealt;
  }
  get abort(): { reason: string; members: number[] } | undefined {
    return this.#abortReason;
  }

  /** The commitments of a dealer's deal in force after the echo round (public), for checks and audits. */
  dealCommitments(dealer: number): Uint8Array[] | undefined {
    return this.#deals.get(dealer)?.body.commitments;
  }

  /** Participants (sender numbers) whose packet for the current phase has not arrived. */
  missing(): number[] {
    if (this.#phase === 'done' || this.#phase === 'aborted') return [];
    const got = this.#kept.of(this.#phase);
    return this.#expected(this.#phase).filter((i) => !got.has(i));
  }

  /** Starts the accept phase. */
  start(now: number): { out: Outgoing[]; events: ProgressEvent[] } {
    const step = new Step();
    if (!this.#started) {
      this.#started = true;
      this.#enter('accept', now, step);
    }
    this.#advance(now, step);
    return this.#flush(step);
  }

  /** Feeds one frame from the network. Bad frames change nothing and yield a `refused` event. */
  receive(bytes: Uint8Array, now: number): { out: Outgoing[]; events: ProgressEvent[] } {
    const step = new Step();
    if (this.#phase === 'done' || this.#phase === 'aborted') return step;
    let packet: Packet;
    try {
      packet = decodePacket(bytes, this.proposal);
    } catch (error) {
      if (!(error instanceof QuorumFenceError)) throw error;
      step.events.push({ kind: 'refused', reason: error.message, code: error.code });
      return step;
    }
    this.#store(packet, step);
    this.#advance(now, step);
    return this.#flush(step);
  }

  /** Lets deadlines pass. */
  tick(now: number): { out: Outgoing[]; events: ProgressEvent[] } {
    const step = new Step();
    if (this.#started) this.#advance(now, step);
    return this.#flush(step);
  }

  /** Every participant: packets go to all of them (outside dealers read the complaints they must answer). */
  #everyone(): number[] {
    return this.proposal.participants.map((p) => p.sender);
  }

  /** The members: they receive shares, echo, complain and confirm. */
  #receivers(): number[] {
    return this.proposal.members.map((m) => m.index);
  }

  #senderOf(dealer: number): number | undefined {
    return senderOfDealer(this.proposal, dealer);
  }

  #expected(phase: PacketPhase): number[] {
    return expectedSenders(this.proposal, this.#options.rule.dealers, phase);
  }

  #store(packet: Packet, step: Step): void {
    this.#kept.store(packet, this.#phase, step.relay, step.events);
  }

  /** Sends this step's echoes and readies, in one relay packet to every participant. */
  #flush(step: Step): { out: Outgoing[]; events: ProgressEvent[] } {
    const { echoes, readies } = step.relay;
    if (echoes.length > 0 || readies.length > 0) {
      this.#broadcast('relay', { echoes: echoes.splice(0), readies: readies.splice(0) }, step);
    }
    return step;
  }

  #enter(phase: PacketPhase, now: number, step: Step): void {
    this.#phase = phase;
    this.#phaseStartedAt = now;
    step.events.push({ kind: 'phase', phase, at: now });
    const body = this.#bodyFor(phase);
    if (body !== null) this.#broadcast(phase, body, step);
  }

  #broadcast<P extends PacketKind>(phase: P, body: BodyByPhase[P], step: Step): void {
    const { proposal, nodeKey, rewrite } = this.#options;
    const sign = (message: Uint8Array) => nodeKey.sign(message);
    const plain = rewrite ? undefined : encodePacket(proposal, this.self, phase, body, sign);
    for (const to of this.#everyone()) {
      let bytes = plain;
      if (rewrite) {
        const changed = rewrite(phase, body, to, {
          polynomial: this.#polynomial,
          seal: (recipient, share) => this.#seal(recipient, share),
        });
        if (changed === null) continue;
        bytes = encodePacket(proposal, this.self, phase, changed, sign);
      }
      // Our own echoes and readies were counted when made, and our certificate is our result.
      if (to === this.self) {
        if (phase !== 'relay' && phase !== 'certificate') this.#store(decodePacket(bytes!, proposal), step);
      } else step.out.push({ to, bytes: bytes! });
    }
  }

  /** Sealed under the dealer number (a member's index in a fresh key), so a share opens only as that dealer's. */
  #seal(recipient: number, share: bigint): Uint8Array {
    const member = this.proposal.members[recipient - 1]!;
    const dealer = this.#myDealer ?? this.self;
    return this.#ephemeral.seal(member.encryptionKey, this.proposal.digest, dealer, recipient, scalarToBytes(share));
  }

  #bodyFor(phase: PacketPhase): BodyByPhase[PacketPhase] | null {
    switch (phase) {
      case 'accept':
        return {};
      case 'deal':
        if (this.#polynomial.length === 0) return null;
        return {
          commitments: commit(this.#polynomial),
          ephemeral: this.#ephemeral.publicKey,
          shares: this.#receivers().map((j) => this.#seal(j, evaluate(this.#polynomial, j))),
        };
      case 'echo':
        if (!this.#receives) return null;
        return { deals: [...this.#kept.dealVersions.values()].flat().map((p) => p.bytes) };
      case 'complaint':
        if (!this.#receives) return null;
        return { against: this.#myComplaints };
      case 'justification': {
        const mine = this.#myDealer;
        if (this.#polynomial.length === 0 || mine === undefined || !this.#deals.has(mine)) return { reveals: [] };
        const accusers = [...this.#kept.of('complaint').values()]
          .filter((p) => (p as Packet<'complaint'>).body.against.includes(mine))
          .map((p) => p.from);
        return { reveals: accusers.map((to) => ({ to, share: scalarToBytes(evaluate(this.#polynomial, to)) })) };
      }
      case 'confirm': {
        if (!this.#receives) return null;
        const draft = this.#resultDraft!;
        return {
          clusterId: draft.clusterId,
          qualified: draft.qualified,
          signature: this.#options.nodeKey.sign(clusterSignatureMessage(this.proposal.digest, draft.clusterId)),
        };
      }
    }
  }

  #deadline(): number {
    return (
      this.#phaseStartedAt + (this.#phase === 'accept' ? this.proposal.acceptTimeoutMs : this.proposal.phaseTimeoutMs)
    );
  }

  /** Closes every phase whose packets are all in or whose deadline passed; bounded by the phase count. */
  #advance(now: number, step: Step): void {
    for (let guard = 0; guard < PHASES.length + 1; guard++) {
      if (this.#phase === 'done' || this.#phase === 'aborted') return;
      const phase = this.#phase;
      const expected = this.#expected(phase);
      const got = this.#kept.of(phase);
      const missing = expected.filter((i) => !got.has(i));
      const byDeadline = now >= this.#deadline();
      // A certificate ends the confirm phase at once: no other cluster id can gather t confirmations.
      const certified = phase === 'confirm' && this.#kept.certificate !== undefined;
      if (missing.length > 0 && !byDeadline && !certified) return;
      step.events.push({
        kind: 'phase-closed',
        phase,
        received: [...got.keys()].sort((a, b) => a - b),
        missing,
        byDeadline,
      });
      this.#close(phase, missing, now, step);
    }
  }

  #fail(reason: string, members: number[], step: Step): void {
    this.#phase = 'aborted';
    this.#abortReason = { reason, members };
    this.#myShares.clear();
    this.#resultDraft = undefined;
    step.events.push({ kind: 'aborted', reason, members });
  }

  #exclude(dealer: number, reason: string, step: Step): void {
    if (this.#excluded.has(dealer)) return;
    this.#excluded.set(dealer, reason);
    step.events.push({ kind: 'excluded', dealer, reason });
  }

  #close(phase: PacketPhase, missing: number[], now: number, step: Step): void {
    switch (phase) {
      case 'accept':
        if (missing.length > 0) {
          return this.#fail(`members ${missing.join(', ')} did not accept the proposal in time`, missing, step);
        }
        return this.#enter('deal', now, step);
      case 'deal':
        return this.#enter('echo', now, step);
      case 'echo':
        this.#settleDeals(step);
        return this.#enter('complaint', now, step);
      case 'complaint':
        return this.#enter('justification', now, step);
      case 'justification':
        this.#settleJustifications(step);
        // An outside dealer has no result of its own; it waits for the members' confirmations.
        if (this.#receives && !this.#draftResult(step)) return;
        return this.#enter('confirm', now, step);
      case 'confirm':
        return this.#receives ? this.#finish(step) : this.#finishDealing(step);
    }
  }

  /** What qualification.ts reads and writes of this participant's state. */
  #qualification(step: Step): QualificationLedger {
    return {
      proposal: this.proposal,
      self: this.self,
      receives: this.#receives,
      rule: this.#options.rule,
      nodeKey: this.#options.nodeKey,
      deals: this.#deals,
      excluded: this.#excluded,
      myShares: this.#myShares,
      senderOf: (dealer) => this.#senderOf(dealer),
      exclude: (dealer, reason) => this.#exclude(dealer, reason, step),
    };
  }

  #settleDeals(step: Step): void {
    this.#myComplaints = settleDeals(this.#qualification(step), this.#kept.dealVersions);
  }

  #settleJustifications(step: Step): void {
    settleJustifications(
      this.#qualification(step),
      this.#kept.of('complaint'),
      this.#kept.of('justification'),
      this.#myComplaints,
    );
  }

  #draftResult(step: Step): boolean {
    const drafted = draftResult(this.proposal, this.#options.rule, this.#deals, this.#excluded, this.#myShares);
    if (!drafted.ok) {
      this.#fail(drafted.reason, drafted.members, step);
      return false;
    }
    this.#resultDraft = drafted.draft;
    return true;
  }

  /** The confirmations received, and those of a certificate another member sent. */
  #confirms(): Packet<'confirm'>[] {
    return [...(this.#kept.of('confirm').values() as Iterable<Packet<'confirm'>>), ...(this.#kept.certificate ?? [])];
  }

  #finish(step: Step): void {
    const { proposal } = this;
    const rule = this.#options.rule;
    const confirmed = confirmResult(
      proposal,
      this.#resultDraft!,
      this.#confirms(),
      this.#receivers(),
      this.#excluded,
      rule.dealers,
      (qualified) => draftOf(proposal, rule, this.#deals, this.#myShares, qualified),
    );
    if (!confirmed.ok) return this.#fail(confirmed.reason, confirmed.members, step);
    this.#phase = 'done';
    this.#result = confirmed.result;
    this.#resultDraft = undefined;
    const { clusterId } = confirmed.result.cluster;
    step.events.push({ kind: 'done', clusterId, qualified: confirmed.result.qualified, adopted: confirmed.adopted });
    // Members still in the confirm phase end at once with these t confirmations, even ones not sent to them.
    const certificate = { confirms: confirmed.confirms.map((p) => p.bytes) };
    this.#broadcast('certificate', certificate, step);
  }

  #finishDealing(step: Step): void {
    const confirms = this.#confirms();
    const confirmed = confirmDealing(this.proposal, this.#myDealer!, confirms, this.#receivers(), this.#excluded);
    if (!confirmed.ok) return this.#fail(confirmed.reason, confirmed.members, step);
    this.#phase = 'done';
    this.#dealt = confirmed.dealt;
    step.events.push({ kind: 'done', clusterId: confirmed.dealt.clusterId, qualified: confirmed.dealt.qualified });
  }
}

class Step {
  readonly out: Outgoing[] = [];
  readonly events: ProgressEvent[] = [];
  /** The reliable broadcast's output in this step: relayed at its end, deliveries taken at once. */
  readonly relay: LedgerOutput = emptyLedgerOutput();
}
