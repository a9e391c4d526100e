/**
 * A held lease: the admission token, the holder's own view of how long the
 * lease lasts, automatic renewal, release, and a signal that fires the moment
 * the lease can no longer be relied on. Neither renewal nor release holds the
 * holder up: renewals run on their own timer, and a release resolves once it is
 * sent (the replicas' answers change nothing for the holder).
 *
 * The view ends at sentAt + ttl - margin (lease-timing.ts), where sentAt was
 * read before the request left; so the holder stops before any replica's
 * lease runs out. Renewal starts at a share of the ttl and retries until the
 * view ends. Ending is final: a renewal that answers after the view ended does
 * not revive the lease, because work that saw the signal has already stopped.
 */
import { EventEmitter } from 'node:events';
import type { TimerHandle } from '../common/clock.js';
import { QuorumFenceError } from '../common/errors.js';
import { toHex } from '../common/bytes.js';
import { tokenToText, type AdmissionToken } from '../token/admission-token.js';
import type { AcquiredGrant } from './acquire.js';
import { backoffDelay } from './backoff.js';
import type { ReplicaFault } from './evidence.js';
import {
  joinLease,
  releaseGrant,
  releaseQuietly,
  renewGrant,
  type GrantRef,
  type ReleaseInFlight,
  type ReleaseResult,
  type RenewResult,
} from './lease-calls.js';
import { joinTime, localExpiry, renewalTime } from './lease-timing.js';
import type { QuorumContext } from './quorum-context.js';

/** Why a lease ended. */
export type LeaseEndReason =
  /** The holder released it. */
  | 'released'
  /** The holder's view ran out without a successful renewal (replicas slow or unreachable, or renewal off). */
  | 'expired'
  /** f+1 replicas said this holder no longer holds the epoch. */
  | 'lost'
  /** The client was closed, so nothing can renew the lease. */
  | 'closed';

export interface LeaseEnd {
  readonly reason: LeaseEndReason;
  readonly message: string;
}

export interface LeaseEvents {
  /** A renewal succeeded; the view now ends at `expiresAt` (client clock). */
  renewed: [{ readonly expiresAt: number }];
  /** The lease ended without the holder releasing it (expired, lost, closed). */
  lost: [LeaseEnd];
  /** The lease ended for any reason, release included. */
  ended: [LeaseEnd];
}

/**
 * What `lease.release()` resolves with by default: the release is on its way to `sent` replicas (the connected
 * ones among those asked to grant; 0 when none was connected, and the lease then ends at the replicas with its
 * ttl). The lease is over for the holder either way; a release that is lost only keeps the next holder out until
 * the lease ends at the replicas.
 */
export interface ReleaseSent {
  readonly ok: true;
  readonly sent: number;
}

export interface ReleaseOptions {
  /**
   * Resolve with the replicas' answers (`ReleaseResult`: t confirmed, or why not) instead of once the release
   * is sent (default false).
   */
  readonly wait?: boolean;
}

export interface LeaseOptions {
  /** Renew automatically before the view ends (default true). */
  readonly autoRenew: boolean;
  /** Called once when the lease ends without a release. */
  readonly onLost?: ((end: LeaseEnd) => void) | undefined;
}

/** Created by QuorumFenceClient.acquire; not constructed directly. */
export class Lease extends EventEmitter<LeaseEvents> implements AsyncDisposable {
  readonly resource: string;
  readonly epoch: bigint;
  readonly token: AdmissionToken;
  /** The token in text form (base64url), as guards and the `verify` verb take it. */
  readonly tokenText: string;
  /** The holder's Ed25519 public key. */
  readonly holder: Uint8Array;
  readonly holderHex: string;
  readonly ttlMs: number;
  /** Replicas whose partials formed the token. */
  readonly signers: readonly number[];
  /** Replicas that misbehaved while this lease was acquired. */
  readonly faults: readonly ReplicaFault[];

  readonly #ctx: QuorumContext;
  readonly #options: LeaseOptions;
  /**
   * Replicas known to hold the lease: the signers, and those that joined or renewed it since. Renewals and releases
   * go to every replica (any may have joined); only these replicas' denials count against the lease.
   */
  readonly #holders: Set<number>;
  /** f+1 of the signers' partials, sent with renewals to the replicas not known to hold the lease (to join it). */
  readonly #evidence: AcquiredGrant['evidence'];
  /** Made when `signal` is first read: most leases end without anyone listening, and aborting costs an error. */
  #controller: AbortController | undefined;
  #sentAt: number;
  #end: LeaseEnd | undefined;
  #expiryTimer: TimerHandle;
  #renewTimer: TimerHandle;
  #joinTimer: TimerHandle;
  #renewFailures = 0;
  /** Replicas the first release was sent to; undefined until the holder releases. */
  #releaseSent: number | undefined;
  /** The answered release round, once a caller asked to wait for answers. */
  #answeredRelease: ReleaseInFlight | undefined;
  readonly #detach: () => void;

  /** @internal */
  constructor(
    ctx: QuorumContext,
    grant: AcquiredGrant,
    faults: readonly ReplicaFault[],
    options: LeaseOptions,
    track: (lease: Lease) => () => void,
  ) {
    super();
    this.#ctx = ctx;
    this.#options = options;
    const g = grant.token.grant;
    this.resource = g.resource;
    this.epoch = g.epoch;
    this.token = grant.token;
    this.tokenText = tokenToText(grant.token);
    this.holder = g.holder;
    this.holderHex = toHex(g.holder);
    this.ttlMs = grant.ttlMs;
    this.signers = grant.signers;
    this.#holders = new Set(grant.signers);
    this.#evidence = grant.evidence;
    this.faults = faults;
    this.#sentAt = grant.sentAt;
    this.#detach = track(this);
    this.#schedule();
    this.#scheduleJoin();
  }

  /** Asks the non-signers to join at joinTime (a renewal before then asks them too, and the join round only the rest). */
  #scheduleJoin(): void {
    const { clock } = this.#ctx.options;
    const joinAt = joinTime(this.#sentAt, this.ttlMs, this.#ctx.options);
    this.#joinTimer = clock.setTimeout(() => this.#guard(() => this.#join()), Math.max(0, joinAt - clock.now()), {
      unref: true,
    });
  }

  /**
   * The replicas that did not sign the grant join its lease, off the holder's path: then any t replicas can renew
   * it, so no f of them, signers included, can cost the holder its lease (docs/protocol.md, "Leases that outlive f
   * signers"). Asked at joinTime, a tenth of the ttl after the grant (at most 1 s, never after the first renewal): a
   * lease released by then never costs them a join (f+1 partial checks and a record write each: about a tenth of
   * the bench loops' cycles at a 2 ms round trip when every grant was joined at once, docs/performance.md, run 17),
   * and one held longer has them well before its first renewal needs t replicas. A replica that cannot join then is
   * asked again with every renewal.
   */
  #join(): void {
    if (this.#end) return;
    joinLease(this.#ctx, this.#ref(), this.ttlMs).then(
      (joined) => {
        if (!this.#end) for (const replica of joined) this.#holders.add(replica);
      },
      (error: unknown) =>
        this.#ctx.options.logger.warn({ err: error, resource: this.resource }, 'joining a lease failed'),
    );
  }

  /** Replicas known to hold the lease now (the signers, and those that joined or renewed it). */
  get holders(): readonly number[] {
    return [...this.#holders].sort((a, b) => a - b);
  }

  /** Aborts when the lease ends, for any reason; `signal.reason` is a QuorumFenceError with code LEASE_LOST. */
  get signal(): AbortSignal {
    if (!this.#controller) {
      this.#controller = new AbortController();
      if (this.#end) this.#controller.abort(this.#lostError(this.#end));
    }
    return this.#controller.signal;
  }

  /** The end of the holder's view, on the client's monotonic clock. */
  get expiresAt(): number {
    return localExpiry(this.#sentAt, this.ttlMs, this.#ctx.options);
  }

  /** Milliseconds the holder may still rely on the lease; 0 once it ended. */
  get remainingMs(): number {
    return this.#end ? 0 : Math.max(0, this.expiresAt - this.#ctx.options.clock.now());
  }

  /** Still held, as far as the holder can tell. */
  get active(): boolean {
    return this.#end === undefined && this.remainingMs > 0;
  }

  /** How it ended, once it has. */
  get ended(): LeaseEnd | undefined {
    return this.#end;
  }

  /**
   * @throws QuorumFenceError LEASE_LOST if the lease has ended, naming how.
   */
  assertActive(): void {
    if (!this.active) throw this.#lostError(this.#end ?? { reason: 'expired', message: 'the lease view ran out' });
  }

  /**
   * Renews now, extending the lease by its ttl from the moment the request
   * leaves. Automatic renewal calls this too; calling it by hand is only
   * needed with `autoRenew: false`.
   */
  async renew(signal?: AbortSignal): Promise<RenewResult> {
    if (this.#end)
      return {
        ok: false,
        reason: 'lost',
        message: `the lease already ended (${this.#end.reason})`,
        renewedBy: [],
        faults: [],
      };
    const result = await renewGrant(this.#ctx, this.#ref(), this.ttlMs, signal);
    // Read through the getter: TypeScript would otherwise keep the pre-await narrowing of #end.
    const ended = this.ended;
    if (ended)
      return result.ok
        ? {
            ok: false,
            reason: 'lost',
            message: `the lease ended (${ended.reason}) before the renewal answered`,
            renewedBy: result.renewedBy,
            faults: result.faults,
          }
        : result;
    for (const replica of result.renewedBy) this.#holders.add(replica);
    if (result.ok) {
      // A renewal only ever moves the view later; a slow one overtaken by a newer one changes nothing.
      if (result.sentAt > this.#sentAt) this.#sentAt = result.sentAt;
      this.#renewFailures = 0;
      this.#schedule();
      this.emit('renewed', { expiresAt: this.expiresAt });
    } else if (result.reason === 'lost') {
      this.#finish({ reason: 'lost', message: result.message });
    }
    return result;
  }

  #ref(): GrantRef {
    return { resource: this.resource, epoch: this.epoch, holders: this.#holders, evidence: this.#evidence };
  }

  /**
   * Ends the lease: the signal fires at once (so dependent work stops before the replicas let anyone else in),
   * then the release is sent to every replica that may hold the lease. Resolves once it is sent
   * (`{ ok: true, sent }`): the lease is over for the holder either way, and the next holder need not wait for
   * this one to hear the answers, so the replicas are asked to send none (a quiet release). With `{ wait: true }`,
   * the release is answered and this resolves with the replicas' answers (`ReleaseResult`). Calling it again
   * returns what that call asks for of the release already made; only `{ wait: true }` after a plain release sends
   * it once more, answered (a release of a released lease is confirmed again), since the first asked for no answers.
   */
  release(options?: { readonly wait?: false }): Promise<ReleaseSent>;
  release(options: { readonly wait: true }): Promise<ReleaseResult>;
  release(options?: ReleaseOptions): Promise<ReleaseSent | ReleaseResult>;
  release(options: ReleaseOptions = {}): Promise<ReleaseSent | ReleaseResult> {
    if (this.#releaseSent === undefined) this.#finish({ reason: 'released', message: 'released by the holder' });
    // Sent even when the lease already expired locally: the replicas may still hold it, and this frees it sooner.
    if (options.wait) {
      this.#answeredRelease ??= releaseGrant(this.#ctx, this.#ref());
      this.#releaseSent ??= this.#answeredRelease.sent;
      return this.#answeredRelease.done;
    }
    this.#releaseSent ??= releaseQuietly(this.#ctx, this.#ref());
    return Promise.resolve({ ok: true, sent: this.#releaseSent });
  }

  /** `await using lease = ...` releases the lease when the block exits. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  /** @internal The client is closing: nothing can renew any more. */
  clientClosed(): void {
    this.#finish({ reason: 'closed', message: 'the client was closed' });
  }

  #lostError(end: LeaseEnd): QuorumFenceError {
    return new QuorumFenceError(
      'LEASE_LOST',
      `lease on "${this.resource}" at epoch ${this.epoch} ended: ${end.reason} (${end.message})`,
      {
        resource: this.resource,
        epoch: this.epoch.toString(),
        reason: end.reason,
      },
    );
  }

  #schedule(): void {
    const { clock } = this.#ctx.options;
    const now = clock.now();
    clock.clearTimeout(this.#expiryTimer);
    this.#expiryTimer = clock.setTimeout(
      () => this.#guard(() => this.#checkExpiry()),
      Math.max(0, this.expiresAt - now),
      { unref: true },
    );
    if (this.#options.autoRenew)
      this.#scheduleRenewal(Math.max(0, renewalTime(this.#sentAt, this.ttlMs, this.#ctx.options) - now));
  }

  #scheduleRenewal(delayMs: number): void {
    this.#ctx.options.clock.clearTimeout(this.#renewTimer);
    this.#renewTimer = this.#ctx.options.clock.setTimeout(() => this.#guard(() => this.#autoRenew()), delayMs, {
      unref: true,
    });
  }

  async #autoRenew(): Promise<void> {
    if (this.#end) return;
    const result = await this.renew();
    if (result.ok || this.#end) return;
    // Retry soon, but never past the end of the view; the expiry timer ends the lease if none succeeds.
    const { retryBaseMs, retryMaxMs, random, clock } = this.#ctx.options;
    const pause = backoffDelay(
      this.#renewFailures++,
      { baseMs: Math.max(retryBaseMs, 10), maxMs: Math.max(retryMaxMs, 10) },
      random(),
    );
    const left = this.expiresAt - clock.now();
    if (left > 0) this.#scheduleRenewal(Math.min(pause, left));
  }

  /**
   * Timer-driven work: a listener of `renewed`, `lost` or `ended` that throws would otherwise become an
   * uncaught exception in a timer and end the process; it is logged instead.
   */
  #guard(work: () => void | Promise<void>): void {
    const report = (error: unknown) =>
      this.#ctx.options.logger.error({ err: error, resource: this.resource }, 'a lease event listener threw');
    try {
      const pending = work();
      if (pending) pending.catch(report);
    } catch (error) {
      report(error);
    }
  }

  #checkExpiry(): void {
    if (this.#end) return;
    const left = this.expiresAt - this.#ctx.options.clock.now();
    if (left > 0) {
      // Timers may fire early relative to an injected clock; wait out the rest.
      this.#expiryTimer = this.#ctx.options.clock.setTimeout(() => this.#guard(() => this.#checkExpiry()), left, {
        unref: true,
      });
      return;
    }
    this.#finish({
      reason: 'expired',
      message: this.#options.autoRenew ? 'no renewal succeeded before the lease view ran out' : 'the ttl ran out',
    });
  }

  #finish(end: LeaseEnd): void {
    if (this.#end) return;
    this.#end = end;
    this.#ctx.options.clock.clearTimeout(this.#expiryTimer);
    this.#ctx.options.clock.clearTimeout(this.#renewTimer);
    this.#ctx.options.clock.clearTimeout(this.#joinTimer);
    this.#detach();
    this.#controller?.abort(this.#lostError(end));
    if (end.reason !== 'released') {
      try {
        this.#options.onLost?.(end);
      } catch {
        // The caller's callback failing must not keep the lease half-ended.
      }
      this.emit('lost', end);
    }
    this.emit('ended', end);
  }
}
