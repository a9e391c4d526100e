/**
 * Runs one member's ceremony: feeds the state machine frames from the
 * transport and clock ticks, sends what it produces, reports progress, and
 * settles with the result or the abort. Time comes from an injectable
 * monotonic clock; the whole run is bounded by the proposal's timeouts.
 */
import { systemClock, type MonotonicClock } from '../common/clock.js';
import { systemRandom, type RandomSource } from '../crypto/random.js';
import { jointFeldman, type DealingRule } from './dealing.js';
import type { NodeKey } from './node-key.js';
import { PHASES } from './packets.js';
import type { Proposal } from './proposal.js';
import type { CeremonyResult, DealerOnlyResult, OutgoingRewrite, ProgressEvent } from './events.js';
import { QuorumFenceError } from '../common/errors.js';
import { CeremonyMember } from './state.js';
import type { CeremonyTransport } from './transport.js';

export type CeremonyOutcome =
  | { readonly ok: true; readonly result: CeremonyResult; readonly elapsedMs: number }
  | { readonly ok: false; readonly reason: string; readonly members: number[]; readonly elapsedMs: number };

export interface RunOptions {
  readonly proposal: Proposal;
  readonly nodeKey: NodeKey;
  /** The sender number: a member's index, or n+k for a reshare's k-th outside dealer. */
  readonly self: number;
  readonly transport: CeremonyTransport;
  readonly rule?: DealingRule;
  readonly random?: RandomSource;
  readonly clock?: MonotonicClock;
  readonly onEvent?: (event: ProgressEvent, member: CeremonyMember) => void;
  /** How often deadlines are checked (default 50 ms). */
  readonly tickMs?: number;
  /** Test-only: a Byzantine member. */
  readonly rewrite?: OutgoingRewrite;
}

/** After finishing, stay up briefly so slower members still receive our last packets. */
const LINGER_MS = 1000;

/**
 * Runs a member's side (one that receives a share) to its result or abort.
 * @throws QuorumFenceError INVALID_ARGUMENT when `self` is an outside dealer: use runDealerOnly
 */
export async function runCeremony(options: RunOptions): Promise<CeremonyOutcome> {
  const member = memberFor(options);
  if (member.role !== 'member')
    throw new QuorumFenceError('INVALID_ARGUMENT', `participant ${options.self} only deals; run it with runDealerOnly`);
  const { elapsedMs, overLimit } = await drive(member, options);
  if (member.result) return { ok: true, result: member.result, elapsedMs };
  return overLimit
    ? { ok: false, reason: 'the ceremony ran past its overall limit', members: member.missing(), elapsedMs }
    : { ok: false, reason: member.abort?.reason ?? 'aborted', members: member.abort?.members ?? [], elapsedMs };
}

export type DealerOnlyOutcome =
  | { readonly ok: true; readonly dealt: DealerOnlyResult; readonly elapsedMs: number }
  | { readonly ok: false; readonly reason: string; readonly members: number[]; readonly elapsedMs: number };

/**
 * Runs a reshare's outside dealer (an old member not in the new set): it deals its share, answers complaints,
 * and ends once t members confirmed one result. The same state machine and transport as a member's.
 * @throws QuorumFenceError INVALID_ARGUMENT when `self` is a member: use runCeremony
 */
export async function runDealerOnly(options: RunOptions): Promise<DealerOnlyOutcome> {
  const member = memberFor(options);
  if (member.role !== 'dealer-only')
    throw new QuorumFenceError('INVALID_ARGUMENT', `participant ${options.self} is a member; run it with runCeremony`);
  const { elapsedMs, overLimit } = await drive(member, options);
  if (member.dealt) return { ok: true, dealt: member.dealt, elapsedMs };
  return overLimit
    ? { ok: false, reason: 'the ceremony ran past its overall limit', members: member.missing(), elapsedMs }
    : { ok: false, reason: member.abort?.reason ?? 'aborted', members: member.abort?.members ?? [], elapsedMs };
}

function memberFor(options: RunOptions): CeremonyMember {
  const { proposal } = options;
  return new CeremonyMember({
    proposal,
    nodeKey: options.nodeKey,
    self: options.self,
    rule: options.rule ?? jointFeldman(proposal.n, proposal.t),
    random: options.random ?? systemRandom,
    rewrite: options.rewrite,
  });
}

/** Feeds the member frames and ticks until it is done or aborted (or past the overall limit), then lingers. */
function drive(member: CeremonyMember, options: RunOptions): Promise<{ elapsedMs: number; overLimit: boolean }> {
  const { proposal, transport } = options;
  const clock = options.clock ?? systemClock;
  const startedAt = clock.now();
  // Whatever happens, the run ends by the sum of its deadlines plus a margin.
  const limit = proposal.acceptTimeoutMs + (PHASES.length - 1) * proposal.phaseTimeoutMs + 5000;

  return new Promise((resolve) => {
    let settled = false;
    const handle = (step: { out: { to: number; bytes: Uint8Array }[]; events: ProgressEvent[] }) => {
      for (const { to, bytes } of step.out) transport.send(to, bytes);
      for (const event of step.events) options.onEvent?.(event, member);
      if (!settled && (member.phase === 'done' || member.phase === 'aborted')) settle();
    };
    const ticker = setInterval(() => {
      if (clock.now() - startedAt > limit && !settled) {
        settled = true;
        clearInterval(ticker);
        resolve({ elapsedMs: clock.now() - startedAt, overLimit: true });
        return;
      }
      handle(member.tick(clock.now()));
    }, options.tickMs ?? 50);
    const settle = () => {
      settled = true;
      clearInterval(ticker);
      const elapsedMs = clock.now() - startedAt;
      // Linger until our packets are out (bounded), so members a step behind can finish too.
      const lingerStart = Date.now();
      const wait = () => {
        if (transport.pending() === 0 || Date.now() - lingerStart > LINGER_MS) resolve({ elapsedMs, overLimit: false });
        else setTimeout(wait, 20);
      };
      wait();
    };
    transport.onFrame((bytes) => {
      if (!settled) handle(member.receive(bytes, clock.now()));
    });
    // Connections refused at their hello never reach the member; the progress log still counts them.
    transport.onRefused(({ reason, code }) => {
      if (!settled) options.onEvent?.({ kind: 'refused', reason: `connection: ${reason}`, code }, member);
    });
    handle(member.start(clock.now()));
  });
}
