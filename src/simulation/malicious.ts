/**
 * The malicious client of a run (docs/protocol.md, "Epoch steps"; test/byzantine/epoch-lockout.test.ts replays
 * the same attack against real processes): it holds a valid identity and grants itself epochs at a few replicas
 * alone, each a free step above the highest it sees there, the later ones with the first one's partial as
 * evidence, and releases them, so those replicas run ahead of the rest. The protocol's promise, which the
 * liveness check holds it to, is that this never locks a resource out: honest acquires still complete.
 *
 * It also probes the replica rules with what no honest client sends (`probe`): a ttl above maxTtl, a resource the
 * access rules do not give it, the partial of a grant it released, an epoch beyond the free step with no
 * evidence, and jumps beyond the maximum step backed by exactly f and by f+1 replicas' partials. What a replica
 * did with each is for the lease ledger to judge (lease-ledger.ts: a lease over maxTtl, a forbidden grant, a
 * revived release, an epoch step without its supporters); where the answer itself is fixed by the rules whatever
 * else happens meanwhile, the probe names what it expects (`expectations`), and the run's checks hold honest
 * replicas to it.
 */
import { identityFromSecretKey, type Identity } from '../client/identity.js';
import { resolveClientOptions } from '../client/options.js';
import { ReplicaConnection } from '../client/replica-connection.js';
import type { ReplicaLink } from '../client/replica-transport.js';
import { fromHex } from '../common/bytes.js';
import { decodeServerMessage, encodeMessage } from '../protocol/codec.js';
import {
  CloseCode,
  SESSION_BYTES,
  authTranscript,
  type AcquireOutcome,
  type GrantEvidence,
  type Hello,
  type ServerMessage,
} from '../protocol/messages.js';
import type { SeededRandom } from '../testing/seeded-random.js';
import { SimTransport } from './channel.js';
import type { SimClient } from './client-node.js';
import { NodeClock } from './clock.js';
import type { SimNetwork } from './network.js';
import type { Scheduler } from './scheduler.js';
import { RUN_CLIENT_OPTIONS, RUN_LIMITS, type HelloForgery, type Probe } from './scenario.js';
import type { ToClient } from './wire.js';

const TTL_MS = 500;
/** The resource the access rules keep from the malicious client (world.ts). */
export const FORBIDDEN_RESOURCE = 'secret';
/** Climbing steps a jump probe may take before it gives up (each a free step: 8 epochs). */
const MAX_CLIMB = 24;

/** What a probe expects one replica to answer, whatever else happened meanwhile (docs/protocol.md). */
export interface ProbeExpectation {
  readonly probe: Probe['probe'];
  /** The replica's address when it answered (its share generation included). */
  readonly replica: string;
  readonly answered: AcquireOutcome['status'];
  /** The statuses the rules allow; any other is a violation at an honest replica. */
  readonly allowed: readonly AcquireOutcome['status'][];
  /**
   * The replicas whose partials the request showed as evidence: the expectation holds only when all are honest (a
   * Byzantine replica's partial need not verify, and then the evidence is short of what the probe meant).
   */
  readonly backers: readonly string[];
}

/** Another client as the malicious client knows it: its holder key, and the hellos it was seen sending. */
export interface Victim {
  readonly address: string;
  readonly holder: Uint8Array;
  /**
   * The hello it sent on its own connection to replica `index` whose challenge was `nonce`, as an eavesdropper on the
   * network recorded it (the simulation signs it with the victim's key: the recording the attacker replays).
   */
  recorded(nonce: Uint8Array, clusterId: Uint8Array, index: number): Hello;
}

/** A frame a replica sent on a connection whose hello did not verify, past its challenge (checks.ts). */
export interface ForgedHelloAnswer {
  readonly forgery: HelloForgery;
  /** The replica's address when it answered (its share generation included). */
  readonly replica: string;
  /** The client whose holder key the hello named. */
  readonly named: string;
  /** What it sent: the message's type, and a reply's status. */
  readonly answered: string;
}

/** How long a forged connection stays open for an answer before the malicious client closes it (virtual ms). */
const FORGED_CONNECTION_MS = 300;
const FORGED_LINK = { maxFrameBytes: Number.MAX_SAFE_INTEGER, handshakeTimeoutMs: FORGED_CONNECTION_MS } as const;
/** A forged connection's events but its frames: nothing to do. */
const IGNORED_EVENTS = {
  open: () => undefined,
  pong: () => undefined,
  close: () => undefined,
  error: () => undefined,
} as const;

/** A probe whose answer the rules leave open (a record may move meanwhile): the lease ledger judges what was done. */
const LEDGER_JUDGES = undefined;

export class MaliciousClient {
  readonly address = 'm';
  readonly holder: Uint8Array;
  readonly #identity: Identity;
  readonly #transport: SimTransport;
  readonly expectations: ProbeExpectation[] = [];
  readonly forgedAnswers: ForgedHelloAnswer[] = [];
  readonly #random: SeededRandom;
  readonly #scheduler: Scheduler;
  #channels: ReplicaConnection[] = [];
  readonly #clock: NodeClock;
  #clusterId: Uint8Array = new Uint8Array(0);
  #stopped = false;

  constructor(scheduler: Scheduler, network: SimNetwork, random: SeededRandom) {
    this.#clock = new NodeClock(scheduler, this.address, 0, 1);
    this.#random = random;
    this.#scheduler = scheduler;
    this.#identity = identityFromSecretKey(Uint8Array.from({ length: 32 }, () => random.int(0, 255)));
    this.holder = this.#identity.publicKey;
    this.#transport = new SimTransport(this.address, network);
    network.attach(this.address, (from, message) => this.#transport.receive(from, message as ToClient));
  }

  /** Connects to the replicas of the cluster `clusterId` (once, at the start of the run), as any client does. */
  connect(clusterId: Uint8Array, replicas: readonly { readonly index: number; readonly address: string }[]): void {
    this.#clusterId = clusterId;
    const random = this.#random;
    const options = resolveClientOptions({ ...RUN_CLIENT_OPTIONS, clock: this.#clock, random: () => random.next() });
    this.#channels = replicas.map(
      ({ index, address }) =>
        new ReplicaConnection(
          { index, endpoint: address },
          {
            clusterId,
            identity: this.#identity,
            session: new Uint8Array(16),
            options,
            transport: this.#transport,
            onChange: () => undefined,
            onFault: () => undefined,
          },
        ),
    );
    for (const channel of this.#channels) channel.start();
  }

  /** The attack stops (the run heals): no further grants, its connections close. */
  stop(): void {
    this.#stopped = true;
    for (const channel of this.#channels) channel.close();
  }

  /**
   * Opens a connection to replica `index` whose hello must not verify (`forgery`, the file's comment), then asks it
   * for the epoch above the replica's record of `resource`, as `victim`'s holder when the hello names it; notes every
   * answer past the challenge, and closes the connection FORGED_CONNECTION_MS later.
   */
  async forgeHello(forgery: HelloForgery, index: number, resource: string, victim: Victim): Promise<void> {
    const channel = this.#targets([index])[0];
    if (!channel || this.#stopped) return;
    const epoch = (await this.#top(resource, [channel])) + 1n;
    if (this.#stopped) return;
    // The replayed hello's challenge: another connection's, which the victim answered (and the eavesdropper saw).
    const recorded = forgery === 'replayed' ? await this.#challengeOf(channel.endpoint) : undefined;
    if (forgery === 'replayed' && !recorded) return;
    // The tampered hello names the malicious client's own key; the others name the victim's.
    const named = forgery === 'tampered' ? this.address : victim.address;
    const helloFor = (nonce: Uint8Array): Hello => {
      if (recorded) return victim.recorded(recorded, this.#clusterId, index);
      const signature = this.#identity.sign(authTranscript(nonce, this.#clusterId, index));
      if (forgery === 'other-holder') return { type: 'hello', id: 0, holder: victim.holder, signature };
      const tampered = Uint8Array.from(signature);
      tampered[0]! ^= 1;
      return { type: 'hello', id: 0, holder: this.#identity.publicKey, signature: tampered };
    };
    const request = encodeMessage({ type: 'acquire', id: 1, resource, epoch, ttlMs: TTL_MS });
    const link = this.#transport.connect(channel.endpoint, FORGED_LINK, {
      ...IGNORED_EVENTS,
      frame: (data) => {
        const message = typeof data === 'string' ? undefined : decodedOrUndefined(data);
        if (message?.type === 'challenge') {
          link.send(encodeMessage(helloFor(message.nonce)));
          link.send(request);
          return;
        }
        // A request overtaking its hello (link order `any`) is refused so, before any hello.
        if (message?.type === 'error' && message.code === 'UNAUTHENTICATED') return;
        const answered = describeAnswer(message);
        this.forgedAnswers.push({ forgery, replica: channel.endpoint, named, answered });
        this.#scheduler.note(`m forged hello (${forgery}) answered at ${channel.endpoint}: ${answered}`);
      },
    });
    this.#scheduler.note(`m forges a hello (${forgery}) at ${channel.endpoint}`);
    await new Promise<void>((resolve) => this.#clock.setTimeout(resolve, FORGED_CONNECTION_MS));
    link.close(CloseCode.NORMAL, '');
  }

  /**
   * The challenge of a connection to `endpoint` the malicious client opens and leaves unanswered (another client's,
   * in the story: the victim's own connection, which answered it); undefined when none came in time.
   */
  async #challengeOf(endpoint: string): Promise<Uint8Array | undefined> {
    let link: ReplicaLink | undefined;
    const nonce = await new Promise<Uint8Array | undefined>((resolve) => {
      const timer = this.#clock.setTimeout(() => resolve(undefined), FORGED_CONNECTION_MS);
      link = this.#transport.connect(endpoint, FORGED_LINK, {
        ...IGNORED_EVENTS,
        frame: (data) => {
          const message = typeof data === 'string' ? undefined : decodedOrUndefined(data);
          if (message?.type !== 'challenge') return;
          this.#clock.clearTimeout(timer);
          resolve(message.nonce);
        },
      });
    });
    link?.close(CloseCode.NORMAL, '');
    return nonce;
  }

  /** `grants` times: a free step above what `replicas` hold, granted by them alone, then released. */
  async pushAhead(resource: string, replicas: readonly number[], grants: number): Promise<void> {
    const targets = this.#targets(replicas);
    for (let k = 0; k < grants && !this.#stopped; k++) {
      const epoch = (await this.#top(resource, targets)) + RUN_LIMITS.freeEpochStep;
      await this.#grantAll(resource, epoch, targets, []);
      await this.#releaseAll(resource, epoch, targets);
    }
  }

  /** One probe of the replica rules (see the file's comment). */
  async probe(probe: Probe): Promise<void> {
    const targets = this.#targets(probe.replicas);
    const first = targets[0];
    if (!first || this.#stopped) return;
    const top = await this.#top(probe.resource, [first]);
    switch (probe.probe) {
      case 'long-ttl':
        return this.#expect(probe, first, { epoch: top + 1n, ttlMs: 4 * RUN_LIMITS.maxTtlMs }, ['invalid']);
      case 'forbidden':
        return this.#expect(probe, first, { resource: FORBIDDEN_RESOURCE, epoch: top + 1n }, ['forbidden']);
      case 'resend-released':
        if (!(await this.#grantAll(probe.resource, top + 1n, [first], [])).length) return;
        // A release lost on the way leaves the lease held, and the resend is then the same grant asked again.
        if (!(await this.#releaseAll(probe.resource, top + 1n, [first]))) return;
        return this.#expect(probe, first, { epoch: top + 1n }, ['stale', 'busy']);
      case 'beyond-free-step': {
        // A record first (a resource without one may go maxEpochStep above the floor), then one step too far.
        if (!(await this.#grantAll(probe.resource, top + 1n, [first], [])).length) return;
        await this.#releaseAll(probe.resource, top + 1n, [first]);
        const epoch = top + 2n + RUN_LIMITS.freeEpochStep;
        return this.#expect(probe, first, { epoch }, LEDGER_JUDGES, true);
      }
      case 'jump':
        return this.#jumps(probe, targets);
    }
  }

  /**
   * Jumps beyond the maximum step: f replicas climb together by free steps until they are more than maxEpochStep
   * above a laggard, which is then asked for their epoch with their f partials as evidence (the rules: `too_far`,
   * since f partials may all be liars'); then one more replica catches up with them in maximum steps, and a second
   * laggard is asked with the f+1 partials (the rules: any distance, since one of f+1 is honest).
   */
  async #jumps(probe: Probe, targets: readonly ReplicaConnection[]): Promise<void> {
    const f = (this.#channels.length - 1) / 3;
    const climbers = targets.slice(0, f);
    const [extra, laggard, second] = targets.slice(f);
    if (!extra || !laggard || !second) return;
    const { resource } = probe;
    const base = await this.#top(resource, [laggard, second]);
    let epoch = 0n;
    let evidence: GrantEvidence[] = [];
    for (let k = 0; k < MAX_CLIMB && epoch - base <= RUN_LIMITS.maxEpochStep && !this.#stopped; k++) {
      epoch = (await this.#top(resource, climbers)) + RUN_LIMITS.freeEpochStep;
      evidence = await this.#grantAll(resource, epoch, climbers, []);
      await this.#releaseAll(resource, epoch, climbers);
      if (evidence.length < f) return;
    }
    if (epoch - base <= RUN_LIMITS.maxEpochStep) return;
    await this.#expect(probe, laggard, { epoch, evidence }, LEDGER_JUDGES, true);
    // The (f+1)-th climbs in maximum steps, each backed by the f partials at the top.
    for (let k = 0; k < 4 && !this.#stopped; k++) {
      const at = (await this.#top(resource, [extra])) + RUN_LIMITS.maxEpochStep;
      const step = at < epoch ? at : epoch;
      const won = await this.#grantAll(resource, step, [extra], evidence);
      await this.#releaseAll(resource, step, [extra]);
      if (!won.length) return;
      if (step === epoch) {
        await this.#expect(
          probe,
          second,
          { epoch, evidence: [...evidence, ...won] },
          ['granted', 'stale', 'busy'],
          true,
          [...climbers, extra],
        );
        return;
      }
    }
  }

  /**
   * Asks `channel` for `request` and notes what it answered against `allowed` (the probe's expectation); a grant is
   * released at once (with `release`), so a probe leaves nothing held.
   */
  async #expect(
    probe: Probe,
    channel: ReplicaConnection,
    request: { resource?: string; epoch: bigint; ttlMs?: number; evidence?: GrantEvidence[] },
    allowed: readonly AcquireOutcome['status'][] | undefined,
    release = false,
    backers: readonly ReplicaConnection[] = [],
  ): Promise<void> {
    const resource = request.resource ?? probe.resource;
    const answer = await channel.request<'acquire'>(
      {
        type: 'acquire',
        resource,
        epoch: request.epoch,
        ttlMs: request.ttlMs ?? TTL_MS,
        ...(request.evidence?.length ? { evidence: request.evidence } : {}),
      },
      RUN_CLIENT_OPTIONS.requestTimeoutMs,
    );
    if (answer.kind !== 'reply') return;
    const status = answer.outcome.status;
    if (allowed)
      this.expectations.push({
        probe: probe.probe,
        replica: channel.endpoint,
        answered: status,
        allowed,
        backers: backers.map((backer) => backer.endpoint),
      });
    this.#scheduler.note(`m probe ${probe.probe} at ${channel.endpoint}: ${status}`);
    if (status === 'granted' && release) await this.#releaseAll(resource, request.epoch, [channel]);
  }

  #targets(replicas: readonly number[]): ReplicaConnection[] {
    return replicas.map((index) => this.#channels.find((c) => c.index === index)).filter((c) => !!c);
  }

  /** The highest epoch `targets` report for `resource` (0 when none answers). */
  async #top(resource: string, targets: readonly ReplicaConnection[]): Promise<bigint> {
    let top = 0n;
    for (const channel of targets) {
      const answer = await channel.request<'status'>({ type: 'status', resource }, RUN_CLIENT_OPTIONS.requestTimeoutMs);
      if (answer.kind === 'reply' && answer.outcome.status === 'ok' && answer.outcome.epoch > top)
        top = answer.outcome.epoch;
    }
    return top;
  }

  /** Asks each of `targets` in turn for `epoch`, with `evidence` and the partials granted so far; returns those. */
  async #grantAll(
    resource: string,
    epoch: bigint,
    targets: readonly ReplicaConnection[],
    evidence: readonly GrantEvidence[],
  ): Promise<GrantEvidence[]> {
    const won: GrantEvidence[] = [];
    for (const channel of targets) {
      const shown = [...evidence, ...won];
      const answer = await channel.request<'acquire'>(
        { type: 'acquire', resource, epoch, ttlMs: TTL_MS, ...(shown.length ? { evidence: shown } : {}) },
        RUN_CLIENT_OPTIONS.requestTimeoutMs,
      );
      if (answer.kind === 'reply' && answer.outcome.status === 'granted')
        won.push({ replica: channel.index, epoch, partial: answer.outcome.partial });
    }
    return won;
  }

  /** Releases `epoch` at each of `targets` in turn; true when every one answered `released`. */
  async #releaseAll(resource: string, epoch: bigint, targets: readonly ReplicaConnection[]): Promise<boolean> {
    let allReleased = true;
    for (const channel of targets) {
      const answer = await channel.request<'release'>(
        { type: 'release', resource, epoch },
        RUN_CLIENT_OPTIONS.requestTimeoutMs,
      );
      if (answer.kind !== 'reply' || answer.outcome.status !== 'released') allReleased = false;
    }
    return allReleased;
  }
}

/**
 * `client` as the malicious client knows it: its holder key, and the hellos it sends as an eavesdropper would have
 * recorded them (signed here with the client's key, as the client's own connection signs them: its session named).
 */
export function victimOf(client: Pick<SimClient, 'address' | 'identity' | 'session'>): Victim {
  const session = fromHex(client.session, SESSION_BYTES, 'session');
  const { identity } = client;
  return {
    address: client.address,
    holder: identity.publicKey,
    recorded: (nonce, clusterId, index) => ({
      type: 'hello',
      id: 0,
      holder: identity.publicKey,
      signature: identity.sign(authTranscript(nonce, clusterId, index, session)),
      session,
    }),
  };
}

function decodedOrUndefined(frame: Uint8Array): ServerMessage | undefined {
  try {
    return decodeServerMessage(frame, Number.MAX_SAFE_INTEGER);
  } catch {
    return undefined;
  }
}

function describeAnswer(message: ServerMessage | undefined): string {
  if (!message) return 'a frame that does not decode';
  if (message.type === 'reply') return `reply ${String((message.outcome as { status?: unknown }).status)}`;
  if (message.type === 'error') return `error ${message.code}`;
  return message.type;
}
