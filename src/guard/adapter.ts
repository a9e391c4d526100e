/**
 * What every guard store adapter (LMDB, PostgreSQL) shares, so each rule has
 * one copy: the options every store takes (log page, refused-entry
 * retention), the mutation refusal value (`tx.refuse`), the refusal log entry,
 * log paging, and "stop taking writes, wait for the ones in flight" on close.
 * The store-specific parts (transactions, durability) stay in the adapters.
 */
import { QuorumFenceError } from '../common/errors.js';
import { expectInteger } from '../common/check.js';
import type { Cluster } from '../cluster/description.js';
import { GuardCore, type Admission, type GuardOptions, type GuardRequest } from './core.js';
import type { GuardLogEntry, GuardLogQuery } from './log.js';

export interface GuardAdapterOptions extends GuardOptions {
  /** Most log entries one readLog call returns. Default DEFAULT_MAX_LOG_PAGE. */
  readonly maxLogPage?: number;
  /**
   * Refused entries the log keeps (conflict evidence excepted); past it, the
   * oldest refused entry is deleted in the transaction that adds a new one.
   * Default DEFAULT_MAX_REFUSED_LOG_ENTRIES.
   */
  readonly maxRefusedLogEntries?: number;
}

/** A page of 1000 entries is a few hundred KiB of JSON. */
export const DEFAULT_MAX_LOG_PAGE = 1000;
/**
 * Anyone with a genuine token can make a refused entry (a stale PUT; garbage tokens are never logged), and each
 * costs ~1.3 KiB of store: 50,000 bound that to ~65 MiB while keeping hours of
 * refusals for an operator to read. Accepted entries and conflicts are never
 * dropped: they are the write history and the evidence.
 */
export const DEFAULT_MAX_REFUSED_LOG_ENTRIES = 50_000;

/** Returned by a mutation (`return tx.refuse(...)`) to refuse the attempt after the fence passed. */
export interface MutationRefusal {
  readonly refusal: 'version_mismatch';
  readonly message: string;
}

const REFUSAL = Symbol('quorumfence.refusal');

/** The value behind every adapter's `tx.refuse`: tagged, so a mutation's ordinary result is never mistaken for it. */
export function mutationRefusal(
  reason: 'version_mismatch',
  message = "the write's precondition does not hold",
): MutationRefusal {
  const refusal = { refusal: reason, message };
  Object.defineProperty(refusal, REFUSAL, { value: true });
  return refusal;
}

export function isRefusal(value: unknown): value is MutationRefusal {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[REFUSAL] === true;
}

/** How a store's log retention stands: refused entries kept (conflicts excepted), dropped so far, and the bound. */
export interface LogRetention {
  readonly refusedKept: number;
  readonly refusedDropped: number;
  readonly maxRefused: number;
}

export abstract class GuardAdapter {
  readonly core: GuardCore;
  protected readonly maxLogPage: number;
  protected readonly maxRefusedLogEntries: number;
  #inFlight = 0;
  #drained: (() => void) | undefined;
  #closed = false;

  /** @throws QuorumFenceError INVALID_ARGUMENT for a bad option */
  protected constructor(cluster: Cluster, options: GuardAdapterOptions) {
    this.core = new GuardCore(cluster, options);
    this.maxLogPage = expectInteger(options.maxLogPage ?? DEFAULT_MAX_LOG_PAGE, 1, 100_000, 'maxLogPage');
    this.maxRefusedLogEntries = expectInteger(
      options.maxRefusedLogEntries ?? DEFAULT_MAX_REFUSED_LOG_ENTRIES,
      1,
      1_000_000_000,
      'maxRefusedLogEntries',
    );
  }

  /**
   * Runs one write, counted so `close` can wait for it.
   * @throws QuorumFenceError CLOSED once `close` was called
   */
  protected async tracked<R>(write: () => Promise<R>): Promise<R> {
    if (this.#closed) throw new QuorumFenceError('CLOSED', 'the guard is closed');
    this.#inFlight++;
    try {
      return await write();
    } finally {
      if (--this.#inFlight === 0) this.#drained?.();
    }
  }

  /** @throws QuorumFenceError CLOSED once `close` was called */
  protected checkOpen(): void {
    if (this.#closed) throw new QuorumFenceError('CLOSED', 'the guard is closed');
  }

  /** A readLog query checked against this store's page bound. */
  protected logPage(query: GuardLogQuery): { after: number; limit: number } {
    return {
      after: expectInteger(query.after ?? 0, 0, Number.MAX_SAFE_INTEGER, 'after'),
      limit: expectInteger(query.limit ?? this.maxLogPage, 1, this.maxLogPage, 'limit'),
    };
  }

  /** The log entry of a refused attempt: nothing changed, so the barrier after is the barrier before. */
  protected refusalEntry(
    seq: number,
    request: GuardRequest,
    admission: Admission,
    reason: GuardLogEntry['outcome'],
    before: bigint | undefined,
    conflictingToken?: Uint8Array,
  ): GuardLogEntry {
    return this.core.entry({
      seq,
      request,
      admission,
      outcome: reason,
      barrierBefore: before,
      barrierAfter: before,
      version: null,
      ...(conflictingToken ? { conflictingToken } : {}),
    });
  }

  /** Stops taking writes, waits for the ones in flight, then closes the store (`closeStore`). Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#inFlight > 0) await new Promise<void>((resolve) => (this.#drained = resolve));
    await this.closeStore();
  }

  /** What closing releases beyond the writes in flight (the LMDB environment; nothing for a caller's pool). */
  protected abstract closeStore(): Promise<void>;
}
