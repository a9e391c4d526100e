/**
 * The driver's side of one request through the replica core (core/request-core.ts): what the core's actions left
 * for the service to do (`RequestRun`), a lease change applied to the lease table, and a failure thrown.
 */
import type { Outcome } from '../protocol/messages.js';
import type { CoreAction, LeaseChange, RequestId } from './core/request-core.js';
import type { LeaseTable } from './leases.js';
import type { SignedRecord } from './policy.js';

/** What the actions performed so far for one request left to do. */
export class RequestRun {
  readonly id: RequestId;
  /** The record the critical section writes (durably) before it resolves. */
  record: SignedRecord | undefined;
  /** The partial being signed, not yet handed to the core. */
  signing: Promise<Uint8Array> | undefined;
  /** The core's answer: only once it is here may anything of the request be sent. */
  reply: { readonly outcome: Outcome; readonly signed?: 'new' | 'resend' | undefined } | undefined;

  constructor(id: RequestId) {
    this.id = id;
  }
}

/** Where a lease change applies: the resource, its record as the critical section read it, the caller's session. */
export interface LeaseSection {
  readonly resource: string;
  readonly current: SignedRecord | undefined;
  readonly session: string;
}

/** Applies a lease change of the core to the lease table (inside the resource's critical section). */
export function applyLeaseChange(leases: LeaseTable, section: LeaseSection, change: LeaseChange): void {
  const { resource, current, session } = section;
  if (change.kind === 'release') leases.release(resource, current);
  else leases.set(resource, current, change.endsAt, session, change.joined);
}

/**
 * Throws the error of the core's `fail` action, or `error` when there is none (the critical section failed before
 * the rules decided anything, so the core never heard of the request).
 */
export function failed(actions: readonly CoreAction[], error: unknown): never {
  for (const action of actions) if (action.type === 'fail') throw action.error;
  throw error;
}
