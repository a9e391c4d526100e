/**
 * The malicious client of a run (docs/protocol.md, "Epoch steps"; test/byzantine/epoch-lockout.test.ts replays
 * the same attack against real processes): it holds a valid identity and grants itself epochs at a few replicas
 * alone, each a free step above the highest it sees there, the later ones with the first one's partial as
 * evidence, and releases them, so those replicas run ahead of the rest. The protocol's promise, which the
 * liveness check holds it to, is that this never locks a resource out: honest acquires still complete.
 */
import { resolveClientOptions } from '../client/options.js';
import type { GrantEvidence } from '../protocol/messages.js';
import type { SeededRandom } from '../testing/seeded-random.js';
import { SimChannel } from './channel.js';
import { NodeClock } from './clock.js';
import type { SimNetwork } from './network.js';
import type { Scheduler } from './scheduler.js';
import { RUN_CLIENT_OPTIONS, RUN_LIMITS } from './scenario.js';
import type { ToClient } from './wire.js';

const TTL_MS = 500;

export class MaliciousClient {
  readonly address = 'm';
  readonly #channels: SimChannel[];
  readonly #clock: NodeClock;
  #stopped = false;

  constructor(
    scheduler: Scheduler,
    network: SimNetwork,
    random: SeededRandom,
    replicas: readonly { readonly index: number; readonly address: string }[],
  ) {
    this.#clock = new NodeClock(scheduler, this.address, 0, 1);
    const options = resolveClientOptions({ ...RUN_CLIENT_OPTIONS, clock: this.#clock, random: () => random.next() });
    const holder = Uint8Array.from({ length: 32 }, () => random.int(0, 255));
    this.#channels = replicas.map(
      ({ index, address }) =>
        new SimChannel(index, address, {
          address: this.address,
          network,
          clock: this.#clock,
          options,
          holder,
          onChange: () => undefined,
          onReleased: () => undefined,
          onTurn: () => undefined,
          onFault: () => undefined,
        }),
    );
    network.attach(this.address, (from, message) =>
      this.#channels.find((channel) => channel.replicaAddress === from)?.receive(message as ToClient),
    );
    for (const channel of this.#channels) channel.start();
  }

  /** The attack stops (the run heals): no further grants, its connections close. */
  stop(): void {
    this.#stopped = true;
    for (const channel of this.#channels) channel.close();
  }

  /** `grants` times: a free step above what `replicas` hold, granted by them alone, then released. */
  async pushAhead(resource: string, replicas: readonly number[], grants: number): Promise<void> {
    const targets = replicas.map((index) => this.#channels.find((c) => c.index === index)).filter((c) => !!c);
    for (let k = 0; k < grants && !this.#stopped; k++) {
      let top = 0n;
      for (const channel of targets) {
        const answer = await channel.request<'status'>(
          { type: 'status', resource },
          RUN_CLIENT_OPTIONS.requestTimeoutMs,
        );
        if (answer.kind === 'reply' && answer.outcome.status === 'ok' && answer.outcome.epoch > top)
          top = answer.outcome.epoch;
      }
      const epoch = top + RUN_LIMITS.freeEpochStep;
      const evidence: GrantEvidence[] = [];
      for (const channel of targets) {
        const answer = await channel.request<'acquire'>(
          { type: 'acquire', resource, epoch, ttlMs: TTL_MS, ...(evidence.length ? { evidence: [...evidence] } : {}) },
          RUN_CLIENT_OPTIONS.requestTimeoutMs,
        );
        if (answer.kind === 'reply' && answer.outcome.status === 'granted')
          evidence.push({ replica: channel.index, epoch, partial: answer.outcome.partial });
      }
      for (const channel of targets)
        await channel.request<'release'>({ type: 'release', resource, epoch }, RUN_CLIENT_OPTIONS.requestTimeoutMs);
    }
  }
}
