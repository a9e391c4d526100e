/**
 * The workload of scenarios and chaos runs: read-modify-write increments of
 * counters kept by the reference resource (`quorumfence resource`), each
 * under a lease, with a fenced read (the read raises the barrier, so no older
 * holder can write after it) and a compare-and-set write (If-Version), so an
 * increment is never lost and never applied twice. A recorder keeps what the
 * history checker needs: every token obtained, every acknowledged write.
 */
import { toHex } from '../common/bytes.js';
import { localOperatorSecret } from '../common/operator-secret.js';
import type { Lease, QuorumFenceClient } from '../client/index.js';
import { parseGuardLogEntry, type GuardLogEntry } from '../guard/log.js';
import { tokenDigest, type AdmissionToken } from '../token/admission-token.js';
import type { AcknowledgedWrite, History } from './history-checker.js';

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

/** A plain read's outcome: the committed value (or its absence), or why the read could not be made. */
export type CommittedRead =
  | { readonly ok: true; readonly stored: { readonly value: Uint8Array; readonly version: number } | undefined }
  | { readonly ok: false; readonly code: string; readonly message: string };

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

  async #send(url: string, init: RequestInit): Promise<ResourceAnswer> {
    let response: Response;
    try {
      response = await fetch(url, { ...init, signal: AbortSignal.timeout(this.#timeoutMs) });
    } catch (error) {
      return { ok: false, status: 0, code: 'unreachable', message: (error as Error).message };
    }
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
   * A plain read of the committed value (no token, no fence): `stored` is undefined when the key is absent.
   * A read that could not be made (unreachable, refused) says why instead: never mistaken for an absent key.
   */
  async read(resource: string, key: string): Promise<CommittedRead> {
    const answer = await this.#send(this.#kv(resource, key), { method: 'GET' });
    if (answer.ok && answer.value !== undefined)
      return { ok: true, stored: { value: answer.value, version: answer.version ?? 0 } };
    if (!answer.ok && answer.status === 404 && answer.code === 'not_found') return { ok: true, stored: undefined };
    if (answer.ok) return { ok: false, code: 'unexpected_answer', message: `status ${answer.status} without a value` };
    return { ok: false, code: answer.code, message: `status ${answer.status}: ${answer.message}` };
  }

  /** The whole guard log, page by page, each entry checked. */
  async readLog(): Promise<GuardLogEntry[]> {
    const entries: GuardLogEntry[] = [];
    for (let after = 0; ;) {
      const response = await fetch(`${this.url}/log?after=${after}&limit=1000`, {
        headers: { authorization: `Bearer ${this.#operatorSecret}` },
        signal: AbortSignal.timeout(this.#timeoutMs),
      });
      const body = (await response.json()) as { entries: unknown[] };
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
  readonly acknowledged: AcknowledgedWrite[] = [];
  /** Increments attempted, and how each ended. */
  operations = 0;
  readonly outcomes: Record<string, number> = {};
  /** Final reads that failed and were retried, with the reason (`resource/key: code (why)`). */
  readonly failedFinalReads: string[] = [];
  /** Keys the workload wrote, as `resource \u0000 key`. */
  readonly keys = new Set<string>();

  token(text: string): void {
    this.tokens.push(text);
  }

  outcome(kind: string): void {
    this.outcomes[kind] = (this.outcomes[kind] ?? 0) + 1;
  }

  /**
   * Every written key's committed value, read once the run is over. A read that fails is retried (the resource
   * may still be catching up with the faults just healed) and, if it keeps failing, reported with its reason:
   * "could not read" must never pass for a value or an absent key.
   */
  async finalReads(resource: ResourceHttpClient): Promise<Map<string, CommittedRead>> {
    const reads = new Map<string, CommittedRead>();
    for (const slot of this.keys) {
      const [name, key] = slot.split('\u0000') as [string, string];
      let read = await resource.read(name, key);
      for (let attempt = 1; !read.ok && attempt < FINAL_READ_ATTEMPTS; attempt++) {
        this.failedFinalReads.push(`${name}/${key}: ${read.code} (${read.message})`);
        await new Promise((resolve) => setTimeout(resolve, 250 * 2 ** attempt));
        read = await resource.read(name, key);
      }
      reads.set(slot, read);
    }
    return reads;
  }

  /**
   * The history of a run against one reference resource: its log, the tokens and acknowledgements recorded
   * here, and each written key's final version (from `reads`, or read now). Keys that could not be read are
   * left out of `finalVersions` and named in `unreadable`.
   */
  async history(resource: ResourceHttpClient, reads?: ReadonlyMap<string, CommittedRead>): Promise<History> {
    const guardLog = await resource.readLog();
    const finalVersions = new Map<string, number>();
    const unreadable = new Map<string, string>();
    for (const [slot, read] of reads ?? (await this.finalReads(resource))) {
      if (!read.ok) unreadable.set(slot, `${read.code}: ${read.message}`);
      else if (read.stored) finalVersions.set(slot, read.stored.version);
    }
    return {
      guardLogs: [guardLog],
      capturedTokens: this.tokens,
      acknowledged: this.acknowledged,
      finalVersions: [finalVersions],
      unreadable: [unreadable],
    };
  }
}

/**
 * Counter values from final reads (an absent key counts 0); counters that could not be read are listed apart
 * as `resource/key: code (why)`, never counted as 0.
 */
export function counterValues(reads: ReadonlyMap<string, CommittedRead>): {
  values: Map<string, number>;
  unreadable: string[];
} {
  const values = new Map<string, number>();
  const unreadable: string[] = [];
  for (const [slot, read] of reads) {
    if (!read.ok) unreadable.push(`${slot.replace('\u0000', '/')}: ${read.code} (${read.message})`);
    else values.set(slot, read.stored ? Number(new TextDecoder().decode(read.stored.value)) : 0);
  }
  return { values, unreadable };
}

/** Final reads are retried this many times in all, waiting 0.5, 1, 2, 4 s between them. */
const FINAL_READ_ATTEMPTS = 5;

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
  recorder.token(lease.tokenText);
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
  const accepted = new Map<string, number>();
  for (const entry of log) {
    if (entry.accepted && entry.op === 'put' && entry.key !== null) {
      const slot = `${entry.resource}\u0000${entry.key}`;
      accepted.set(slot, (accepted.get(slot) ?? 0) + 1);
    }
  }
  const wrong: { slot: string; accepted: number; value: number }[] = [];
  for (const [slot, value] of finalValues) {
    const count = accepted.get(slot) ?? 0;
    if (count !== value) wrong.push({ slot, accepted: count, value });
  }
  return wrong;
}
