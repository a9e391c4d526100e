/**
 * The workload of scenarios and chaos runs: read-modify-write increments of
 * counters kept by the reference resource (`quorumfence resource`), each
 * under a lease, with a fenced read (the read raises the barrier, so no older
 * holder can write after it) and a compare-and-set write (If-Version), so an
 * increment is never lost and never applied twice. A recorder keeps what the
 * history checker needs: every token obtained, every acknowledged write.
 */
import { toHex } from '../common/bytes.js';
import { QuorumFenceError } from '../common/errors.js';
import { localOperatorSecret } from '../common/operator-secret.js';
import type { Lease, QuorumFenceClient } from '../client/index.js';
import { parseGuardLogEntry, type GuardLogEntry } from '../guard/log.js';
import { tokenDigest, type AdmissionToken } from '../token/admission-token.js';
import type { AcknowledgedWrite, History } from './history-checker.js';

/** A plain read's result: the value (undefined: the key is absent, version 0), or why it could not be read. */
export type CommittedRead =
  | { readonly ok: true; readonly value: Uint8Array | undefined; readonly version: number }
  | { readonly ok: false; readonly code: string; readonly message: string };

/** What the reference resource answered to one fenced request. */
export type ResourceAnswer =
  | {
      readonly ok: true;
      readonly status: number;
      readonly version: number | null;
      readonly value: Uint8Array | undefined;
      readonly seq: number | null;
    }
  | { readonly ok: false; readonly status: number; readonly code: string; readonly message: string };

/** An HTTP request to the resource should take milliseconds; 5 s allows a loaded machine and a slow fsync. */
const DEFAULT_RESOURCE_TIMEOUT_MS = 5_000;

/**
 * Attempts of a request without a token that failed before any answer. Each
 * stale pooled connection fails once and is dropped; a few cover the handful
 * a run keeps open, and a resource that is really down still fails fast.
 */
const REPEATABLE_ATTEMPTS = 4;

/** fetch's own message is "fetch failed"; the cause says why (other side closed, ECONNREFUSED, ...). */
function fetchFailure(error: unknown): string {
  const { message, cause } = error as Error & { cause?: { message?: unknown; code?: unknown } };
  if (cause === undefined || cause === null) return message;
  const code = typeof cause.code === 'string' ? ` (${cause.code})` : '';
  return `${message}: ${String(cause.message)}${code}`;
}

/** A small client of the reference resource's HTTP API (src/guard/README.md, "The reference resource"). */
export class ResourceHttpClient {
  readonly url: string;
  readonly #timeoutMs: number;
  readonly #operatorSecret: string;

  /**
   * @param options.operatorSecret what unlocks the tokens in the resource's log (the history checker verifies
   *   them). Default: localOperatorSecret(), which the local launcher gives every resource it starts.
   */
  constructor(url: string, options: { timeoutMs?: number; operatorSecret?: string } = {}) {
    this.url = url.replace(/\/+$/, '');
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_RESOURCE_TIMEOUT_MS;
    this.#operatorSecret = options.operatorSecret ?? localOperatorSecret();
  }

  #kv(resource: string, key: string): string {
    return `${this.url}/kv/${encodeURIComponent(resource)}/${encodeURIComponent(key)}`;
  }

  /**
   * One request. `repeatable` (a request without a token: a plain read, the
   * log) is sent again, a bounded number of times, when it failed before any
   * answer came back: HTTP/1.1 lets a server close an idle keep-alive
   * connection at any moment, and a client whose event loop was busy past the
   * server's keep-alive timeout (the history check after a long run) sends its
   * next request on the closed socket ("other side closed"). Repeating a
   * request that carries no token changes nothing. Requests with a token are
   * never repeated here: the caller sees `unreachable` and decides.
   */
  async #fetch(
    url: string,
    init: RequestInit,
    repeatable: boolean,
  ): Promise<{ readonly response: Response } | { readonly code: 'timeout' | 'unreachable'; readonly message: string }> {
    for (let attempt = 1; ; attempt++) {
      try {
        return { response: await fetch(url, { ...init, signal: AbortSignal.timeout(this.#timeoutMs) }) };
      } catch (error) {
        const timedOut = (error as Error).name === 'TimeoutError';
        if (repeatable && !timedOut && attempt < REPEATABLE_ATTEMPTS) continue;
        return timedOut
          ? { code: 'timeout', message: `no answer in ${this.#timeoutMs} ms` }
          : { code: 'unreachable', message: fetchFailure(error) };
      }
    }
  }

  async #send(url: string, init: RequestInit, repeatable = false): Promise<ResourceAnswer> {
    const sent = await this.#fetch(url, init, repeatable);
    if (!('response' in sent)) return { ok: false, status: 0, ...sent };
    const { response } = sent;
    const version = response.headers.get('quorumfence-version');
    const seq = response.headers.get('quorumfence-seq');
    const type = response.headers.get('content-type') ?? '';
    if (response.status === 200 && !type.startsWith('application/json')) {
      return {
        ok: true,
        status: 200,
        version: version === null ? null : Number(version),
        value: new Uint8Array(await response.arrayBuffer()),
        seq: seq === null ? null : Number(seq),
      };
    }
    const body = (await response.json().catch(() => ({}))) as Record<string, unknown>;
    if (response.status === 200) {
      return {
        ok: true,
        status: 200,
        version: typeof body.version === 'number' ? body.version : null,
        value: undefined,
        seq: typeof body.seq === 'number' ? body.seq : null,
      };
    }
    // A fenced read of an absent key passed the fence: the key is at version 0.
    if (response.status === 404 && seq !== null)
      return { ok: true, status: 404, version: 0, value: undefined, seq: Number(seq) };
    return {
      ok: false,
      status: response.status,
      code: String(body.code ?? 'unknown'),
      message: String(body.message ?? ''),
    };
  }

  /** A fenced read: through the guard with the token (raises the barrier when the epoch is new). */
  fencedRead(resource: string, key: string, token: string): Promise<ResourceAnswer> {
    return this.#send(this.#kv(resource, key), { method: 'GET', headers: { authorization: `QuorumFence ${token}` } });
  }

  /** A fenced write; with `ifVersion`, only if the key is still at that version (0: absent). */
  put(
    resource: string,
    key: string,
    value: Uint8Array | string,
    token: string,
    ifVersion?: number,
  ): Promise<ResourceAnswer> {
    const headers: Record<string, string> = {
      authorization: `QuorumFence ${token}`,
      'content-type': 'application/octet-stream',
    };
    if (ifVersion !== undefined) headers['quorumfence-if-version'] = String(ifVersion);
    return this.#send(this.#kv(resource, key), {
      method: 'PUT',
      headers,
      body: typeof value === 'string' ? value : Buffer.from(value),
    });
  }

  /**
   * A plain read of the committed value (no token, no fence), telling an
   * absent key (`value` undefined, version 0) from a read that failed
   * (`ok: false` with the code: unreachable, timeout, or the resource's own).
   */
  async readCommitted(resource: string, key: string): Promise<CommittedRead> {
    const answer = await this.#send(this.#kv(resource, key), { method: 'GET' }, true);
    if (answer.ok) return { ok: true, value: answer.value, version: answer.version ?? 0 };
    if (answer.status === 404 && answer.code === 'not_found') return { ok: true, value: undefined, version: 0 };
    return { ok: false, code: answer.code, message: answer.message };
  }

  /**
   * A plain read of the committed value; undefined when absent.
   * @throws QuorumFenceError CONNECTION_FAILED or TIMEOUT when the resource did not answer, IO_ERROR when it
   *   answered with an error: a read that failed is never reported as an absent key
   */
  async read(resource: string, key: string): Promise<{ value: Uint8Array; version: number } | undefined> {
    const answer = await this.readCommitted(resource, key);
    if (!answer.ok) {
      const code =
        answer.code === 'timeout' ? 'TIMEOUT' : answer.code === 'unreachable' ? 'CONNECTION_FAILED' : 'IO_ERROR';
      throw new QuorumFenceError(
        code,
        `could not read ${resource}/${key} at ${this.url}: ${answer.code}: ${answer.message}`,
      );
    }
    return answer.value === undefined ? undefined : { value: answer.value, version: answer.version };
  }

  /**
   * The whole guard log, page by page, each entry checked.
   * @throws QuorumFenceError CONNECTION_FAILED or TIMEOUT when the resource did not answer, IO_ERROR when it refused
   */
  async readLog(): Promise<GuardLogEntry[]> {
    const entries: GuardLogEntry[] = [];
    for (let after = 0; ;) {
      const url = `${this.url}/log?after=${after}&limit=1000`;
      const sent = await this.#fetch(url, { headers: { authorization: `Bearer ${this.#operatorSecret}` } }, true);
      if (!('response' in sent))
        throw new QuorumFenceError(
          sent.code === 'timeout' ? 'TIMEOUT' : 'CONNECTION_FAILED',
          `could not read the guard log at ${this.url}: ${sent.code}: ${sent.message}`,
        );
      if (sent.response.status !== 200)
        throw new QuorumFenceError('IO_ERROR', `the guard log at ${this.url} answered HTTP ${sent.response.status}`);
      const body = (await sent.response.json()) as { entries: unknown[] };
      if (body.entries.length === 0) return entries;
      for (const raw of body.entries) entries.push(parseGuardLogEntry(raw));
      after = entries[entries.length - 1]!.seq;
    }
  }
}

/** hex SHA-256 of a token, as guard logs and acknowledged writes name it. */
export function tokenDigestHex(token: AdmissionToken): string {
  return toHex(tokenDigest(token));
}

/** Everything a run saw, for the history checker and the report. */
export class WorkloadRecorder {
  readonly tokens: string[] = [];
  /** The share generation (membershipVersion of the client's description) each token was obtained under. */
  readonly tokenGenerations = new Map<string, number>();
  readonly acknowledged: AcknowledgedWrite[] = [];
  /** Increments attempted, and how each ended. */
  operations = 0;
  readonly outcomes: Record<string, number> = {};
  /** Keys the workload wrote, as `resource \u0000 key`. */
  readonly keys = new Set<string>();

  /** A token the workload obtained, by a client of membership `generation` (0 before any reshare). */
  token(text: string, generation = 0): void {
    this.tokens.push(text);
    if (!this.tokenGenerations.has(text)) this.tokenGenerations.set(text, generation);
  }

  outcome(kind: string): void {
    this.outcomes[kind] = (this.outcomes[kind] ?? 0) + 1;
  }

  /**
   * One plain read of every key the run wrote (`resource \u0000 key` → what it
   * holds, or why it could not be read). Take them while the system is quiet
   * and before long computations, and use the same reads for the history and
   * the counters, so both judge one state.
   */
  async finalReads(resource: ResourceHttpClient): Promise<Map<string, CommittedRead>> {
    const reads = new Map<string, CommittedRead>();
    for (const slot of this.keys) {
      const [name, key] = slot.split('\u0000') as [string, string];
      reads.set(slot, await resource.readCommitted(name, key));
    }
    return reads;
  }

  /**
   * The history of a run against one reference resource: its log, the tokens
   * and acknowledgements recorded here, and each written key's final version
   * (from `finalReads`, read now when not given). Keys that could not be read
   * go to `unreadFinal`, never into the history as absent.
   */
  async history(resource: ResourceHttpClient, finalReads?: ReadonlyMap<string, CommittedRead>): Promise<History> {
    const guardLog = await resource.readLog();
    const reads = finalReads ?? (await this.finalReads(resource));
    const finalVersions = new Map<string, number>();
    const unread = new Set<string>();
    for (const [slot, read] of reads) {
      if (!read.ok) unread.add(slot);
      else if (read.value !== undefined) finalVersions.set(slot, read.version);
    }
    return {
      guardLogs: [guardLog],
      capturedTokens: this.tokens,
      acknowledged: this.acknowledged,
      finalVersions: [finalVersions],
      unreadFinal: [unread],
      tokenGenerations: this.tokenGenerations,
    };
  }
}

export type IncrementOutcome =
  | { readonly kind: 'incremented'; readonly epoch: bigint; readonly value: number; readonly version: number }
  | { readonly kind: 'not_acquired'; readonly reason: string }
  /** The guard refused the read or the write (stale, version_mismatch, ...): nothing was applied. */
  | { readonly kind: 'refused'; readonly at: 'read' | 'write'; readonly code: string }
  /** The lease ended before the write could be sent; nothing was written. */
  | { readonly kind: 'lease_lost' };

export interface IncrementOptions {
  readonly ttlMs: number;
  readonly waitMs: number;
  readonly timeoutMs?: number;
  readonly signal?: AbortSignal;
}

/**
 * Performs one fenced increment of `resource`/`key` with a lease from
 * `client`: acquire, fenced read, compare-and-set write, release. Records the
 * token and, on success, the acknowledged write.
 */
export async function incrementCounter(
  client: QuorumFenceClient,
  resourceClient: ResourceHttpClient,
  resource: string,
  key: string,
  recorder: WorkloadRecorder,
  options: IncrementOptions,
): Promise<IncrementOutcome> {
  recorder.operations++;
  const acquired = await client.acquire(resource, {
    ttlMs: options.ttlMs,
    waitMs: options.waitMs,
    ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
    ...(options.signal ? { signal: options.signal } : {}),
  });
  if (!acquired.ok) {
    recorder.outcome(`not_acquired:${acquired.reason}`);
    return { kind: 'not_acquired', reason: acquired.reason };
  }
  const lease = acquired.lease;
  recorder.token(lease.tokenText, client.cluster.membershipVersion);
  try {
    return await writeIncrement(lease, resourceClient, resource, key, recorder);
  } finally {
    await lease.release().catch(() => undefined);
  }
}

/**
 * The read-modify-write under an already acquired lease. By default it checks
 * the lease view before writing, as a careful holder does; `checkLease: false`
 * is the holder that checked just before a long pause (GC, SIGSTOP): its
 * stale write is then the guard's to refuse, and scenarios make one on purpose.
 */
export async function writeIncrement(
  lease: Lease,
  resourceClient: ResourceHttpClient,
  resource: string,
  key: string,
  recorder: WorkloadRecorder,
  options: { checkLease?: boolean } = {},
): Promise<IncrementOutcome> {
  recorder.keys.add(`${resource}\u0000${key}`);
  const read = await resourceClient.fencedRead(resource, key, lease.tokenText);
  if (!read.ok) {
    recorder.outcome(`read:${read.code}`);
    return { kind: 'refused', at: 'read', code: read.code };
  }
  const current = read.value === undefined ? 0 : Number(new TextDecoder().decode(read.value));
  if ((options.checkLease ?? true) && !lease.active) {
    recorder.outcome('lease_lost');
    return { kind: 'lease_lost' };
  }
  const value = current + 1;
  const written = await resourceClient.put(resource, key, String(value), lease.tokenText, read.version ?? 0);
  if (!written.ok) {
    recorder.outcome(`write:${written.code}`);
    return { kind: 'refused', at: 'write', code: written.code };
  }
  recorder.outcome('incremented');
  recorder.acknowledged.push({
    guard: 0,
    resource,
    key,
    tokenDigest: tokenDigestHex(lease.token),
    version: written.version ?? 0,
  });
  return { kind: 'incremented', epoch: lease.epoch, value, version: written.version ?? 0 };
}

/**
 * Counter check over a guard log: each key's final value must equal the
 * number of accepted writes to it (each accepted compare-and-set adds exactly
 * one). Returns the keys where it does not hold.
 */
export function lostIncrements(
  log: readonly GuardLogEntry[],
  finalValues: ReadonlyMap<string, number>,
): { slot: string; accepted: number; value: number }[] {
  const accepted = acceptedWrites(log);
  const wrong: { slot: string; accepted: number; value: number }[] = [];
  for (const [slot, value] of finalValues) {
    const count = accepted.get(slot) ?? 0;
    if (count !== value) wrong.push({ slot, accepted: count, value });
  }
  return wrong;
}

/** A counter's final value as a number: an absent key has never been incremented (0). */
export function counterValue(read: CommittedRead & { ok: true }): number {
  return read.value === undefined ? 0 : Number(new TextDecoder().decode(read.value));
}

/**
 * The counter check over final reads (`WorkloadRecorder.finalReads`): keys
 * whose value differs from their accepted writes, and, apart, keys that
 * could not be read (with the code and reason), which prove nothing either
 * way and are never counted as 0.
 */
export function counterCheck(
  log: readonly GuardLogEntry[],
  finalReads: ReadonlyMap<string, CommittedRead>,
): {
  readonly mismatches: { slot: string; accepted: number; value: number }[];
  readonly unread: { slot: string; accepted: number; code: string; message: string }[];
} {
  const values = new Map<string, number>();
  const unread: { slot: string; accepted: number; code: string; message: string }[] = [];
  const accepted = acceptedWrites(log);
  for (const [slot, read] of finalReads) {
    if (read.ok) values.set(slot, counterValue(read));
    else unread.push({ slot, accepted: accepted.get(slot) ?? 0, code: read.code, message: read.message });
  }
  return { mismatches: lostIncrements(log, values), unread };
}

/** Accepted puts per `resource \u0000 key`. */
function acceptedWrites(log: readonly GuardLogEntry[]): Map<string, number> {
  const accepted = new Map<string, number>();
  for (const entry of log) {
    if (entry.accepted && entry.op === 'put' && entry.key !== null) {
      const slot = `${entry.resource}\u0000${entry.key}`;
      accepted.set(slot, (accepted.get(slot) ?? 0) + 1);
    }
  }
  return accepted;
}
