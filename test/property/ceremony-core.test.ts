/**
 * The ceremony's pure core: with every member honest, in any delivery order,
 * every member ends with the same cluster, whose group key is the sum of the
 * qualified dealers' constant commitments, whose public shares match the
 * commitments, and whose shares make tokens that verify.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { parseCluster } from '../../src/cluster/description.js';
import { parseReplicaKey, replicaKeyJson } from '../../src/cluster/replica-key.js';
import { groupKeyOf } from '../../src/ceremony/dealing.js';
import { decodeCommitments } from '../../src/ceremony/vss.js';
import { toHex } from '../../src/common/bytes.js';
import { loadBackend } from '../../src/crypto/load.js';
import { combinePartials } from '../../src/crypto/threshold.js';
import { encodeToken, verifyToken } from '../../src/token/admission-token.js';
import { grantMessage, makeGrant } from '../../src/token/grant.js';
import { ceremonyBehaviour, type CeremonyBehaviour } from '../../src/testing/ceremony-byzantine.js';
import { simulateCeremony } from '../support/ceremony-sim.js';
import { ceremonyCodec } from '../../src/ceremony/packets.js';
import type { OutgoingRewrite } from '../../src/ceremony/events.js';

const backend = loadBackend('blst');

/**
 * Each run is a whole ceremony of several members: 10-50 s on an idle 2-core machine, and three to six
 * times that while other test files load the cores. A bound on a hung run, not a timed assertion.
 */
const CEREMONY_PROPERTY_TIMEOUT_MS = 300_000;

/**
 * A ceremony of n members whose last f members act out `behaviour`, delivered in the order `choices` picks;
 * checks that every honest member finished with the same key and the same qualified set.
 */
function honestAgreeWithByzantine(n: number, behaviour: CeremonyBehaviour, choices: readonly number[]) {
  const f = (n - 1) / 3;
  const byzantine = Array.from({ length: f }, (_, k) => n - k);
  let k = 0;
  const sim = simulateCeremony(n, {
    rewrites: new Map(byzantine.map((b) => [b, ceremonyBehaviour(behaviour, b, n)])),
    pick: () => choices[k++ % choices.length]!,
  });
  const honest = sim.members.filter((m) => !byzantine.includes(m.self));
  expect(honest.map((m) => m.phase)).toEqual(honest.map(() => 'done'));
  expect(new Set(honest.map((m) => m.result!.cluster.clusterId)).size).toBe(1);
  expect(new Set(honest.map((m) => m.result!.qualified.join(','))).size).toBe(1);
  return { sim, byzantine, honest };
}

describe('ceremony core: honest members agree on one key', { timeout: CEREMONY_PROPERTY_TIMEOUT_MS }, () => {
  it('any delivery order: same cluster everywhere, group key = Σ constant commitments, shares match, a token verifies', () => {
    fc.assert(
      fc.property(fc.constantFrom(4, 7), fc.array(fc.nat(), { minLength: 1, maxLength: 50 }), (n, choices) => {
        let k = 0;
        const sim = simulateCeremony(n, { pick: () => choices[k++ % choices.length]! });
        const results = sim.members.map((m) => m.result);
        expect(results.every((r) => r !== undefined)).toBe(true);
        const ids = new Set(results.map((r) => r!.cluster.clusterId));
        expect(ids.size).toBe(1);
        const first = results[0]!;
        expect(first.qualified).toEqual(Array.from({ length: n }, (_, i) => i + 1));
        expect(first.signatures.length).toBe(n);
        // Group key = Σ of the qualified dealers' constant commitments, from the deals themselves.
        const dealVectors = first.qualified.map((dealer) => {
          const deal = sim.members[0]!.dealCommitments(dealer)!;
          return decodeCommitments(deal, sim.proposal.t);
        });
        expect(first.cluster.groupPublicKey).toBe(toHex(groupKeyOf(dealVectors)));
        // parseCluster checks every public share against the commitments and recomputes the id.
        const cluster = parseCluster(first.cluster, { backend });
        const keys = results.map((r, i) =>
          parseReplicaKey(
            replicaKeyJson(cluster.idHex, {
              index: i + 1,
              scaledSecretShare: r!.scaledSecretShare,
              publicKeyShare: new Uint8Array(),
            }),
            cluster,
          ),
        );
        const grant = makeGrant({
          clusterId: cluster.id,
          resource: 'orders',
          epoch: 1n,
          holder: new Uint8Array(32).fill(9),
        });
        const signers = keys.slice(n - sim.proposal.t);
        const signature = combinePartials(
          backend,
          n,
          signers.map((key) => ({ index: key.index, signature: backend.sign(key.secretKey, grantMessage(grant)) })),
        )!;
        expect(verifyToken(encodeToken(grant, signature), cluster).ok).toBe(true);
      }),
      { numRuns: 8 },
    );
  });
});

describe(
  'ceremony core: f Byzantine members never leave honest members with two keys',
  { timeout: CEREMONY_PROPERTY_TIMEOUT_MS },
  () => {
    const cheating: Record<string, RegExp | null> = {
      'wrong-share': /did not answer/,
      'wrong-share-justified': null,
      'bad-commitments': /complaint/,
      'two-deals': /equivocated/,
      'false-complaint': null,
      'bad-justification': /fails its commitments/,
      'missing-justification': /did not answer/,
      'silent-after-accept': /sent no deal/,
    };
    it('any behaviour, any delivery order: honest members agree (same qualified set and key) and cheating dealers are excluded and named', () => {
      fc.assert(
        fc.property(
          fc.constantFrom(4, 7),
          fc.constantFrom(...(Object.keys(cheating) as CeremonyBehaviour[])),
          fc.array(fc.nat(), { minLength: 1, maxLength: 50 }),
          (n, behaviour, choices) => {
            // With these behaviours (each sent alike to everyone, or caught by the echo round) all honest members finish.
            const { byzantine, honest } = honestAgreeWithByzantine(n, behaviour, choices);
            const reason = cheating[behaviour];
            for (const m of honest) {
              for (const b of byzantine) {
                if (reason) expect(m.result!.excluded.find((e) => e.dealer === b)?.reason).toMatch(reason);
                else expect(m.result!.qualified).toContain(b);
              }
            }
          },
        ),
        { numRuns: 12 },
      );
    });

    it('f+1 members silent after accepting: every honest member aborts, naming them, and keeps no result', () => {
      for (const n of [4, 7]) {
        const f = (n - 1) / 3;
        const silent = Array.from({ length: f + 1 }, (_, k) => n - k).sort((a, b) => a - b);
        const sim = simulateCeremony(n, {
          rewrites: new Map(silent.map((b) => [b, ceremonyBehaviour('silent-after-accept', b, n)])),
        });
        for (const m of sim.members.filter((x) => !silent.includes(x.self))) {
          expect(m.phase).toBe('aborted');
          expect(m.result).toBeUndefined();
          expect(m.abort!.members).toEqual(silent);
        }
        // Bounded by the deadlines: accept closes at once, the other phases at most one timeout each.
        expect(sim.elapsedMs).toBeLessThanOrEqual(5 * sim.proposal.phaseTimeoutMs + 200);
      }
    });
  },
);

describe(
  'ceremony core: complaints and justifications are reliably broadcast',
  { timeout: CEREMONY_PROPERTY_TIMEOUT_MS },
  () => {
    // Each splits what honest members are shown and relays nothing itself. Whether the Byzantine dealers qualify:
    const splitting: Record<string, 'qualified' | 'either'> = {
      // Two versions (the victim's is empty): delivered and answered everywhere, or delivered nowhere.
      'selective-complaint': 'qualified',
      // The victim (an honest dealer) hears of the complaint through the bystander's relay and answers it.
      'complaint-to-minority': 'qualified',
      // The reveal shown to the victim alone reaches everyone through the victim's relay.
      'justification-to-victim': 'qualified',
      // Either version may be delivered, or neither (then the dealer did not answer): the same everywhere.
      'two-justifications': 'either',
    };
    it('a complaint or justification shown to some members only, or two versions of one: every honest member finishes with the same qualified set and key', () => {
      fc.assert(
        fc.property(
          fc.constantFrom(4, 7),
          fc.constantFrom(...(Object.keys(splitting) as CeremonyBehaviour[])),
          fc.array(fc.nat(), { minLength: 1, maxLength: 50 }),
          (n, behaviour, choices) => {
            const { sim, byzantine, honest } = honestAgreeWithByzantine(n, behaviour, choices);
            // Never two keys (R5): the one key was confirmed by t members.
            for (const m of honest) expect(m.result!.signatures.length).toBeGreaterThanOrEqual(sim.proposal.t);
            if (splitting[behaviour] === 'qualified')
              for (const b of byzantine) expect(honest[0]!.result!.qualified).toContain(b);
          },
        ),
        { numRuns: 12 },
      );
    });
  },
);

describe(
  'ceremony core: a member that drafted another result takes the one t members confirmed',
  { timeout: CEREMONY_PROPERTY_TIMEOUT_MS },
  () => {
    it("a Byzantine member's accept reaches member 3 late and its confirmation never does: the others drop 3 as a dealer and finish; 3 takes their result from their certificate and holds a share of that key", () => {
      fc.assert(
        fc.property(fc.array(fc.nat(), { minLength: 1, maxLength: 50 }), (choices) => {
          let k = 0;
          const late: OutgoingRewrite = (phase, body, recipient) =>
            phase === 'confirm' && recipient === 3 ? null : body;
          const sim = simulateCeremony(4, {
            rewrites: new Map([[4, late]]),
            // Member 4's accept reaches member 3 after the others' deal deadline (1 s of fake time).
            hold: (from, to, bytes) =>
              from === 4 && to === 3 && (ceremonyCodec.unpack(bytes) as { p: number }).p === 0 ? 2500 : undefined,
            pick: () => choices[k++ % choices.length]!,
          });
          const honest = sim.members.slice(0, 3);
          expect(honest.map((m) => m.phase)).toEqual(['done', 'done', 'done']);
          const ids = new Set(honest.map((m) => m.result!.cluster.clusterId));
          expect(ids.size).toBe(1);
          expect(honest.map((m) => m.result!.qualified)).toEqual([
            [1, 2, 4],
            [1, 2, 4],
            [1, 2, 4],
          ]);
          expect(sim.events[2]!.some((e) => e.kind === 'done' && e.adopted === true)).toBe(true);
          // Member 3's share is a share of that key: its public share matches.
          const cluster = parseCluster(honest[2]!.result!.cluster, { backend });
          const key = parseReplicaKey(
            replicaKeyJson(cluster.idHex, {
              index: 3,
              scaledSecretShare: honest[2]!.result!.scaledSecretShare,
              publicKeyShare: new Uint8Array(),
            }),
            cluster,
          );
          expect(key.index).toBe(3);
          // It never signed that result: the signatures are the three that confirmed it.
          expect(honest[2]!.result!.signatures.map((s) => s.index)).toEqual([1, 2, 4]);
        }),
        { numRuns: 6 },
      );
    });
  },
);
