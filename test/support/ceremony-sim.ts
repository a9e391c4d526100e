/**
 * A whole ceremony in memory on fake time: n members, a queue of frames
 * delivered in a seeded order, a manual clock. Used by the pure-core property
 * tests; the networked tests use real sockets instead.
 */
import { jointFeldman, type DealingRule } from '../../src/ceremony/dealing.js';
import { generateNodeKey, type NodeKey } from '../../src/ceremony/node-key.js';
import { makeProposal, type Proposal } from '../../src/ceremony/proposal.js';
import type { OutgoingRewrite, ProgressEvent } from '../../src/ceremony/events.js';
import { CeremonyMember } from '../../src/ceremony/state.js';
import { systemRandom } from '../../src/crypto/random.js';
import { toHex } from '../../src/common/bytes.js';

export interface SimulatedCeremony {
  proposal: Proposal;
  /** Every participant by sender number - 1: the n members, then a reshare's outside dealers. */
  members: CeremonyMember[];
  nodeKeys: NodeKey[];
  events: ProgressEvent[][];
  /** Fake milliseconds it took. */
  elapsedMs: number;
}

export function simulateCeremony(
  n: number,
  options: {
    rewrites?: Map<number, OutgoingRewrite>;
    /** Picks which queued frame goes next (default: first in, first out). */
    pick?: (queueLength: number) => number;
    /** Extra frames injected to each member at start. */
    inject?: Uint8Array[];
    /** Holds a frame back: the fake time before which it is not delivered (undefined: deliver as usual). */
    hold?: (from: number, to: number, bytes: Uint8Array) => number | undefined;
    phaseTimeoutMs?: number;
    /** Each participant's dealing rule (default: joint Feldman); a reshare passes its own. */
    rule?: (self: number, proposal: Proposal) => DealingRule;
    /**
     * A reshare's terms; `outside` names old indices dealing from outside the new set, each a participant
     * n+1.. after the members, with a node key of its own.
     */
    reshare?: { dealers: number[]; outside?: number[] };
  } = {},
): SimulatedCeremony {
  const f = (n - 1) / 3;
  const outside = options.reshare?.outside ?? [];
  const nodeKeys = Array.from({ length: n + outside.length }, () => generateNodeKey());
  const proposal = makeProposal(
    nodeKeys.slice(0, n).map((k, i) => ({
      nodeKey: k.nodeKey,
      encryptionKey: k.encryptionKey,
      endpoint: `ws://127.0.0.1:${7101 + i}`,
      ceremonyEndpoint: `ws://127.0.0.1:${7201 + i}`,
    })),
    f,
    {
      acceptTimeoutMs: 5000,
      phaseTimeoutMs: options.phaseTimeoutMs ?? 1000,
      ...(options.reshare
        ? {
            reshare: {
              oldClusterId: '00'.repeat(32),
              oldMembershipVersion: 0,
              dealers: options.reshare.dealers,
              ...(outside.length > 0
                ? {
                    outsideDealers: outside.map((oldIndex, k) => ({
                      oldIndex,
                      nodeKey: toHex(nodeKeys[n + k]!.nodeKey),
                      ceremonyEndpoint: `ws://127.0.0.1:${7301 + k}`,
                    })),
                  }
                : {}),
            },
          }
        : {}),
    },
  );
  const members = nodeKeys.map(
    (nodeKey, k) =>
      new CeremonyMember({
        proposal,
        nodeKey,
        self: k + 1,
        rule: options.rule ? options.rule(k + 1, proposal) : jointFeldman(n, proposal.t),
        random: systemRandom,
        rewrite: options.rewrites?.get(k + 1),
      }),
  );
  const events: ProgressEvent[][] = members.map(() => []);
  const queue: { to: number; bytes: Uint8Array; notBefore: number }[] = [];
  let now = 0;
  const take = (k: number, step: { out: { to: number; bytes: Uint8Array }[]; events: ProgressEvent[] }) => {
    for (const o of step.out) queue.push({ ...o, notBefore: options.hold?.(k + 1, o.to, o.bytes) ?? 0 });
    events[k]!.push(...step.events);
  };
  members.forEach((m, k) => take(k, m.start(now)));
  for (const frame of options.inject ?? []) members.forEach((m, k) => take(k, m.receive(frame, now)));
  const finished = () => members.every((m) => m.phase === 'done' || m.phase === 'aborted');
  // Bounded: at most n² frames per phase, and time moves only when the queue is empty.
  for (let round = 0; round < 100_000 && !finished(); round++) {
    const ready = queue.filter((f) => f.notBefore <= now);
    if (ready.length === 0) {
      now += 100;
      members.forEach((m, k) => take(k, m.tick(now)));
      continue;
    }
    const chosen = ready[options.pick ? options.pick(ready.length) % ready.length : 0]!;
    const [frame] = queue.splice(queue.indexOf(chosen), 1);
    take(frame!.to - 1, members[frame!.to - 1]!.receive(frame!.bytes, now));
  }
  return { proposal, members, nodeKeys, events, elapsedMs: now };
}
