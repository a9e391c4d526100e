/**
 * The packets one participant of the key ceremony keeps, and their bounds:
 * each sender's first packet per phase; up to two signed versions of each
 * dealer's deal (the second proves equivocation), from the deals themselves
 * and from the echo round, until the echo round closes; and the complaints
 * and justifications the reliable broadcast delivered (broadcast-ledger.ts),
 * until their own phase closes; and the first valid certificate (t members'
 * confirmations of one cluster id; there can be only one such id). And whose
 * packets close each phase. Pure: no I/O; the state machine says which phase
 * it is in and sends the relays this collects.
 */
import { bytesEqual, toHex } from '../common/bytes.js';
import { QuorumFenceError } from '../common/errors.js';
import { BroadcastLedger, type LedgerOutput } from './broadcast-ledger.js';
import type { CeremonyPhase, ProgressEvent } from './events.js';
import { decodePacket, PHASES, type BroadcastPhase, type Packet, type PacketPhase } from './packets.js';
import { senderOfDealer, type Proposal } from './proposal.js';

/** Where a phase stands against the current one: a packet of a phase already closed here is too late. */
function closed(phase: PacketPhase, current: CeremonyPhase): boolean {
  return PHASES.indexOf(current as PacketPhase) > PHASES.indexOf(phase);
}

/**
 * Whose packet closes a phase early (sender numbers): everyone accepts and answers complaints; the dealers deal;
 * the members do the rest.
 */
export function expectedSenders(proposal: Proposal, dealers: readonly number[], phase: PacketPhase): number[] {
  switch (phase) {
    case 'accept':
    case 'justification':
      return proposal.participants.map((p) => p.sender);
    case 'deal':
      return dealers.flatMap((d) => senderOfDealer(proposal, d) ?? []);
    case 'echo':
    case 'complaint':
    case 'confirm':
      return proposal.members.map((m) => m.index);
  }
}

export class PacketStore {
  readonly #proposal: Proposal;
  /** packets[phase][from]: each sender's first valid packet in each phase (complaints and justifications: delivered). */
  readonly packets = new Map<PacketPhase, Map<number, Packet>>(PHASES.map((p) => [p, new Map()]));
  /** Distinct signed versions of each dealer's deal (by sender), by body digest, at most two. */
  readonly dealVersions = new Map<number, Packet<'deal'>[]>();
  /** t or more members' confirmations of one cluster id, as another member sent them once it was done. */
  #certificate: Packet<'confirm'>[] | undefined;
  readonly #broadcasts: BroadcastLedger;

  /**
   * @param self this participant's sender number
   * @param votes whether it echoes and sends ready in the reliable broadcast (members do)
   */
  constructor(proposal: Proposal, self: number, votes: boolean) {
    this.#proposal = proposal;
    this.#broadcasts = new BroadcastLedger(proposal, self, votes);
  }

  /** The first valid certificate received: t or more confirmations of one cluster id, by distinct members. */
  get certificate(): readonly Packet<'confirm'>[] | undefined {
    return this.#certificate;
  }

  /** The packets kept for a phase, by sender. */
  of(phase: PacketPhase): ReadonlyMap<number, Packet> {
    return this.packets.get(phase)!;
  }

  /**
   * Keeps one authenticated packet, given the phase this participant is in. Echoes and readies to send collect in
   * `relay`; refusals of relayed packets become events.
   */
  store(packet: Packet, current: CeremonyPhase, relay: LedgerOutput, events: ProgressEvent[]): void {
    switch (packet.phase) {
      case 'complaint':
      case 'justification':
        this.#broadcasts.offer(packet as Packet<BroadcastPhase>, relay);
        return this.#takeDeliveries(current, relay, events);
      case 'relay':
        // Only members echo and send ready; a relay from anyone else counts for nothing.
        if (packet.from > this.#proposal.n) return;
        this.#broadcasts.relayed(packet.from, (packet as Packet<'relay'>).body, relay);
        return this.#takeDeliveries(current, relay, events);
      case 'certificate':
        return this.#noteCertificate(packet as Packet<'certificate'>, events);
      case 'deal':
        this.#noteDealVersion(packet as Packet<'deal'>, current);
        // Deals count only until the echo round closes.
        if (closed('echo', current)) return;
        break;
      case 'echo':
        if (!closed('echo', current)) this.#unpackEcho(packet as Packet<'echo'>, current, events);
        break;
      case 'accept':
      case 'confirm':
        break;
    }
    const bySender = this.packets.get(packet.phase as PacketPhase)!;
    if (!bySender.has(packet.from)) bySender.set(packet.from, packet);
  }

  #unpackEcho(packet: Packet<'echo'>, current: CeremonyPhase, events: ProgressEvent[]): void {
    for (const relayed of packet.body.deals) {
      try {
        const deal = decodePacket(relayed, this.#proposal);
        if (deal.phase === 'deal') this.#noteDealVersion(deal as Packet<'deal'>, current);
      } catch (error) {
        if (!(error instanceof QuorumFenceError)) throw error;
        events.push({ kind: 'refused', reason: `relayed by ${packet.from}: ${error.message}`, code: error.code });
      }
    }
  }

  /**
   * Keeps a certificate whose confirms all verify, come from distinct members and name one cluster id, t or more of
   * them. Once one is kept the others are not even checked: two ids with t confirmations each would need an honest
   * member to confirm both (docs/ceremony.md, R5), so any other valid one names the same id.
   */
  #noteCertificate(packet: Packet<'certificate'>, events: ProgressEvent[]): void {
    if (this.#certificate) return;
    const confirms: Packet<'confirm'>[] = [];
    try {
      for (const envelope of packet.body.confirms) {
        const confirm = decodePacket(envelope, this.#proposal);
        if (confirm.phase !== 'confirm' || confirm.from > this.#proposal.n)
          throw new QuorumFenceError('PROTOCOL_ERROR', "a certificate holds members' confirm packets only");
        confirms.push(confirm as Packet<'confirm'>);
      }
    } catch (error) {
      if (!(error instanceof QuorumFenceError)) throw error;
      events.push({ kind: 'refused', reason: `certificate from ${packet.from}: ${error.message}`, code: error.code });
      return;
    }
    const ids = new Set(confirms.map((c) => toHex(c.body.clusterId)));
    const senders = new Set(confirms.map((c) => c.from));
    if (ids.size !== 1 || senders.size !== confirms.length || confirms.length < this.#proposal.t) {
      events.push({
        kind: 'refused',
        reason: `certificate from ${packet.from}: not ${this.#proposal.t} distinct members' confirmations of one id`,
        code: 'PROTOCOL_ERROR',
      });
      return;
    }
    this.#certificate = confirms;
  }

  #noteDealVersion(deal: Packet<'deal'>, current: CeremonyPhase): void {
    if (closed('echo', current)) return;
    const versions = this.dealVersions.get(deal.from) ?? [];
    if (versions.length < 2 && !versions.some((v) => bytesEqual(v.bodyDigest, deal.bodyDigest))) versions.push(deal);
    this.dealVersions.set(deal.from, versions);
  }

  /**
   * Keeps the complaints and justifications the reliable broadcast delivered, until their phase closes here: one
   * delivered later counts for nothing (this member judged without it; docs/ceremony.md, "Reliable broadcast").
   */
  #takeDeliveries(current: CeremonyPhase, relay: LedgerOutput, events: ProgressEvent[]): void {
    for (const packet of relay.delivered.splice(0)) {
      if (closed(packet.phase, current)) continue;
      const bySender = this.packets.get(packet.phase)!;
      if (!bySender.has(packet.from)) bySender.set(packet.from, packet);
    }
    for (const refused of relay.refused.splice(0)) events.push({ kind: 'refused', ...refused });
  }
}
