/**
 * withLock: acquire, run, release. The function gets the lease (its token is
 * what guarded writes must carry) and a signal that fires when the lease is
 * lost, so work can stop before a guard starts refusing it.
 */
import type { AcquireRefusal } from './acquire.js';
import type { AcquireOptions, QuorumFenceClient } from './client.js';
import type { Lease, LeaseEnd } from './lease.js';

export interface LockContext {
  readonly lease: Lease;
  /** The admission token in text form, to send with every guarded write. */
  readonly tokenText: string;
  readonly epoch: bigint;
  /** Fires when the lease ends (lost, expired) or the caller's signal aborts. */
  readonly signal: AbortSignal;
}

export type WithLockResult<T> =
  | {
      readonly ok: true;
      readonly value: T;
      readonly epoch: bigint;
      /** Set when the lease ended before `fn` returned: guarded writes after that moment may have been refused. */
      readonly lost: LeaseEnd | undefined;
    }
  | AcquireRefusal;

/**
 * Runs `fn` while holding a lease on `resource`, then releases it (also when
 * `fn` throws, and the error is rethrown). Waits up to `options.waitMs` for
 * the lease (default 0).
 * @returns `{ ok: true, value }` with fn's value, or the acquire refusal (busy, timeout, unavailable, ...).
 * @throws whatever `fn` throws; QuorumFenceError for bad arguments (see QuorumFenceClient.acquire).
 */
export async function withLock<T>(
  client: QuorumFenceClient,
  resource: string,
  fn: (context: LockContext) => Promise<T> | T,
  options: AcquireOptions = {},
): Promise<WithLockResult<T>> {
  const acquired = await client.acquire(resource, options);
  if (!acquired.ok) return acquired;
  const lease = acquired.lease;
  const signal = options.signal ? AbortSignal.any([lease.signal, options.signal]) : lease.signal;
  try {
    const value = await fn({ lease, tokenText: lease.tokenText, epoch: lease.epoch, signal });
    const end = lease.ended;
    return { ok: true, value, epoch: lease.epoch, lost: end && end.reason !== 'released' ? end : undefined };
  } finally {
    await lease.release();
  }
}
