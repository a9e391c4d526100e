/**
 * Leader election on top of leases: keep trying to acquire `resource`; the
 * holder is the leader and its epoch is its term, so terms only grow and a
 * guard fencing on the epoch refuses a deposed leader's late writes. When the
 * lease is lost the campaign reports `deposed` and tries again.
 */
import { EventEmitter } from 'node:events';
import { QuorumFenceError } from '../common/errors.js';
import type { AcquireRefusal } from './acquire.js';
import { backoffDelay } from './backoff.js';
import type { QuorumFenceClient } from './client.js';
import { delay } from './delay.js';
import type { Lease, LeaseEnd } from './lease.js';

export interface CampaignOptions {
  /** Lease length (default: the client's defaultTtlMs). Shorter means faster failover and more renewals. */
  readonly ttlMs?: number;
  /** One acquire call waits this long for the current leader before starting the next (default: ttlMs). */
  readonly pollMs?: number;
  /** Stops the campaign (and resigns if leading). */
  readonly signal?: AbortSignal;
}

export interface Term {
  /** The lease's epoch: strictly larger for every new leader. */
  readonly term: bigint;
  readonly lease: Lease;
}

export interface CampaignEvents {
  /** This client became leader. */
  elected: [Term];
  /** This client stopped being leader (lease lost, expired, or resigned). */
  deposed: [{ readonly term: bigint; readonly end: LeaseEnd }];
  /** The campaign ended: resigned, aborted, client closed, or the replicas refuse this identity (forbidden/invalid). */
  stopped: [{ readonly reason: CampaignStopReason; readonly message: string }];
}

/** `failed`: an unexpected error (e.g. the resource's epochs are used up); the message says which. */
export type CampaignStopReason = 'resigned' | 'closed' | 'forbidden' | 'invalid' | 'failed';

/** A campaign for leadership; see `campaign()`. */
export class Campaign extends EventEmitter<CampaignEvents> {
  readonly resource: string;
  readonly #client: QuorumFenceClient;
  readonly #options: CampaignOptions;
  readonly #stop = new AbortController();
  #current: Term | undefined;
  readonly done: Promise<void>;

  /** @internal use campaign() */
  constructor(client: QuorumFenceClient, resource: string, options: CampaignOptions) {
    super();
    this.#client = client;
    this.resource = resource;
    this.#options = options;
    if (options.signal) {
      if (options.signal.aborted) this.#stop.abort();
      else options.signal.addEventListener('abort', () => this.#stop.abort(), { once: true });
    }
    // Started on the next turn so that listeners attached right after campaign() returns see the first election.
    this.done = Promise.resolve().then(() => this.#run());
  }

  /** True while this client holds the leadership lease. */
  get isLeader(): boolean {
    return this.#current !== undefined && this.#current.lease.active;
  }

  /** The current term while leader. */
  get term(): bigint | undefined {
    return this.isLeader ? this.#current!.term : undefined;
  }

  /** The leadership lease while leader (its tokenText fences the leader's writes). */
  get lease(): Lease | undefined {
    return this.isLeader ? this.#current!.lease : undefined;
  }

  /** Stops campaigning and releases the lease if leading. Resolves once the campaign has ended. */
  async resign(): Promise<void> {
    this.#stop.abort();
    await this.done;
  }

  async #run(): Promise<void> {
    let failures = 0;
    let stopReason: { reason: CampaignStopReason; message: string } = { reason: 'resigned', message: 'resigned' };
    const options = this.#client.options;
    const ttlMs = this.#options.ttlMs ?? options.defaultTtlMs;
    const pollMs = this.#options.pollMs ?? ttlMs;
    const stop = this.#stop.signal;
    try {
      while (!stop.aborted) {
        let result: Awaited<ReturnType<QuorumFenceClient['acquire']>>;
        try {
          result = await this.#client.acquire(this.resource, { ttlMs, waitMs: pollMs, signal: stop });
        } catch (error) {
          stopReason =
            error instanceof QuorumFenceError && error.code === 'CLOSED'
              ? { reason: 'closed', message: 'the client was closed' }
              : { reason: 'failed', message: error instanceof Error ? error.message : String(error) };
          break;
        }
        if (!result.ok) {
          const refusal: AcquireRefusal = result;
          if (refusal.reason === 'forbidden' || refusal.reason === 'invalid') {
            stopReason = { reason: refusal.reason, message: refusal.message };
            break;
          }
          if (refusal.reason === 'unavailable' || refusal.reason === 'timeout') {
            // Too few replicas: wait a little before asking again, rather than spin on a dead cluster.
            await delay(
              backoffDelay(
                failures++,
                { baseMs: options.reconnectBaseMs, maxMs: options.reconnectMaxMs },
                options.random(),
              ),
              stop,
              options.clock,
            );
          }
          continue;
        }
        failures = 0;
        const lease = result.lease;
        this.#current = { term: lease.epoch, lease };
        this.emit('elected', this.#current);
        const end = await untilEnded(lease, stop);
        this.#current = undefined;
        this.emit('deposed', { term: lease.epoch, end });
      }
    } finally {
      this.#current = undefined;
      this.emit('stopped', stopReason);
    }
  }
}

/** Waits until the lease ends; releases it if `stop` fires first. */
async function untilEnded(lease: Lease, stop: AbortSignal): Promise<LeaseEnd> {
  if (!lease.ended && !stop.aborted) {
    await new Promise<void>((resolve) => {
      const done = () => {
        stop.removeEventListener('abort', done);
        lease.off('ended', done);
        resolve();
      };
      lease.once('ended', done);
      stop.addEventListener('abort', done, { once: true });
    });
  }
  if (!lease.ended) await lease.release();
  return lease.ended!;
}

/**
 * Starts campaigning for leadership of `resource`. Listen for `elected` and
 * `deposed`; call `resign()` to stop.
 * @throws QuorumFenceError CLOSED if the client is closed.
 */
export function campaign(client: QuorumFenceClient, resource: string, options: CampaignOptions = {}): Campaign {
  if (client.isClosed) throw new QuorumFenceError('CLOSED', 'the client is closed');
  return new Campaign(client, resource, options);
}
