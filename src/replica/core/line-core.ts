/**
 * The replica core's waiting-acquire path (issue 44, step 2): the decisions around a resource's line, as events in
 * and actions out, with no awaits, timers or store of their own. Two drivers perform them: the service
 * (service.ts) for a request arriving (`routeArrival`: straight into the line, or to the rules first) and for its
 * answer (`afterAnswer`: wait in the line after a `busy`, wake the line after a release, or reply), and the line
 * (handoff-queue.ts) for serving its head (`stepServing`: try the head; its try's outcome comes back as an event).
 *
 * Serving is stepped: one try of the head at a time per line (`serveHead`), its outcome back as `headTried`; a wake
 * during a try asks for one more pass once it is over (`again`), never for a second try beside it. After a try the
 * core asks to `continue`: the driver answers with the line's head then, so a wake heard while the try's actions
 * were performed still counts.
 */
import type { Outcome } from '../../protocol/messages.js';
import type { Decision } from '../policy-types.js';

/** What the service knows of a request as it arrives, for its route (all plain facts, read by the driver). */
export interface ArrivalFacts {
  /** An acquire that says it may wait (`waitMs` > 0) when busy. */
  readonly waits: boolean;
  readonly nextEpoch: boolean;
  readonly carriesEvidence: boolean;
  /** The resource's line waits, and nobody decided `busy` before is still on its way into it. */
  readonly lineJoinable: boolean;
  readonly storeFrozen: boolean;
  /** Steps 1 and 2 (bounds, access) refuse it. */
  readonly refused: boolean;
}

/**
 * Where an arriving request goes: `joinLine` (the back of its resource's line, without the rules: their decision
 * could only be `busy`, the lease in the way or the line's turn on its way, since nobody overtakes the line), or
 * `decide` (the rules, in the record's critical section). Only a waiting nextEpoch acquire without evidence joins
 * at once, and only when the line is joinable, the store is not frozen (its every decision is REPLICA_FROZEN) and
 * steps 1 and 2 let it through.
 */
export function routeArrival(facts: ArrivalFacts): 'joinLine' | 'decide' {
  const candidate = facts.waits && facts.nextEpoch && !facts.carriesEvidence;
  return candidate && facts.lineJoinable && !facts.storeFrozen && !facts.refused ? 'joinLine' : 'decide';
}

/** What the service does with the rules' answer to a request. */
export type AnswerAction =
  /**
   * The acquire announced as `arriving` is here: it takes its place in the line behind `busy`, the lease in its way
   * (or, the line full, is answered `busy`).
   */
  | { readonly type: 'waitInLine'; readonly busy: { readonly epoch: bigint; readonly remainingMs: number } }
  /** A release ended the lease: the line's first waiter tries now; then the answer goes back. */
  | { readonly type: 'wakeLine' }
  | { readonly type: 'reply' };

/** After the rules' answer: a waiting acquire told `busy` waits in line; a release that ended a lease wakes the line. */
export function afterAnswer(waits: boolean, isRelease: boolean, outcome: Outcome): AnswerAction {
  if (waits && outcome.status === 'busy')
    return { type: 'waitInLine', busy: { epoch: outcome.epoch, remainingMs: outcome.remainingMs } };
  if (isRelease && outcome.status === 'released') return { type: 'wakeLine' };
  return { type: 'reply' };
}

/** What the line's order needs to know of a decision made outside it (read by the driver in the critical section). */
export interface LineOrderFacts {
  /** The request waited its turn in the line: its decision is the line's own. */
  readonly queued: boolean;
  /** The resource's line has waiters (or one announced on its way in). */
  readonly lineWaits: boolean;
  /** The record's epoch, or the floor for a resource without one: what a `busy` or `not_holder` instead names. */
  readonly recordEpoch: bigint;
  /** The request is an acquire that may wait (`waitMs` > 0) when busy. */
  readonly waits: boolean;
}

/**
 * Nobody overtakes a line (docs/protocol.md, lines): a grant decided outside the line while it waits becomes `busy`
 * at the record's epoch with `remainingMs` 0 (the line's own decision is on its way), and a join, a grant without a
 * partial, `not_holder`. `arriving`: a waiting acquire answered `busy` counts as in the line from this decision, so
 * that one decided meanwhile neither overtakes it nor goes before it (the driver announces it to the line).
 */
export function inLineOrder(decision: Decision, facts: LineOrderFacts): { decision: Decision; arriving: boolean } {
  let d = decision;
  if (!facts.queued && facts.lineWaits) {
    if (d.action === 'grant')
      d = { action: 'reply', outcome: { status: 'busy', epoch: facts.recordEpoch, remainingMs: 0 } };
    else if (d.action === 'join') d = { action: 'reply', outcome: { status: 'not_holder', epoch: facts.recordEpoch } };
  }
  const arriving = !facts.queued && d.action === 'reply' && d.outcome.status === 'busy' && facts.waits;
  return { decision: d, arriving };
}

/** Names a waiter of a line (the line numbers them). */
export type WaiterId = number;

/** A line's serving state: plain data, changed only by `stepServing`. */
export interface LineServing {
  /** A try of the head is under way: wakes meanwhile only ask for another pass. */
  trying: boolean;
  /** Another pass is due once the try under way is over. */
  again: boolean;
}

export function createLineServing(): LineServing {
  return { trying: false, again: false };
}

/** How a head's try ended. */
export type HeadResult =
  | { readonly ok: true; readonly outcome: Outcome }
  /** `frozen`: the store was frozen for a reshare (REPLICA_FROZEN); otherwise a store or signer failure. */
  | { readonly ok: false; readonly frozen: boolean; readonly error: unknown };

export type LineEvent =
  /** The lease in the way ended (a release, its timer), or a waiter became first: `head` is the first waiter now. */
  | { readonly type: 'wake'; readonly head: WaiterId | undefined }
  /**
   * The try of `head` is over. `inLine`: it still waits (it may have left meanwhile: wait over, connection closed,
   * withdrawn); `epoch`: the epoch its request names (a failed try's `busy` names it).
   */
  | {
      readonly type: 'headTried';
      readonly head: WaiterId;
      readonly inLine: boolean;
      readonly epoch: bigint;
      readonly result: HeadResult;
    }
  /** The actions of the last try were performed (the core asked to `continue`): `head` is the first waiter now. */
  | { readonly type: 'continue'; readonly head: WaiterId | undefined }
  /** Performing the last try's actions threw: serving stops (the next wake starts it again). */
  | { readonly type: 'abandoned' };

export type LineAction =
  /** Try `head` once, decided at its turn's epoch; its outcome comes back as `headTried`. */
  | { readonly type: 'serveHead'; readonly head: WaiterId }
  /** End every wait with `error` (frozen: no try will ever succeed here; nobody waits for nothing). */
  | { readonly type: 'failAll'; readonly error: unknown }
  /** The head is still held off: it hears its turn's epoch after the lease at `epoch`, and those behind it theirs. */
  | { readonly type: 'announceHead'; readonly head: WaiterId; readonly epoch: bigint }
  /** Wait for the lease in the way (`busy`), whose end wakes the line. */
  | { readonly type: 'armLeaseTimer'; readonly busy: { readonly epoch: bigint; readonly remainingMs: number } }
  /** `head` leaves its line (its turn), answered `outcome`. */
  | { readonly type: 'leave'; readonly head: WaiterId; readonly outcome: Outcome }
  /** A grant (if `outcome` is one) at the head's try: the new first waiter's turn follows it. */
  | { readonly type: 'afterGrant'; readonly outcome: Outcome }
  /** Tell the core the line's head now (`continue`), the try's actions being performed. */
  | { readonly type: 'continue' };

/** One event in, the actions it calls for out, in the order they are to be performed. */
export function stepServing(serving: LineServing, event: LineEvent): LineAction[] {
  switch (event.type) {
    case 'wake':
      if (serving.trying) {
        serving.again = true;
        return [];
      }
      return startPass(serving, event.head);
    case 'continue':
      if (!serving.again) {
        serving.trying = false;
        return [];
      }
      return startPass(serving, event.head);
    case 'headTried':
      return headTried(serving, event);
    case 'abandoned':
      serving.trying = false;
      serving.again = false;
      return [];
  }
}

/** A pass: the head tries, or, nobody waiting, serving stops. */
function startPass(serving: LineServing, head: WaiterId | undefined): LineAction[] {
  serving.again = false;
  serving.trying = head !== undefined;
  return head === undefined ? [] : [{ type: 'serveHead', head }];
}

function headTried(serving: LineServing, event: Extract<LineEvent, { type: 'headTried' }>): LineAction[] {
  const { head, result } = event;
  if (!result.ok && result.frozen) {
    serving.trying = false;
    return [{ type: 'failAll', error: result.error }];
  }
  // A store or signer failure: the server would have answered an error; this waiter gets `busy` instead.
  const outcome: Outcome = result.ok ? result.outcome : { status: 'busy', epoch: event.epoch, remainingMs: 0 };
  if (!event.inLine) {
    // It left meanwhile: the next one tries. A grant it leaves behind is the lease the next one's turn follows, so
    // the next one hears its epoch now, as after any grant.
    serving.again = true;
    return [{ type: 'afterGrant', outcome }, { type: 'continue' }];
  }
  if (outcome.status === 'busy') {
    // Still held: wait for that lease, unless it ended during the try. No grant but those of the line can come
    // before its turn now (newcomers are sent into the line), so the lease in the way names the epoch of its turn.
    const announce: LineAction[] = result.ok ? [{ type: 'announceHead', head, epoch: outcome.epoch }] : [];
    return [...announce, { type: 'armLeaseTimer', busy: outcome }, { type: 'continue' }];
  }
  // Its turn. The next waiter tries at once: after a grant, its try says `busy` with the new lease's time, which
  // arms the timer (nobody left: the pass finds no head and serving stops).
  serving.again = true;
  return [{ type: 'leave', head, outcome }, { type: 'afterGrant', outcome }, { type: 'continue' }];
}

/**
 * A waiter's wait is over. First in line: one last try (the lease may be ending right now), answered whatever it says,
 * and the line woken for the next one, first now. Behind others: `busy` as the replica last saw it, since a try could
 * overtake those ahead.
 */
export function waitOverAction(first: boolean): 'lastTry' | 'answerBusy' {
  return first ? 'lastTry' : 'answerBusy';
}
