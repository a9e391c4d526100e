/**
 * Byzantine ceremony members, one behaviour each, as rewrites of what an
 * otherwise honest member sends (see OutgoingRewrite in src/ceremony/state.ts).
 * Each is a real attack on the protocol's checks, for the tests that claim
 * every honest member ends with the same key or all abort.
 */
import { randomBytes } from 'node:crypto';
import { SCALAR_ORDER } from '../crypto/threshold.js';
import type { BodyByPhase, PacketKind } from '../ceremony/packets.js';
import type { OutgoingRewrite } from '../ceremony/events.js';
import { commit, evaluate, scalarToBytes } from '../ceremony/vss.js';

export const CEREMONY_BEHAVIOURS = [
  'wrong-share',
  'wrong-share-justified',
  'bad-commitments',
  'two-deals',
  'false-complaint',
  'selective-complaint',
  'complaint-to-minority',
  'justification-to-victim',
  'two-justifications',
  'bad-justification',
  'missing-justification',
  'silent',
  'silent-after-accept',
] as const;
export type CeremonyBehaviour = (typeof CEREMONY_BEHAVIOURS)[number];

/** The victim of targeted behaviours: the first member other than the Byzantine one. */
function victimOf(self: number): number {
  return self === 1 ? 2 : 1;
}

/** The one member other than the victim and the Byzantine one that a "minority" behaviour shows a packet to. */
function bystanderOf(self: number): number {
  return [1, 2, 3].find((i) => i !== self && i !== victimOf(self))!;
}

/** Behaviours that split what members see, and so relay nothing themselves: honest relays alone must carry them. */
const SPLITTING = new Set<CeremonyBehaviour>([
  'selective-complaint',
  'complaint-to-minority',
  'justification-to-victim',
  'two-justifications',
]);

/**
 * @param self the Byzantine member's index
 * @param n members in the ceremony
 */
export function ceremonyBehaviour(behaviour: CeremonyBehaviour, self: number, n: number): OutgoingRewrite {
  const victim = victimOf(self);
  type AnyBody = BodyByPhase[PacketKind];
  const wrongDeal = (deal: BodyByPhase['deal'], own: Parameters<OutgoingRewrite>[3]): BodyByPhase['deal'] => {
    const wrong = (evaluate(own.polynomial, victim) + 1n) % SCALAR_ORDER;
    return { ...deal, shares: deal.shares.map((s, k) => (k + 1 === victim ? own.seal(victim, wrong) : s)) };
  };
  const rewrite = (
    phase: PacketKind,
    body: AnyBody,
    recipient: number,
    own: Parameters<OutgoingRewrite>[3],
  ): AnyBody | null => {
    if (phase === 'relay' && SPLITTING.has(behaviour)) return null;
    switch (behaviour) {
      case 'silent':
        return null;
      case 'silent-after-accept':
        return phase === 'accept' ? body : null;
      case 'wrong-share':
      case 'wrong-share-justified':
      case 'bad-justification':
      case 'missing-justification': {
        if (phase === 'deal') return wrongDeal(body as BodyByPhase['deal'], own);
        if (phase === 'justification') {
          if (behaviour === 'wrong-share-justified') return body;
          if (behaviour === 'bad-justification') {
            const wrong = (evaluate(own.polynomial, victim) + 1n) % SCALAR_ORDER;
            return { reveals: [{ to: victim, share: scalarToBytes(wrong) }] };
          }
          return { reveals: [] };
        }
        return body;
      }
      case 'bad-commitments': {
        if (phase !== 'deal') return body;
        const deal = body as BodyByPhase['deal'];
        const other = own.polynomial.map((a) => (a + 1n) % SCALAR_ORDER);
        return { ...deal, commitments: commit(other) };
      }
      case 'two-deals': {
        if (phase !== 'deal') return body;
        // Members other than the victim see a deal of another polynomial, consistent in itself.
        if (recipient === victim) return body;
        const deal = body as BodyByPhase['deal'];
        const other = own.polynomial.map((a) => (a + 7n) % SCALAR_ORDER);
        const shares = Array.from({ length: n }, (_, k) => own.seal(k + 1, evaluate(other, k + 1)));
        return { ...deal, commitments: commit(other), shares };
      }
      case 'false-complaint':
        return phase === 'complaint' ? { against: [victim] } : body;
      case 'selective-complaint':
        // Accuses the victim before everyone but the victim, who without a reliable broadcast never answers.
        if (phase !== 'complaint') return body;
        return recipient === victim ? { against: [] } : { against: [victim] };
      case 'complaint-to-minority':
        // Accuses the victim before one bystander only, and sends no complaint to anyone else.
        if (phase !== 'complaint') return body;
        return recipient === bystanderOf(self) ? { against: [victim] } : null;
      case 'justification-to-victim':
      case 'two-justifications': {
        // A wrong share to the victim, then the valid reveal to the victim alone; the others get nothing or an empty one.
        if (phase === 'deal') return wrongDeal(body as BodyByPhase['deal'], own);
        if (phase !== 'justification') return body;
        if (recipient === victim)
          return { reveals: [{ to: victim, share: scalarToBytes(evaluate(own.polynomial, victim)) }] };
        return behaviour === 'two-justifications' ? { reveals: [] } : null;
      }
    }
  };
  return rewrite as unknown as OutgoingRewrite;
}

/** Frames that are not packets of the ceremony: random bytes, truncated msgpack, a huge frame. */
export function garbageFrames(): Uint8Array[] {
  return [
    new Uint8Array(randomBytes(64)),
    Uint8Array.of(0x85, 0xa1, 0x76),
    Uint8Array.of(0xc0),
    new Uint8Array(600 * 1024),
  ];
}
