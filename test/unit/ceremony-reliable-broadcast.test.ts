/**
 * The reliable broadcast's thresholds and single steps
 * (src/ceremony/reliable-broadcast.ts), and the ceremony's ledger of
 * broadcasts (src/ceremony/broadcast-ledger.ts): what it echoes, when it is
 * ready, what it delivers, and what it refuses.
 */
import { describe, expect, it } from 'vitest';
import {
  broadcastQuorums,
  EMPTY_INSTANCE,
  stepBroadcast,
  type BroadcastMessage,
  type BroadcastRole,
  type InstanceState,
} from '../../src/ceremony/reliable-broadcast.js';
import { BroadcastLedger, emptyLedgerOutput } from '../../src/ceremony/broadcast-ledger.js';
import { generateNodeKey } from '../../src/ceremony/node-key.js';
import { decodePacket, encodePacket, type BodyByPhase, type PacketKind } from '../../src/ceremony/packets.js';
import { makeProposal } from '../../src/ceremony/proposal.js';

function feed(role: BroadcastRole, messages: BroadcastMessage[]) {
  let state: InstanceState = EMPTY_INSTANCE;
  const outgoing: { kind: string; value: string }[] = [];
  const delivered: string[] = [];
  for (const m of messages) {
    const step = stepBroadcast(role, state, m);
    state = step.state;
    outgoing.push(...step.outgoing);
    if (step.delivered) delivered.push(step.delivered);
  }
  return { state, outgoing, delivered };
}

const four: BroadcastRole = { quorums: broadcastQuorums(4, 1), isVoter: (i) => i >= 1 && i <= 4, votes: true };
const echo = (from: number, value = 'v'): BroadcastMessage => ({ kind: 'echo', from, value });
const ready = (from: number, value = 'v'): BroadcastMessage => ({ kind: 'ready', from, value });

describe('reliable broadcast thresholds', () => {
  it('echo ⌈(n+f+1)/2⌉, amplify f+1, deliver 2f+1', () => {
    expect(broadcastQuorums(4, 1)).toEqual({ echo: 3, amplify: 2, deliver: 3 });
    expect(broadcastQuorums(7, 2)).toEqual({ echo: 5, amplify: 3, deliver: 5 });
    expect(broadcastQuorums(31, 10)).toEqual({ echo: 21, amplify: 11, deliver: 21 });
    // More voters than 3f+1: the echo quorum still makes any two echo quorums share an honest voter.
    expect(broadcastQuorums(5, 1)).toEqual({ echo: 4, amplify: 2, deliver: 3 });
  });

  it('refuses too few voters for f', () => {
    expect(() => broadcastQuorums(3, 1)).toThrow(RangeError);
    expect(() => broadcastQuorums(4, -1)).toThrow(RangeError);
    expect(() => broadcastQuorums(4.5, 1)).toThrow(RangeError);
  });
});

describe('reliable broadcast steps', () => {
  it('echoes the first value seen, once', () => {
    const { outgoing } = feed(four, [
      { kind: 'initial', value: 'v' },
      { kind: 'initial', value: 'w' },
    ]);
    expect(outgoing).toEqual([{ kind: 'echo', value: 'v' }]);
  });

  it('sends ready on 2f+1 echoes of one value, not on 2f+1 echoes split between two', () => {
    expect(feed(four, [echo(1), echo(2), echo(3, 'w')]).outgoing).toEqual([]);
    expect(feed(four, [echo(1), echo(2), echo(3)]).outgoing).toEqual([{ kind: 'ready', value: 'v' }]);
  });

  it("counts a voter's first echo and first ready only", () => {
    expect(feed(four, [echo(1), echo(1), echo(1)]).outgoing).toEqual([]);
    expect(feed(four, [ready(1), ready(1), ready(1)]).delivered).toEqual([]);
    expect(feed(four, [echo(1), echo(2, 'w'), echo(2), echo(3)]).outgoing).toEqual([]);
  });

  it('amplifies on f+1 readies and delivers on 2f+1, once', () => {
    const { outgoing, delivered } = feed(four, [ready(1), ready(2), ready(3), ready(4)]);
    expect(outgoing).toEqual([{ kind: 'ready', value: 'v' }]);
    expect(delivered).toEqual(['v']);
  });

  it('ignores anyone who is not a voter', () => {
    expect(feed(four, [echo(0), echo(5), echo(6), ready(5), ready(6), ready(7)]).state).toBe(EMPTY_INSTANCE);
  });

  it('a participant that does not vote sends nothing but still delivers', () => {
    const listener: BroadcastRole = { ...four, votes: false };
    const { outgoing, delivered } = feed(listener, [
      { kind: 'initial', value: 'v' },
      echo(1),
      echo(2),
      echo(3),
      ready(1),
      ready(2),
      ready(3),
    ]);
    expect(outgoing).toEqual([]);
    expect(delivered).toEqual(['v']);
  });

  it('does not change the state it is given', () => {
    const before = feed(four, [echo(1)]).state;
    const copy = new Map(before.echoes);
    stepBroadcast(four, before, echo(2));
    expect(before.echoes).toEqual(copy);
  });
});

describe('the ceremony ledger of broadcasts', () => {
  const keys = Array.from({ length: 4 }, () => generateNodeKey());
  const proposal = makeProposal(
    keys.map((k, i) => ({
      nodeKey: k.nodeKey,
      encryptionKey: k.encryptionKey,
      endpoint: `ws://127.0.0.1:${7101 + i}`,
      ceremonyEndpoint: `ws://127.0.0.1:${7201 + i}`,
    })),
    1,
  );
  const packet = <P extends PacketKind>(from: number, phase: P, body: BodyByPhase[P], signer = from) =>
    encodePacket(proposal, from, phase, body, (m) => keys[signer - 1]!.sign(m));
  const complaint = packet(2, 'complaint', { against: [3] });

  it('echoes a complaint once, is ready on three echoes, delivers on three readies', () => {
    const ledger = new BroadcastLedger(proposal, 1, true);
    const out = emptyLedgerOutput();
    ledger.offer(decodePacket(complaint, proposal) as never, out);
    expect(out.echoes).toEqual([complaint]);
    ledger.relayed(2, { echoes: [complaint], readies: [] }, out);
    expect(out.readies).toEqual([]);
    ledger.relayed(3, { echoes: [complaint], readies: [] }, out);
    // Our own echo, 2's and 3's: ready.
    expect(out.readies).toEqual([complaint]);
    ledger.relayed(4, { echoes: [], readies: [complaint] }, out);
    expect(out.delivered).toEqual([]);
    ledger.relayed(2, { echoes: [], readies: [complaint] }, out);
    expect(out.delivered.map((p) => [p.phase, p.from, p.body])).toEqual([['complaint', 2, { against: [3] }]]);
    expect(out.echoes).toEqual([complaint]);
    expect(out.refused).toEqual([]);
  });

  it('an outside listener (votes false) sends nothing and delivers on three readies of members', () => {
    const ledger = new BroadcastLedger(proposal, 1, false);
    const out = emptyLedgerOutput();
    for (const from of [2, 3, 4]) ledger.relayed(from, { echoes: [complaint], readies: [complaint] }, out);
    expect(out.echoes).toEqual([]);
    expect(out.readies).toEqual([]);
    expect(out.delivered).toHaveLength(1);
  });

  it('refuses relayed envelopes that are forged (UNAUTHENTICATED) or not broadcast (PROTOCOL_ERROR), changing nothing', () => {
    const ledger = new BroadcastLedger(proposal, 1, true);
    const out = emptyLedgerOutput();
    const forged = packet(2, 'complaint', { against: [1] }, 4);
    const accept = packet(2, 'accept', {});
    ledger.relayed(4, { echoes: [forged, accept, new Uint8Array([1, 2, 3])], readies: [] }, out);
    expect(out.refused.map((r) => r.code)).toEqual(['UNAUTHENTICATED', 'PROTOCOL_ERROR', 'PROTOCOL_ERROR']);
    expect(out.echoes).toEqual([]);
    expect(ledger.instanceState('complaint', 2)).toBeUndefined();
  });

  it('keeps no instance for a sender that sends none: a complaint from beyond the members', () => {
    const ledger = new BroadcastLedger(proposal, 1, true);
    expect(ledger.instanceState('complaint', 5)).toBeUndefined();
    const out = emptyLedgerOutput();
    ledger.relayed(2, { echoes: [complaint], readies: [] }, out);
    expect(ledger.instanceState('complaint', 2)?.echoes.get(2)).toBeDefined();
  });
});
