/**
 * Release off the holder's critical path (docs/protocol.md, "Client rules"): `lease.release()` sends a quiet release
 * (the replicas send no reply) to the connections and resolves at once; `release({ wait: true })` sends an answered
 * one and resolves with the answers, its round kept in the client's context until it ends (so closing the client
 * waits for it). Replicas are scripted, and their answers to answered releases are held back until the test lets
 * them go.
 */
import { describe, expect, it, vi } from 'vitest';
import { BoundedMap } from '../../src/common/bounded-map.js';
import { ManualClock } from '../../src/common/clock.js';
import { loadBackend } from '../../src/crypto/load.js';
import { acquireGrant } from '../../src/client/acquire.js';
import type { ConnectionState } from '../../src/client/connection-state.js';
import { EvidenceLog } from '../../src/client/evidence.js';
import { generateIdentity } from '../../src/client/identity.js';
import { Lease } from '../../src/client/lease.js';
import { MAX_JOIN_DELAY_MS } from '../../src/client/lease-timing.js';
import { resolveClientOptions } from '../../src/client/options.js';
import type { QuorumContext } from '../../src/client/quorum-context.js';
import type { ReplicaAnswer, ReplicaChannel, RequestBody, RequestKind } from '../../src/client/replica-channel.js';
import { dealCluster } from '../support/dealt-cluster.js';

const backend = loadBackend();
const dealt = dealCluster(4, backend);
const identity = generateIdentity();

const READY: ConnectionState = { phase: 'ready', failures: 0, lastFailure: undefined };
const DOWN: ConnectionState = { phase: 'backoff', failures: 1, lastFailure: { kind: 'unreachable', message: 'down' } };

/**
 * Grants every acquire and confirms every renew (a non-signer joining the lease); holds each answered release's
 * answer until `answerReleases()`; keeps the quiet ones.
 */
class HoldingChannel implements ReplicaChannel {
  readonly releases: RequestBody<'release'>[] = [];
  readonly renewals: RequestBody<'renew'>[] = [];
  readonly quietReleases: RequestBody<'release'>[] = [];
  readonly #held: (() => void)[] = [];
  constructor(
    readonly index: number,
    readonly state: ConnectionState,
  ) {}

  request<K extends RequestKind>(body: RequestBody<K>): Promise<ReplicaAnswer<K>> {
    if (this.state.phase !== 'ready') return Promise.resolve({ kind: 'unreachable', message: 'down' });
    if (body.type === 'renew') this.renewals.push(body as unknown as RequestBody<'renew'>);
    if (body.type === 'renew')
      return Promise.resolve({ kind: 'reply', outcome: { status: 'renewed', remainingMs: 1 } } as ReplicaAnswer<K>);
    if (body.type === 'release') {
      this.releases.push(body as unknown as RequestBody<'release'>);
      return new Promise((resolve) =>
        this.#held.push(() => resolve({ kind: 'reply', outcome: { status: 'released' } } as ReplicaAnswer<K>)),
      );
    }
    const acquire = body as unknown as RequestBody<'acquire'>;
    const grant = {
      clusterId: dealt.cluster.id,
      resource: acquire.resource,
      epoch: acquire.epoch,
      holder: identity.publicKey,
    };
    return Promise.resolve({
      kind: 'reply',
      outcome: { status: 'granted', partial: dealt.partial(this.index, grant).bytes },
    } as ReplicaAnswer<K>);
  }

  notify(body: RequestBody<'release'> & { readonly quiet: true }): boolean {
    if (this.state.phase !== 'ready') return false;
    this.quietReleases.push(body);
    return true;
  }

  answerReleases(): void {
    for (const answer of this.#held.splice(0)) answer();
  }
}

/** A client over scripted replicas, on a clock the test moves. */
function context(states: ConnectionState[]): { ctx: QuorumContext; channels: HoldingChannel[]; clock: ManualClock } {
  const channels = states.map((state, k) => new HoldingChannel(k + 1, state));
  const clock = new ManualClock(1_000);
  const ctx: QuorumContext = {
    cluster: dealt.cluster,
    backend,
    identity,
    options: resolveClientOptions({ requestTimeoutMs: 60_000, clock }),
    channels: { channels, subscribe: () => () => undefined },
    evidence: new EvidenceLog(),
    epochHints: new BoundedMap(16),
    releases: new Set(),
    onReleased: () => () => undefined,
  };
  return { ctx, channels, clock };
}

async function leaseOn(ctx: QuorumContext, resource: string): Promise<Lease> {
  const result = await acquireGrant(ctx, { resource, ttlMs: 10_000, waitMs: 0, timeoutMs: 5_000 });
  if (!result.ok) throw new Error(`not granted: ${result.reason}`);
  return new Lease(ctx, result.grant, result.faults, { autoRenew: false }, () => () => undefined);
}

const count = (channels: HoldingChannel[], kind: 'releases' | 'quietReleases') =>
  channels.reduce((sum, channel) => sum + channel[kind].length, 0);

describe('lease.release(): off the critical path', () => {
  it('sends a quiet release to every connected replica and resolves at once: no answer is asked for', async () => {
    const { ctx, channels, clock } = context([READY, READY, READY, READY]);
    const lease = await leaseOn(ctx, 'orders/1');
    // The replica that did not sign is asked to join the lease once it has been held a while (a tenth of its 10 s
    // ttl, at most MAX_JOIN_DELAY_MS), with the grant's evidence.
    clock.advance(MAX_JOIN_DELAY_MS);
    const joiner = channels.find((channel) => !lease.signers.includes(channel.index))!;
    await vi.waitFor(() => expect(joiner.renewals).toHaveLength(1));
    expect(joiner.renewals[0]!.evidence!.map((e) => e.replica)).toEqual(lease.signers.slice(0, dealt.cluster.f + 1));
    const sent = await lease.release();
    expect(sent).toEqual({ ok: true, sent: 4 });
    // Ended for the holder at once, and the requests are on their way, to every replica: any may have joined it.
    expect(lease.ended?.reason).toBe('released');
    expect(lease.signal.aborted).toBe(true);
    const asked = channels.filter((channel) => channel.quietReleases.length > 0).map((channel) => channel.index);
    expect(asked).toEqual([1, 2, 3, 4]);
    for (const channel of channels)
      for (const body of channel.quietReleases)
        expect(body).toEqual({ type: 'release', resource: 'orders/1', epoch: lease.epoch, quiet: true });
    // Nothing waits for answers: no answered request, no round for closing the client to wait on.
    expect(count(channels, 'releases')).toBe(0);
    expect(ctx.releases!.size).toBe(0);
  });

  it('with { wait: true } sends an answered release and resolves with the answers: t confirmations', async () => {
    const { ctx, channels } = context([READY, READY, READY, READY]);
    const lease = await leaseOn(ctx, 'orders/2');
    let answered = false;
    const waiting = lease.release({ wait: true }).then((result) => {
      answered = true;
      return result;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(answered).toBe(false); // the answers are held back
    expect(ctx.releases!.size).toBe(1); // closing the client would wait for this round
    expect(count(channels, 'quietReleases')).toBe(0);
    for (const channel of channels) channel.answerReleases();
    expect(await waiting).toEqual({ ok: true, released: dealt.cluster.t, faults: [] });
    await Promise.all([...ctx.releases!]);
    expect(ctx.releases!.size).toBe(0);
  });

  it('a second plain call sends nothing more; { wait: true } after a plain release sends it once more, answered', async () => {
    const { ctx, channels } = context([READY, READY, READY, READY]);
    const lease = await leaseOn(ctx, 'orders/3');
    await lease.release();
    expect(await lease.release()).toEqual({ ok: true, sent: 4 });
    expect(count(channels, 'quietReleases')).toBe(4);
    expect(count(channels, 'releases')).toBe(0);
    const waited = lease.release({ wait: true });
    const waitedAgain = lease.release({ wait: true });
    for (const channel of channels) channel.answerReleases();
    expect((await waited).ok).toBe(true);
    expect(await waitedAgain).toEqual(await waited);
    // One answered round, whatever the number of calls asking to wait.
    expect(count(channels, 'releases')).toBe(4);
    expect(count(channels, 'quietReleases')).toBe(4);
  });

  it('a plain call after { wait: true } sends nothing more and counts the answered round', async () => {
    const { channels, ctx } = context([READY, READY, READY, READY]);
    const lease = await leaseOn(ctx, 'orders/5');
    const waited = lease.release({ wait: true });
    expect(await lease.release()).toEqual({ ok: true, sent: 4 });
    expect(count(channels, 'quietReleases')).toBe(0);
    for (const channel of channels) channel.answerReleases();
    expect((await waited).ok).toBe(true);
  });

  it('counts only the connections it could send to: a replica whose connection went down is not among them', async () => {
    const states = [READY, READY, READY, READY];
    const { ctx, channels } = context(states);
    const lease = await leaseOn(ctx, 'orders/4');
    const down = lease.signers[0]!;
    (channels[down - 1] as { state: ConnectionState }).state = DOWN;
    expect(await lease.release()).toEqual({ ok: true, sent: 3 });
    expect(channels[down - 1]!.quietReleases).toHaveLength(0);
  });
});
