/**
 * Byzantine ceremony members, one behaviour each, as rewrites of what an
 * otherwise honest member sends (see OutgoingRewrite in src/ceremony/state.ts).
 * Each is a real attack on the protocol's checks, for the tests that claim
 * every honest member ends with the same key or all abort.
 */
import { randomBytes } from 'node:crypto';
import { SCALAR_ORDER } from '../crypto/threshold.js';
import type { BodyByPhase, PacketPhase } from '../ceremony/packets.js';
import type { OutgoingRewrite } from '../ceremony/events.js';
import { commit, evaluate, scalarToBytes } from '../ceremony/vss.js';

export const CEREMONY_BEHAVIOURS = [
  'wrong-share',
  'wrong-share-justified',
  'bad-commitments',
  'two-deals',
  'false-complaint',
  'selective-complaint',
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

/**
 * @param self the Byzantine member's index
 * @param n members in the ceremony
 */
export function ceremonyBehaviour(behaviour: CeremonyBehaviour, self: number, n: number): OutgoingRewrite {
  const victim = victimOf(self);
  type AnyBody = BodyByPhase[PacketPhase];
  const rewrite = (
    phase: PacketPhase,
    body: AnyBody,
    recipient: number,
    own: Parameters<OutgoingRewrite>[3],
  ): AnyBody | null => {
    switch (behaviour) {
      case 'silent':
        return null;
      case 'silent-after-accept':
        return phase === 'accept' ? body : null;
      case 'wrong-share':
      case 'wrong-share-justified':
      case 'bad-justification':
      case 'missing-justification': {
        if (phase === 'deal') {
          const deal = body as BodyByPhase['deal'];
          const wrong = (evaluate(own.polynomial, victim) + 1n) % SCALAR_ORDER;
          const shares = deal.shares.map((s, k) => (k + 1 === victim ? own.seal(victim, wrong) : s));
          return { ...deal, shares };
        }
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
        // Accuses the victim before everyone but the victim, who so never answers (the known gap in docs/ceremony.md).
        if (phase !== 'complaint') return body;
        return recipient === victim ? { against: [] } : { against: [victim] };
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
