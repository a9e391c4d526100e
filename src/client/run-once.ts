/**
 * A fenced once-only runner (singleflight across processes, or an
 * idempotency key): the work for a key runs under a lease on the key's
 * resource, and its result is stored through a guard with the lease's token.
 * A second caller finds the stored result and returns it without running the
 * work. If a holder stalls past its lease and a second one runs the work too,
 * the guard's fence lets only one result in (the newer epoch's, or the first
 * stored), and both callers return that one.
 */
import { QuorumFenceError } from '../common/errors.js';
import type { AdmissionToken } from '../token/admission-token.js';
import type { AcquireRefusal } from './acquire.js';
import type { AcquireOptions, QuorumFenceClient } from './client.js';
import type { Lease } from './lease.js';

export type ResultWrite =
  | { readonly ok: true }
  /** `exists`: a result is already stored; `fenced`: the guard refused the token (stale, conflict); `refused`: any other refusal. */
  | { readonly ok: false; readonly reason: 'exists' | 'fenced' | 'refused'; readonly message: string };

/** Where results live. `write` must be fenced by the token and refuse to replace a stored result. */
export interface ResultStore {
  /** The stored result for the work named `resource`, if any. */
  read(resource: string): Promise<Uint8Array | undefined> | Uint8Array | undefined;
  /** Stores `value` for `resource`, fenced by `token` (a token for that resource), unless a result is already stored. */
  write(resource: string, value: Uint8Array, token: AdmissionToken): Promise<ResultWrite>;
}

/**
 * The part of a guard store the runner uses: the LMDB guard (src/guard) has
 * this shape; other stores can implement ResultStore directly.
 */
export interface KeyValueGuard {
  read(resource: string, key: string): { readonly value: Uint8Array } | undefined;
  write<T>(
    request: {
      readonly token: Uint8Array | string;
      readonly resource: string;
      readonly op?: string;
      readonly key?: string;
    },
    mutation: (tx: {
      get(key: string): { readonly value: Uint8Array } | undefined;
      put(key: string, value: Uint8Array): void;
      refuse(reason: 'version_mismatch', message?: string): unknown;
    }) => T,
  ): Promise<{ readonly ok: true } | { readonly ok: false; readonly reason: string; readonly message: string }>;
}

/** The key under the work's resource where the guard adapter keeps the result. */
export const RESULT_KEY = 'result';

/**
 * A ResultStore over a guard: the result is key `result` of the work's
 * resource, written in the guard's fenced transaction only if absent.
 */
export function guardResultStore(guard: KeyValueGuard): ResultStore {
  return {
    read: (resource) => guard.read(resource, RESULT_KEY)?.value,
    async write(resource, value, token) {
      const outcome = await guard.write({ token: token.bytes, resource, op: 'once', key: RESULT_KEY }, (tx) => {
        if (tx.get(RESULT_KEY)) return tx.refuse('version_mismatch', 'a result is already stored');
        tx.put(RESULT_KEY, value);
        return undefined;
      });
      if (outcome.ok) return { ok: true };
      if (outcome.reason === 'version_mismatch') return { ok: false, reason: 'exists', message: outcome.message };
      if (outcome.reason === 'stale' || outcome.reason === 'conflict')
        return { ok: false, reason: 'fenced', message: outcome.message };
      return { ok: false, reason: 'refused', message: `${outcome.reason}: ${outcome.message}` };
    },
  };
}

export interface RunOnceOptions<T> extends AcquireOptions {
  /** Prefix of the resource each key runs under (default `once/`); replicas' access rules can name it. */
  readonly resourcePrefix?: string;
  /** Result encoding (default: JSON as UTF-8). */
  readonly encode?: (value: T) => Uint8Array;
  readonly decode?: (bytes: Uint8Array) => T;
}

export interface OnceContext {
  readonly lease: Lease;
  /** Fires when the lease is lost: the result will probably be refused, so stop early. */
  readonly signal: AbortSignal;
}

export type RunOnceResult<T> =
  | {
      readonly ok: true;
      readonly value: T;
      /** True when this call ran the work and stored its result; false when it returned a stored one. */
      readonly ran: boolean;
    }
  | AcquireRefusal
  | {
      readonly ok: false;
      /** The work ran but the guard refused its result and none is stored: the lease was overtaken. Safe to call again. */
      readonly reason: 'fenced' | 'refused';
      readonly message: string;
    };

const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder();

/**
 * Runs `work` at most once per `key` (across processes sharing the cluster
 * and the store) and returns its result; later callers get the stored result.
 * Waits up to `options.waitMs` for a concurrent run of the same key to finish.
 * @throws whatever `work` throws (nothing is stored then); QuorumFenceError for bad arguments.
 */
export async function runOnce<T>(
  client: QuorumFenceClient,
  store: ResultStore,
  key: string,
  work: (context: OnceContext) => Promise<T> | T,
  options: RunOnceOptions<T> = {},
): Promise<RunOnceResult<T>> {
  const {
    resourcePrefix = 'once/',
    encode = (v: T) => utf8.encode(JSON.stringify(v)),
    decode = (b: Uint8Array) => JSON.parse(utf8Decoder.decode(b)) as T,
    ...acquireOptions
  } = options;
  if (typeof key !== 'string' || key.length === 0)
    throw new QuorumFenceError('INVALID_ARGUMENT', '"key" expected a non-empty string', { field: 'key' });
  const resource = resourcePrefix + key;
  const stored = await store.read(resource);
  if (stored !== undefined) return { ok: true, value: decode(stored), ran: false };

  const acquired = await client.acquire(resource, acquireOptions);
  if (!acquired.ok) return acquired;
  const lease = acquired.lease;
  try {
    // Someone may have finished while we waited for the lease.
    const finished = await store.read(resource);
    if (finished !== undefined) return { ok: true, value: decode(finished), ran: false };
    const value = await work({ lease, signal: lease.signal });
    const written = await store.write(resource, encode(value), lease.token);
    if (written.ok) return { ok: true, value, ran: true };
    const winner = await store.read(resource);
    if (winner !== undefined) return { ok: true, value: decode(winner), ran: false };
    return { ok: false, reason: written.reason === 'fenced' ? 'fenced' : 'refused', message: written.message };
  } finally {
    await lease.release();
  }
}
