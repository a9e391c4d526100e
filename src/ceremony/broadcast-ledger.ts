/**
 * The reliable broadcasts of one participant of the key ceremony: one
 * instance per member's complaint and one per participant's justification
 * (reliable-broadcast.ts runs each). Signed complaint and justification
 * packets come in directly from their sender or inside other members'
 * relays; the ledger checks each once, feeds its instance, and returns the
 * echoes and readies to relay and the packets delivered. A value is the
 * SHA-256 of a signed body, so a relay can only carry what the sender signed.
 *
 * Bounded by the proposal: instances exist only for real senders, and each
 * keeps only the values that its first sight or some voter's first echo or
 * first ready names (at most 2n+1). Pure: no I/O; the state machine sends
 * what it returns.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { toHex } from '../common/bytes.js';
import { BoundedMap } from '../common/bounded-map.js';
import { QuorumFenceError } from '../common/errors.js';
import { decodePacket, type BroadcastPhase, type Packet, type RelayBody } from './packets.js';
import type { Proposal } from './proposal.js';
import {
  broadcastQuorums,
  EMPTY_INSTANCE,
  stepBroadcast,
  type BroadcastMessage,
  type BroadcastRole,
  type InstanceState,
} from './reliable-broadcast.js';

/** What one input produced: what to relay to every participant, what was delivered, and what was refused. */
export interface LedgerOutput {
  readonly echoes: Uint8Array[];
  readonly readies: Uint8Array[];
  readonly delivered: Packet<BroadcastPhase>[];
  readonly refused: { reason: string; code: string }[];
}

export function emptyLedgerOutput(): LedgerOutput {
  return { echoes: [], readies: [], delivered: [], refused: [] };
}

interface Instance {
  state: InstanceState;
  /** The signed packets the state names, by value (hex SHA-256 of the body). */
  readonly values: Map<string, Packet<BroadcastPhase>>;
}

function isBroadcastPhase(phase: string): phase is BroadcastPhase {
  return phase === 'complaint' || phase === 'justification';
}

function mentions(state: InstanceState, value: string): boolean {
  if (state.echoed === value || state.readied === value || state.delivered === value) return true;
  for (const v of state.echoes.values()) if (v === value) return true;
  for (const v of state.readies.values()) if (v === value) return true;
  return false;
}

export class BroadcastLedger {
  readonly #proposal: Proposal;
  readonly #self: number;
  readonly #role: BroadcastRole;
  readonly #instances = new Map<string, Instance>();
  /** Relayed envelopes already checked, by the SHA-256 of their bytes: honest relays repeat the same bytes. */
  readonly #checked: BoundedMap<string, Packet<BroadcastPhase>>;

  /**
   * @param self this participant's sender number
   * @param votes whether it echoes and sends ready (members do; a reshare's outside dealer only listens)
   */
  constructor(proposal: Proposal, self: number, votes: boolean) {
    this.#proposal = proposal;
    this.#self = self;
    this.#role = {
      quorums: broadcastQuorums(proposal.n, proposal.f),
      isVoter: (from) => Number.isInteger(from) && from >= 1 && from <= proposal.n,
      votes,
    };
    // Each instance's values, twice over: room for every honest value while Byzantine variants come and go.
    this.#checked = new BoundedMap(4 * (proposal.n + proposal.participants.length));
  }

  /** The instance of a sender's broadcast in a phase; undefined when that sender sends none there. */
  #instance(phase: BroadcastPhase, from: number): Instance | undefined {
    // Members complain; every participant justifies (an outside dealer answers the complaints against it).
    const senders = phase === 'complaint' ? this.#proposal.n : this.#proposal.participants.length;
    if (from < 1 || from > senders) return undefined;
    const key = `${phase}:${from}`;
    let instance = this.#instances.get(key);
    if (!instance) {
      instance = { state: EMPTY_INSTANCE, values: new Map() };
      this.#instances.set(key, instance);
    }
    return instance;
  }

  /** A signed complaint or justification, seen directly or relayed: its first sight makes a voter echo it. */
  offer(packet: Packet<BroadcastPhase>, out: LedgerOutput): void {
    this.#apply(packet, { kind: 'initial', value: toHex(packet.bodyDigest) }, out);
  }

  /** Another member's relay: each envelope it echoes or is ready for counts as that member's vote. */
  relayed(from: number, body: RelayBody, out: LedgerOutput): void {
    for (const [kind, envelopes] of [
      ['echo', body.echoes],
      ['ready', body.readies],
    ] as const) {
      for (const envelope of envelopes) {
        const packet = this.#check(envelope, from, out);
        if (!packet) continue;
        const value = toHex(packet.bodyDigest);
        this.#apply(packet, { kind: 'initial', value }, out);
        this.#apply(packet, { kind, from, value }, out);
      }
    }
  }

  /** A relayed envelope, authenticated once: it must be a complaint or justification its sender signed. */
  #check(envelope: Uint8Array, relayer: number, out: LedgerOutput): Packet<BroadcastPhase> | undefined {
    const id = toHex(sha256(envelope));
    const known = this.#checked.get(id);
    if (known) return known;
    try {
      const packet = decodePacket(envelope, this.#proposal);
      if (!isBroadcastPhase(packet.phase)) {
        out.refused.push({
          reason: `relayed by ${relayer}: a ${packet.phase} packet is not broadcast`,
          code: 'PROTOCOL_ERROR',
        });
        return undefined;
      }
      this.#checked.set(id, packet as Packet<BroadcastPhase>);
      return packet as Packet<BroadcastPhase>;
    } catch (error) {
      if (!(error instanceof QuorumFenceError)) throw error;
      out.refused.push({ reason: `relayed by ${relayer}: ${error.message}`, code: error.code });
      return undefined;
    }
  }

  /** Runs one message through the packet's instance, and this participant's own echoes and readies after it. */
  #apply(packet: Packet<BroadcastPhase>, message: BroadcastMessage, out: LedgerOutput): void {
    const instance = this.#instance(packet.phase, packet.from);
    if (!instance) return;
    const pending: BroadcastMessage[] = [message];
    // Each step sends at most one echo and one ready per instance, each applied to ourselves once: bounded.
    for (let guard = 0; guard < 8 && pending.length > 0; guard++) {
      const next = pending.shift()!;
      const step = stepBroadcast(this.#role, instance.state, next);
      if (step.state === instance.state) continue;
      instance.state = step.state;
      if (!instance.values.has(next.value)) instance.values.set(next.value, packet);
      for (const sent of step.outgoing) {
        (sent.kind === 'echo' ? out.echoes : out.readies).push(instance.values.get(sent.value)!.bytes);
        pending.push({ kind: sent.kind, from: this.#self, value: sent.value });
      }
      if (step.delivered !== undefined) out.delivered.push(instance.values.get(step.delivered)!);
    }
    // Keep only the values the state still names.
    for (const value of instance.values.keys()) if (!mentions(instance.state, value)) instance.values.delete(value);
  }

  /** The state of a sender's instance, for tests and audits. */
  instanceState(phase: BroadcastPhase, from: number): InstanceState | undefined {
    return this.#instances.get(`${phase}:${from}`)?.state;
  }
}
