/**
 * The replica core's request path (issue 44, step 1): what happens to one request after the rules decided it, as
 * events in and actions out, with no awaits, timers or store of its own. The driver (service.ts) tells it the
 * decision taken inside the record's critical section, that the section's write became durable (or failed), and
 * that a partial was signed (or failed); it answers with what to do: change the volatile lease, write a record,
 * sign a grant, reply, fail.
 *
 * "Durable before visible" (S3 of docs/protocol.md) is a property of the actions' order here, not of the driver's
 * promise order: a `reply` for a decision that writes a record (a grant, a join above the record) is emitted only
 * after that request's `durable` event, whatever order the events come in, and a failed write drops the request,
 * so a partial signed while the write was flushing never leaves (test/property/replica-request-core.test.ts).
 * A grant's signing starts with its decision (it overlaps the flush); a resend's once the section is left, as before.
 */
import type { Outcome } from '../../protocol/messages.js';
import { grantMessage, type Grant } from '../../token/grant.js';
import type { Decision, LeaseGrant, SignedRecord } from '../policy-types.js';

/** One request in flight through the core (the driver numbers them). */
export type RequestId = number;

/** What a decision does to the resource's volatile lease (leases.ts), applied inside the critical section. */
export type LeaseChange =
  /** Set the lease's end; `joined`: the lease is that joined grant's (see Decision's `renew` and `join`). */
  | { readonly kind: 'set'; readonly endsAt: number; readonly joined?: LeaseGrant | undefined }
  /** End the lease and remember its release. */
  | { readonly kind: 'release' };

/** What a `granted` answer names besides its partial. */
export interface GrantedExtras {
  /** The epoch a nextEpoch acquire was decided at (it did not name it). */
  readonly epoch?: bigint;
  /** The share generation, when not 0. */
  readonly generation?: number;
}

export type CoreEvent =
  /**
   * The rules decided `id` inside the critical section. `grant`: the grant the request names (a nextEpoch acquire's
   * at the epoch it was decided at), whose message a `grant` or `resend` decision signs.
   */
  | {
      readonly type: 'decided';
      readonly id: RequestId;
      readonly decision: Decision;
      readonly grant: Grant;
      readonly extras: GrantedExtras;
    }
  /** The critical section of `id` is over: what it wrote (if anything) is on stable storage. */
  | { readonly type: 'durable'; readonly id: RequestId }
  /** The critical section of `id` failed (its write, or a read, or the store is frozen). */
  | { readonly type: 'writeFailed'; readonly id: RequestId; readonly error: unknown }
  | { readonly type: 'signed'; readonly id: RequestId; readonly partial: Uint8Array }
  | { readonly type: 'signFailed'; readonly id: RequestId; readonly error: unknown };

export type CoreAction =
  | { readonly type: 'lease'; readonly id: RequestId; readonly change: LeaseChange }
  /** Write `record` durably (the critical section's write); `durable` follows when it is on stable storage. */
  | { readonly type: 'write'; readonly id: RequestId; readonly record: SignedRecord }
  /** Sign `message`; `whileFlushing`: the record's write is in flight (the driver may defer the signing behind it). */
  | { readonly type: 'sign'; readonly id: RequestId; readonly message: Uint8Array; readonly whileFlushing: boolean }
  /** Answer `outcome`; `signed`: it carries a partial, of a new grant or a resend. */
  | {
      readonly type: 'reply';
      readonly id: RequestId;
      readonly outcome: Outcome;
      readonly signed?: 'new' | 'resend' | undefined;
    }
  | { readonly type: 'fail'; readonly id: RequestId; readonly error: unknown };

/** A request decided and not answered yet. */
interface Pending {
  readonly decision: Decision;
  readonly grant: Grant;
  readonly extras: GrantedExtras;
  durable: boolean;
  partial: Uint8Array | undefined;
}

/** The core's state: plain data, changed only by `stepRequest`. */
export interface RequestCore {
  readonly pending: Map<RequestId, Pending>;
}

export function createRequestCore(): RequestCore {
  return { pending: new Map() };
}

/** One event in, the actions it calls for out, in the order they are to be performed. */
export function stepRequest(core: RequestCore, event: CoreEvent): CoreAction[] {
  switch (event.type) {
    case 'decided':
      return decided(core, event);
    case 'durable':
      return durable(core, event.id);
    case 'signed':
      return signed(core, event.id, event.partial);
    case 'writeFailed':
    case 'signFailed':
      // Dropped: a partial signed meanwhile, or a durable event still to come, finds nothing to answer. A request
      // that already ended (or was never decided: the section failed before the rules ran) fails no second time.
      if (!core.pending.delete(event.id)) return [];
      return [{ type: 'fail', id: event.id, error: event.error }];
  }
}

/** The volatile lease change a decision makes (none for a plain reply). */
export function leaseChangeOf(decision: Decision): LeaseChange | undefined {
  switch (decision.action) {
    case 'grant':
    case 'resend':
      return { kind: 'set', endsAt: decision.leaseEndsAt };
    case 'join':
    case 'renew':
      // A renewal after a restart (the session unknown) makes the renewing session the lease's; a joined lease
      // stays its grant's. A join above the record is recorded durably, as a grant is; below it, kept in memory.
      return { kind: 'set', endsAt: decision.leaseEndsAt, joined: decision.joined };
    case 'release':
      return { kind: 'release' };
    case 'reply':
      return undefined;
  }
}

/** The record a decision writes durably before anything of it is visible (a grant; a join above the record). */
export function recordOf(decision: Decision): SignedRecord | undefined {
  return decision.action === 'grant' || decision.action === 'join' ? decision.record : undefined;
}

function decided(core: RequestCore, event: Extract<CoreEvent, { type: 'decided' }>): CoreAction[] {
  const { id, decision } = event;
  core.pending.set(id, { decision, grant: event.grant, extras: event.extras, durable: false, partial: undefined });
  const actions: CoreAction[] = [];
  const change = leaseChangeOf(decision);
  if (change) actions.push({ type: 'lease', id, change });
  const record = recordOf(decision);
  if (record) actions.push({ type: 'write', id, record });
  // A new grant's partial is computed while its record is flushed; it stays here until `durable`.
  if (decision.action === 'grant')
    actions.push({ type: 'sign', id, message: grantMessage(event.grant), whileFlushing: true });
  return actions;
}

function durable(core: RequestCore, id: RequestId): CoreAction[] {
  const pending = core.pending.get(id);
  if (!pending) return [];
  pending.durable = true;
  const { decision } = pending;
  if (decision.action === 'resend')
    return [{ type: 'sign', id, message: grantMessage(pending.grant), whileFlushing: false }];
  if (decision.action === 'grant') return answerIfReady(core, id, pending);
  core.pending.delete(id);
  return [{ type: 'reply', id, outcome: decision.outcome }];
}

function signed(core: RequestCore, id: RequestId, partial: Uint8Array): CoreAction[] {
  const pending = core.pending.get(id);
  if (!pending) return [];
  pending.partial = partial;
  return answerIfReady(core, id, pending);
}

/** The `granted` answer, once both its record is durable and its partial is signed. */
function answerIfReady(core: RequestCore, id: RequestId, pending: Pending): CoreAction[] {
  if (!pending.durable || !pending.partial) return [];
  core.pending.delete(id);
  const { extras } = pending;
  const outcome: Outcome = {
    status: 'granted',
    partial: pending.partial,
    ...(extras.epoch !== undefined ? { epoch: extras.epoch } : {}),
    ...(extras.generation ? { generation: extras.generation } : {}),
  };
  return [{ type: 'reply', id, outcome, signed: pending.decision.action === 'grant' ? 'new' : 'resend' }];
}
