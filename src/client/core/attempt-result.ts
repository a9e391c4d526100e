/**
 * What one acquire attempt ends with, and how it is classified from the answers it got (src/client/core/attempt.ts
 * runs the attempt; src/client/core/acquire.ts acts on the result). Pure.
 */
import { fPlusOneLargest, quorumRemainingMs } from '../epoch-choice.js';
import type { AcquiredGrant, AcquireRefusalReason } from './results.js';
import type { QuorumTally } from '../quorum-tally.js';
import type { ConnectionView } from './io.js';

export type Attempt =
  /**
   * `waited`: the leader kept the request in its line behind a running lease (it announced our turn).
   * `crowded`: some replica answered `busy`, or `stale` at or above its epoch, all the same: another holder's
   * lease, a line, or another contender's grant was there.
   */
  | { readonly kind: 'granted'; readonly grant: AcquiredGrant; readonly waited: boolean; readonly crowded: boolean }
  /** `leaderOnly`: only the leader answered (leader-first), so f+1 replicas have not confirmed it. */
  | { readonly kind: 'busy'; readonly epoch: bigint; readonly remainingMs: number; readonly leaderOnly: boolean }
  /**
   * `turnCame`: the leader kept the request in its line and told or granted its turn; the others' answers lost it.
   * `blockers`: replicas that said `stale` at or above the attempt's epoch (their records are ahead of it).
   */
  | {
      readonly kind: 'contended';
      readonly message: string;
      readonly turnCame: boolean;
      readonly blockers: readonly Blocker[];
    }
  | { readonly kind: 'outdated'; readonly leaderOnly: boolean }
  /**
   * The leader this attempt waited at turned slow or hung (its connection's answer time: signer-choice.ts), or went
   * down, before it answered: wait in the line of the leader there is now instead.
   */
  | { readonly kind: 'leader_gone' }
  | { readonly kind: 'stop'; readonly reason: Exclude<AcquireRefusalReason, 'busy'>; readonly message: string };

/** A replica whose record is at or above the attempt's epoch, as it said. */
export interface Blocker {
  readonly replica: number;
  readonly epoch: bigint;
}

/** What an attempt that made no token heard, for its classification. */
export interface AttemptTally {
  readonly resource: string;
  readonly epoch: bigint;
  readonly f: number;
  readonly t: number;
  readonly ended: 'exhausted' | 'deadline' | 'aborted' | undefined;
  readonly refusals: QuorumTally<'forbidden' | 'invalid'>;
  /** Remaining times of the busy answers, and the epochs they named. */
  readonly busy: readonly number[];
  readonly busyEpochs: readonly bigint[];
  readonly granted: number;
  readonly outdated: number;
  /** Replicas that answered or still could when the round stopped: below t, no epoch could have won. */
  readonly reachable: number;
  /** 2f+1 replicas answered and the stragglers were given their time. */
  readonly straggling: boolean;
  readonly turnCame: boolean;
  readonly blockers: readonly Blocker[];
  /** The round's own deadline was the caller's (no time for another attempt). */
  readonly roundDeadlineIsCallers: boolean;
  readonly requestTimeoutMs: number;
  readonly timeoutMs: number;
  readonly unavailable: () => string;
}

/** The classification of an attempt that made no token (the order of the rules is the order of precedence). */
export function classifyAttempt(tally: AttemptTally): Attempt {
  if (tally.ended === 'aborted') return { kind: 'stop', reason: 'aborted', message: 'the caller aborted the acquire' };
  const refused = confirmedRefusal(tally.refusals, tally.resource);
  if (refused) return refused;
  if (tally.busy.length > tally.f)
    return {
      kind: 'busy',
      epoch: fPlusOneLargest(tally.busyEpochs, tally.f)!,
      remainingMs: quorumRemainingMs(tally.busy, tally.f)!,
      leaderOnly: false,
    };
  if (tally.granted === 0 && tally.outdated > 0 && tally.busy.length === 0)
    return { kind: 'outdated', leaderOnly: false };
  const contended = (message: string): Attempt => ({
    kind: 'contended',
    message,
    turnCame: tally.turnCame,
    blockers: tally.blockers,
  });
  if (tally.reachable >= tally.t || tally.straggling) return contended(`split vote at epoch ${tally.epoch}`);
  if (tally.ended === 'deadline') {
    // Replicas that are connected but slow: worth another try while the caller's deadline allows.
    return tally.roundDeadlineIsCallers
      ? { kind: 'stop', reason: 'timeout', message: `no grant within ${tally.timeoutMs} ms` }
      : contended(`too few answers at epoch ${tally.epoch} within ${tally.requestTimeoutMs} ms`);
  }
  return { kind: 'stop', reason: 'unavailable', message: tally.unavailable() };
}

/** A refusal f+1 replicas agree on ends the acquire: at least one honest replica refuses it. */
export function confirmedRefusal(
  tally: QuorumTally<'forbidden' | 'invalid'>,
  resource: string,
): { kind: 'stop'; reason: 'forbidden' | 'invalid'; message: string } | undefined {
  const refused = tally.confirmed('forbidden', 'invalid');
  if (refused?.kind === 'forbidden')
    return {
      kind: 'stop',
      reason: 'forbidden',
      message: `${refused.count} replicas refuse this identity access to "${resource}"`,
    };
  if (refused?.kind === 'invalid')
    return { kind: 'stop', reason: 'invalid', message: `replicas refused the request: ${refused.first}` };
  return undefined;
}

/**
 * Why too few replicas could vote, for the caller.
 * @param frozen replicas that answered REPLICA_FROZEN (frozen for a reshare: they vote no more)
 * @param otherGeneration replicas that granted with another share generation than the cluster description's
 */
export function unavailableMessage(
  connections: readonly ConnectionView[],
  membershipVersion: number,
  answered: number,
  need: number,
  frozen: readonly number[] = [],
  otherGeneration: readonly number[] = [],
): string {
  const down = connections.filter((c) => c.state.phase !== 'ready').map((c) => c.index);
  const sorted = (replicas: readonly number[]) => [...replicas].sort((a, b) => a - b).join(', ');
  return (
    `only ${answered} replicas answered and ${need} are needed` +
    (down.length ? `; not connected: replica ${down.join(', ')}` : '') +
    (frozen.length ? `; frozen for a reshare: replica ${sorted(frozen)}` : '') +
    (otherGeneration.length
      ? `; on another share generation than this cluster description (${membershipVersion}): replica ` +
        sorted(otherGeneration)
      : '')
  );
}
