/**
 * Runs one call's core (src/client/core) over a client's connections, clock and listeners: the only place where
 * a core's actions become requests, timers and combining, and where answers, timer firings, connection changes,
 * the replicas' pushes and the caller's abort become events. The same driver runs the same cores in production
 * (ReplicaConnection over WebSocket) and in the simulator (src/simulation: simulated connections and clock).
 */
import type { TimerHandle } from '../common/clock.js';
import type { CoreEnv } from './core/env.js';
import type { CallCore, ConnectionView, CoreAction, CoreEvent } from './core/io.js';
import { combinePartials, type PartialChecks } from './partial-collector.js';
import { routingOf } from './signer-choice.js';
import type { QuorumContext } from './quorum-context.js';
import type { RequestBody, RequestKind } from './replica-channel.js';

/** Why a round's open requests are abandoned (their answers are ignored, so nobody reads it). */
const ROUND_CLOSED = 'round closed';

export interface DriveOptions {
  readonly signal?: AbortSignal | undefined;
  /** The resource whose `released` and `turn` pushes the core hears (acquire only). */
  readonly resource?: string;
}

/** A snapshot of every connection, as the cores see them. */
export function connectionViews(ctx: QuorumContext): ConnectionView[] {
  return ctx.channels.channels.map((channel) => ({
    index: channel.index,
    state: channel.state,
    latencyMs: channel.latencyMs,
    lineLatencyMs: channel.lineLatencyMs,
    probeDue: channel.probeDue,
    missedTurn: channel.missedTurn,
  }));
}

/** What the cores decide with, from a client's context: its cluster, identity, options and partial collectors. */
export function coreEnv(ctx: QuorumContext): CoreEnv {
  return {
    cluster: ctx.cluster,
    holder: ctx.identity.publicKey,
    options: ctx.options,
    random: ctx.options.random,
    grantLatency: ctx.grantLatency,
    partials: partialChecks(ctx),
    rules: ctx.rules,
  };
}

/** What combining a grant's partials needs, from a client's context (partial-collector.ts). */
function partialChecks(ctx: QuorumContext): PartialChecks {
  return { cluster: ctx.cluster, backend: ctx.backend, evidence: ctx.evidence };
}

/**
 * Runs `core` to its result. Rejects only when combining partials throws (a backend bug), never for anything a
 * replica sends.
 */
export function drive<R>(ctx: QuorumContext, core: CallCore<R>, options: DriveOptions = {}): Promise<R> {
  return new Promise<R>((resolve, reject) => new Driver(ctx, core, options, resolve, reject).start());
}

class Driver<R> {
  readonly #ctx: QuorumContext;
  readonly #core: CallCore<R>;
  readonly #options: DriveOptions;
  readonly #resolve: (result: R) => void;
  readonly #reject: (error: unknown) => void;
  readonly #timers = new Map<number, TimerHandle>();
  readonly #groups = new Map<number, AbortController>();
  readonly #stops: (() => void)[] = [];
  /** Events that came while a step ran (a listener called back synchronously): stepped after it, in order. */
  readonly #pending: CoreEvent[] = [];
  #stepping = false;
  #done = false;
  /** What the core's choices depended on when it last saw the connections (routingOf; refreshRouting). */
  #routing = '';

  constructor(
    ctx: QuorumContext,
    core: CallCore<R>,
    options: DriveOptions,
    resolve: (result: R) => void,
    reject: (error: unknown) => void,
  ) {
    this.#ctx = ctx;
    this.#core = core;
    this.#options = options;
    this.#resolve = resolve;
    this.#reject = reject;
  }

  start(): void {
    const ctx = this.#ctx;
    this.#routing = routingOf(connectionViews(ctx), ctx.cluster.t);
    this.#stops.push(
      ctx.channels.subscribe(() => {
        const views = connectionViews(ctx);
        this.#routing = routingOf(views, ctx.cluster.t);
        this.#feed({ type: 'connections', at: this.#now(), connections: views });
      }),
    );
    const { resource, signal } = this.#options;
    if (resource !== undefined) {
      this.#stops.push(ctx.onReleased(resource, () => this.#feed({ type: 'released', at: this.#now() })));
      const stopTurns = ctx.onTurn?.(resource, (replica, epoch) => {
        // Whom the turn is asked of depends on the figures of now (a leader that missed our last turn, learnt
        // from its answer after this call began), not those the call started with.
        this.#refreshRouting();
        this.#feed({ type: 'turn', at: this.#now(), replica, epoch });
      });
      if (stopTurns) this.#stops.push(stopTurns);
    }
    if (signal) {
      const onAbort = () => this.#feed({ type: 'abort', at: this.#now() });
      signal.addEventListener('abort', onAbort, { once: true });
      this.#stops.push(() => signal.removeEventListener('abort', onAbort));
    }
    this.#run(() => this.#core.start(this.#now()));
  }

  #now(): number {
    return this.#ctx.options.clock.now();
  }

  #feed(event: CoreEvent): void {
    if (this.#done) return;
    if (this.#stepping) {
      this.#pending.push(event);
      return;
    }
    this.#run(() => this.#core.step(event));
  }

  #run(step: () => CoreAction[]): void {
    this.#stepping = true;
    try {
      this.#act(step());
      for (let event = this.#pending.shift(); event && !this.#done; event = this.#pending.shift())
        this.#act(this.#core.step(event));
    } catch (error) {
      this.#fail(error);
      return;
    } finally {
      this.#stepping = false;
    }
    const result = this.#core.result;
    if (result !== undefined && !this.#done) {
      this.#cleanUp();
      this.#resolve(result);
    }
  }

  #act(actions: readonly CoreAction[]): void {
    for (const action of actions) this.#perform(action);
  }

  #perform(action: CoreAction): void {
    const { clock } = this.#ctx.options;
    switch (action.type) {
      case 'send':
        return this.#send(action);
      case 'notify': {
        const channel = this.#channel(action.replica);
        void channel?.request(action.body as RequestBody<RequestKind>, action.timeoutMs);
        return;
      }
      case 'abandon':
        this.#groups.get(action.group)?.abort(ROUND_CLOSED);
        this.#groups.delete(action.group);
        return;
      case 'set_timer':
        this.#timers.set(
          action.timer,
          clock.setTimeout(() => {
            this.#timers.delete(action.timer);
            this.#refreshRouting();
            this.#feed({ type: 'timer', at: this.#now(), timer: action.timer });
          }, action.ms),
        );
        return;
      case 'clear_timer':
        clock.clearTimeout(this.#timers.get(action.timer));
        this.#timers.delete(action.timer);
        return;
      case 'combine':
        combinePartials(action.partials, partialChecks(this.#ctx)).then(
          (outcome) => this.#feed({ type: 'combined', at: this.#now(), outcome }),
          (error: unknown) => this.#fail(error),
        );
        return;
    }
  }

  #send(action: Extract<CoreAction, { type: 'send' }>): void {
    let group = this.#groups.get(action.group);
    if (!group) this.#groups.set(action.group, (group = new AbortController()));
    const channel = this.#channel(action.replica);
    if (!channel) return;
    void channel
      .request(action.body as RequestBody<RequestKind>, action.timeoutMs, group.signal)
      .then((answer) => this.#feed({ type: 'answer', at: this.#now(), request: action.request, answer }));
  }

  /**
   * A replica's figures change without any event (a hung one's unanswered ping just ages, a link slows): before a
   * timer's event, the core is told of the connections again when what its choices depend on changed (routingOf:
   * the slow signers, the slow lines' keepers, the probes due), so that what it decides then (a leader, the first
   * signers, whether its line's leader is still the leader) uses the figures of now. Judging only the slow signers,
   * a waiter kept the figures its call started with for as long as the call lasted, and stayed in the line of a leader
   * whose link had since slowed while the others had left it (the gray bench's slow link, hot resource).
   */
  #refreshRouting(): void {
    const views = connectionViews(this.#ctx);
    const routing = routingOf(views, this.#ctx.cluster.t);
    if (routing === this.#routing) return;
    this.#routing = routing;
    this.#feed({ type: 'connections', at: this.#now(), connections: views });
  }

  #channel(replica: number) {
    return this.#ctx.channels.channels.find((channel) => channel.index === replica);
  }

  #fail(error: unknown): void {
    if (this.#done) return;
    this.#cleanUp();
    this.#reject(error);
  }

  #cleanUp(): void {
    this.#done = true;
    for (const stop of this.#stops) stop();
    const { clock } = this.#ctx.options;
    for (const timer of this.#timers.values()) clock.clearTimeout(timer);
    this.#timers.clear();
    for (const group of this.#groups.values()) group.abort(ROUND_CLOSED);
    this.#groups.clear();
  }
}
