/**
 * The acquire protocol's decisions, with replicas scripted per test (real
 * BLS partials from a dealt key): epoch choice against lying answers, busy
 * waits, split votes that release their half-won grants, refusals, and
 * unavailability. Integration tests run the same code against real replicas.
 */
import { describe, expect, it } from 'vitest';
import { MAX_EPOCH } from '../../src/common/limits.js';
import { loadBackend } from '../../src/crypto/load.js';
import { acquireGrant, type AcquireGrantResult } from '../../src/client/acquire.js';
import { firstSigners, GrantLatency, leaderOf } from '../../src/client/signer-choice.js';
import type { ConnectionState } from '../../src/client/connection-state.js';
import { EvidenceLog } from '../../src/client/evidence.js';
import { generateIdentity } from '../../src/client/identity.js';
import { resolveClientOptions } from '../../src/client/options.js';
import type { QuorumContext } from '../../src/client/quorum-context.js';
import type { ReplicaAnswer, ReplicaChannel, RequestBody, RequestKind } from '../../src/client/replica-channel.js';
import type { AcquireOutcome, StatusOutcome } from '../../src/protocol/messages.js';
import { BoundedMap } from '../../src/common/bounded-map.js';
import { verifyToken } from '../../src/token/admission-token.js';
import { dealCluster } from '../support/dealt-cluster.js';

const backend = loadBackend();
const dealt = dealCluster(4, backend);
const identity = generateIdentity();

type Body = { [K in RequestKind]: RequestBody<K> }[RequestKind];
type Script = (body: Body, index: number) => ReplicaAnswer<RequestKind> | Promise<ReplicaAnswer<RequestKind>>;

const READY: ConnectionState = { phase: 'ready', failures: 0, lastFailure: undefined };
const DOWN: ConnectionState = {
  phase: 'backoff',
  failures: 1,
  lastFailure: { kind: 'unreachable', message: 'refused' },
};

class ScriptedChannel implements ReplicaChannel {
  readonly requests: Body[] = [];
  constructor(
    readonly index: number,
    readonly state: ConnectionState,
    readonly script: Script,
  ) {}
  async request<K extends RequestKind>(body: RequestBody<K>): Promise<ReplicaAnswer<K>> {
    this.requests.push(body as unknown as Body);
    return (await this.script(body as unknown as Body, this.index)) as ReplicaAnswer<K>;
  }
  notify(body: RequestBody<'release'> & { readonly quiet: true }): boolean {
    this.requests.push(body as unknown as Body);
    return this.state.phase === 'ready';
  }
}

function reply(outcome: AcquireOutcome | StatusOutcome | { status: 'released' }): ReplicaAnswer<RequestKind> {
  return { kind: 'reply', outcome } as ReplicaAnswer<RequestKind>;
}

/** An honest replica's partial on the grant this request asks for. */
function granted(body: Body, index: number): ReplicaAnswer<RequestKind> {
  const b = body as RequestBody<'acquire'>;
  return reply({
    status: 'granted',
    partial: dealt.partial(index, {
      clusterId: dealt.cluster.id,
      resource: b.resource,
      epoch: b.epoch,
      holder: identity.publicKey,
    }).bytes,
  });
}

function context(scripts: (Script | 'down')[]): { ctx: QuorumContext; channels: ScriptedChannel[] } {
  const channels = scripts.map(
    (s, k) =>
      new ScriptedChannel(
        k + 1,
        s === 'down' ? DOWN : READY,
        s === 'down' ? () => ({ kind: 'unreachable', message: 'down' }) : s,
      ),
  );
  const ctx: QuorumContext = {
    cluster: dealt.cluster,
    backend,
    identity,
    options: resolveClientOptions({ retryBaseMs: 1, retryMaxMs: 5, busyPollMs: 5 }),
    channels: { channels, subscribe: () => () => undefined },
    evidence: new EvidenceLog(),
    epochHints: new BoundedMap(1024),
    onReleased: () => () => undefined,
  };
  return { ctx, channels };
}

/** A replica that reports `epoch` in status and grants any higher epoch within 1000 of it. */
function honest(epoch: bigint): Script {
  return (body, index) => {
    if (body.type === 'status') return reply({ status: 'ok', epoch, leased: false, remainingMs: 0 });
    if (body.type === 'acquire') {
      if (body.epoch > epoch + 1000n) return reply({ status: 'too_far', epoch });
      return body.epoch > epoch ? granted(body, index) : reply({ status: 'stale', epoch });
    }
    return reply({ status: 'released' });
  };
}

function acquire(ctx: QuorumContext, waitMs = 0, timeoutMs = 2000): Promise<AcquireGrantResult> {
  return acquireGrant(ctx, { resource: 'orders', ttlMs: 1000, waitMs, timeoutMs });
}

describe('acquire: epoch choice from untrusted answers', () => {
  it('a resource nobody holds is granted in one round trip by the first t replicas alone', async () => {
    const { ctx, channels } = context([honest(0n), honest(0n), honest(0n), honest(0n)]);
    const result = await acquire(ctx);
    expect(result.ok && result.grant.token.grant.epoch).toBe(1n);
    expect(result.ok && verifyToken(result.grant.token, dealt.cluster).ok).toBe(true);
    const asked = channels.filter((c) => c.requests.length > 0).map((c) => c.index);
    expect(asked).toEqual([...firstSigners(ctx.channels, 'orders', 3)!].sort());
    for (const channel of channels) expect(channel.requests.length).toBeLessThanOrEqual(1);
  });

  it('asks for the (f+1)-th largest reported epoch plus one once a guess came back stale, and returns a token that verifies', async () => {
    const { ctx, channels } = context([honest(5n), honest(5n), honest(5n), honest(4n)]);
    const result = await acquire(ctx);
    expect(
      result.ok,
      JSON.stringify(result, (_, v) => (typeof v === 'bigint' ? String(v) : v)),
    ).toBe(true);
    if (!result.ok) return;
    expect(result.grant.token.grant.epoch).toBe(6n);
    expect(verifyToken(result.grant.token, dealt.cluster).ok).toBe(true);
    // The guess (epoch 1) went to every replica once it came back stale; the retry chose from their answers.
    expect(channels.map((c) => c.requests[0]?.type === 'acquire' && c.requests[0].epoch)).toEqual([1n, 1n, 1n, 1n]);
    // The next acquire of the same resource starts from the epoch it was granted: one round trip.
    const before = channels.map((c) => c.requests.length);
    const again = await acquire(ctx);
    expect(again.ok && again.grant.token.grant.epoch).toBe(7n);
    const asked = channels.map((c, k) => c.requests.length - before[k]!);
    expect(asked.reduce((a, b) => a + b, 0)).toBe(3);
  });

  it('is not pushed to a huge epoch by a liar', async () => {
    const liar: Script = (body) =>
      body.type === 'status'
        ? reply({ status: 'ok', epoch: MAX_EPOCH - 1n, leased: false, remainingMs: 0 })
        : reply({ status: 'stale', epoch: MAX_EPOCH - 1n });
    const { ctx } = context([honest(2n), liar, honest(2n), honest(2n)]);
    const result = await acquire(ctx);
    expect(result.ok && result.grant.token.grant.epoch).toBe(3n);
  });
});

describe('acquire: split votes and stale answers retry at a higher epoch', () => {
  it('releases the partial grants it got before retrying, and never asks for a released epoch again', async () => {
    // Replicas 3 and 4 signed someone else at epoch 1 (their answer: stale 1); 1 and 2 grant epoch 1 to us.
    const otherWonOne: Script = (body, index) => {
      if (body.type === 'status') return reply({ status: 'ok', epoch: 0n, leased: false, remainingMs: 0 });
      if (body.type === 'acquire')
        return body.epoch > 1n ? granted(body, index) : reply({ status: 'stale', epoch: 1n });
      return reply({ status: 'released' });
    };
    const weWonOne: Script = (body, index) => {
      if (body.type === 'status') return reply({ status: 'ok', epoch: 0n, leased: false, remainingMs: 0 });
      if (body.type === 'acquire') return granted(body, index);
      return reply({ status: 'released' });
    };
    const { ctx, channels } = context([weWonOne, weWonOne, otherWonOne, otherWonOne]);
    const result = await acquire(ctx);
    expect(result.ok && result.grant.token.grant.epoch).toBe(2n);
    expect(channels[0]!.requests).toContainEqual({ type: 'release', resource: 'orders', epoch: 1n });
    expect(channels[1]!.requests).toContainEqual({ type: 'release', resource: 'orders', epoch: 1n });
    expect(channels[2]!.requests.filter((r) => r.type === 'release')).toEqual([]);
  });
});

describe('acquire: busy', () => {
  it("waits for the (f+1)-th smallest remaining time, not a liar's 0, and returns busy when the wait is used up", async () => {
    const leased =
      (remainingMs: number): Script =>
      (body) =>
        body.type === 'status'
          ? reply({ status: 'ok', epoch: 9n, leased: true, remainingMs })
          : reply({ status: 'busy', epoch: 9n, remainingMs });
    const { ctx } = context([leased(0), leased(400), leased(450), leased(480)]);
    const started = performance.now();
    const result = await acquire(ctx, 0);
    expect(performance.now() - started).toBeLessThan(200);
    expect(result).toMatchObject({ ok: false, reason: 'busy', epoch: 9n, remainingMs: 400 });
  });

  it('gets in once the lease ends within the wait', async () => {
    let endsAt = performance.now() + 150;
    const leaseEnds: Script = (body, index) => {
      const remaining = Math.max(0, Math.ceil(endsAt - performance.now()));
      if (body.type === 'status')
        return reply({ status: 'ok', epoch: 4n, leased: remaining > 0, remainingMs: remaining });
      if (body.type === 'acquire')
        return remaining > 0 ? reply({ status: 'busy', epoch: 4n, remainingMs: remaining }) : granted(body, index);
      return reply({ status: 'released' });
    };
    const { ctx } = context([leaseEnds, leaseEnds, leaseEnds, leaseEnds]);
    const result = await acquire(ctx, 2000);
    expect(result.ok && result.grant.token.grant.epoch).toBe(5n);
    expect(performance.now()).toBeGreaterThanOrEqual(endsAt);
    endsAt = 0;
  });
});

describe('acquire: refusals and unavailability', () => {
  it('forbidden and invalid from f+1 replicas stop at once', async () => {
    const forbidden: Script = () => reply({ status: 'forbidden' });
    const r1 = await acquire(context([forbidden, forbidden, honest(0n), honest(0n)]).ctx);
    expect(r1.ok === false && r1.reason).toBe('forbidden');
    const invalid: Script = () => reply({ status: 'invalid', message: '"ttlMs" expected 100..60000' });
    const r2 = await acquire(context([invalid, invalid, honest(0n), honest(0n)]).ctx);
    expect(r2).toMatchObject({ ok: false, reason: 'invalid' });
    // One forbidding liar is outvoted.
    const r3 = await acquire(context([forbidden, honest(0n), honest(0n), honest(0n)]).ctx);
    expect(r3.ok).toBe(true);
  });

  it('with f+1 replicas down, returns unavailable without waiting', async () => {
    const { ctx, channels } = context(['down', 'down', honest(0n), honest(0n)]);
    const started = performance.now();
    const result = await acquire(ctx, 5000, 10_000);
    expect(result.ok === false && result.reason).toBe('unavailable');
    expect(performance.now() - started).toBeLessThan(100);
    expect(channels[0]!.requests).toEqual([]);
  });

  it('a replica whose answer broke the protocol is reported and does not vote', async () => {
    const broken: Script = () => ({ kind: 'faulty', message: '"epoch" out of range' });
    const { ctx } = context([honest(0n), broken, honest(0n), honest(0n)]);
    const result = await acquire(ctx);
    expect(result.ok).toBe(true);
    expect(result.faults).toEqual([{ replica: 2, kind: 'protocol', message: '"epoch" out of range' }]);
  });
});

describe('acquire: first signers that do not answer', () => {
  it('asks the others within the round even when the grants seen so far were slower than the round', async () => {
    // A latency learnt from slow grants (3x it is the usual wait before asking past the first signers) beyond the
    // request timeout must not keep the attempt on its first signers: one of them silent would fail every attempt.
    const silent: Script = () => new Promise<never>(() => undefined);
    const scripts: Script[] = [honest(0n), honest(0n), honest(0n), honest(0n)];
    scripts[leaderOf('orders', 4) - 1] = silent;
    const { ctx, channels } = context(scripts);
    const grantLatency = new GrantLatency();
    grantLatency.observe(5_000);
    const slowCtx: QuorumContext = {
      ...ctx,
      grantLatency,
      options: resolveClientOptions({ retryBaseMs: 1, retryMaxMs: 5, requestTimeoutMs: 400 }),
    };
    const result = await acquire(slowCtx, 0, 3_000);
    expect(
      result.ok,
      JSON.stringify(result, (_, v) => (typeof v === 'bigint' ? String(v) : v)),
    ).toBe(true);
    // One attempt did it: every replica got exactly one request, the silent one too.
    expect(channels.map((channel) => channel.requests.length)).toEqual([1, 1, 1, 1]);
  });
});

describe('acquire under contention: leader-first, and a lying leader cannot stall it', () => {
  const leader = leaderOf('orders', 4);
  const contendedBefore = (ctx: QuorumContext, epoch: bigint) =>
    ctx.epochHints.set('orders', { epoch, contended: true });

  /** The first t signers of 'orders' with four ready replicas, and the one of them (not the leader) a test silences. */
  const firstSignersOfOrders = () => {
    const signers = firstSigners(
      {
        channels: [1, 2, 3, 4].map((index) => ({ index, state: READY })) as unknown as ReplicaChannel[],
        subscribe: () => () => undefined,
      },
      'orders',
      3,
    )!;
    return { signers, silent: [...signers].find((index) => index !== leader)! };
  };

  it('a contended resource asks its leader first, then the first t signers from it once the leader granted', async () => {
    const { ctx, channels } = context([honest(3n), honest(3n), honest(3n), honest(3n)]);
    contendedBefore(ctx, 3n);
    const signers = firstSigners(ctx.channels, 'orders', 3)!;
    expect(signers.has(leader)).toBe(true);
    const result = await acquire(ctx);
    expect(result.ok && result.grant.token.grant.epoch).toBe(4n);
    for (const channel of channels)
      expect(channel.requests.map((r) => r.type)).toEqual(signers.has(channel.index) ? ['acquire'] : []);
  });

  it('a signer that stays silent after the leader granted is passed over: the last replica is asked', async () => {
    const { signers, silent } = firstSignersOfOrders();
    const scripts: Script[] = [honest(3n), honest(3n), honest(3n), honest(3n)];
    scripts[silent - 1] = (body, index) =>
      body.type === 'acquire' ? new Promise(() => undefined) : honest(3n)(body, index);
    const { ctx, channels } = context(scripts);
    contendedBefore(ctx, 3n);
    const result = await acquire(ctx);
    expect(result.ok && result.grant.token.grant.epoch).toBe(4n);
    expect(result.ok && [...result.grant.signers].sort()).toEqual([1, 2, 3, 4].filter((i) => i !== silent));
    const last = [1, 2, 3, 4].find((index) => !signers.has(index))!;
    expect(channels[last - 1]!.requests.map((r) => r.type)).toContain('acquire');
  });

  it('a turn asks the leader and its t-1 next signers; one that stays silent after the leader granted is passed over', async () => {
    const { signers, silent } = firstSignersOfOrders();
    const last = [1, 2, 3, 4].find((index) => !signers.has(index))!;
    let turnListener: ((replica: number, epoch: bigint) => void) | undefined;
    // Each replica other than the leader and the silent one: whether the leader had granted when it was asked.
    const askedAfterGrant = new Map<number, boolean>();
    let leaderGranted = false;
    const scripts: Script[] = [honest(3n), honest(3n), honest(3n), honest(3n)];
    // The leader keeps the request in its line, announces the turn at epoch 4, and grants it soon after: before the
    // late timer that the other first signer's partial starts (stragglerMinMs, 20 ms) could ask the last replica.
    scripts[leader - 1] = (body, index) => {
      if (body.type !== 'acquire' || !body.nextEpoch) return honest(3n)(body, index);
      setTimeout(() => turnListener?.(leader, 4n), 5);
      return new Promise((resolve) =>
        setTimeout(() => {
          leaderGranted = true;
          resolve(granted({ ...body, epoch: 4n }, index));
        }, 12),
      );
    };
    scripts[silent - 1] = (body, index) =>
      body.type === 'acquire' ? new Promise(() => undefined) : honest(3n)(body, index);
    for (const index of [1, 2, 3, 4].filter((i) => i !== leader && i !== silent)) {
      const inner = scripts[index - 1]!;
      scripts[index - 1] = (body, i) => {
        if (body.type === 'acquire' && !askedAfterGrant.has(i)) askedAfterGrant.set(i, leaderGranted);
        return inner(body, i);
      };
    }
    const { ctx } = context(scripts);
    const turnCtx: QuorumContext = {
      ...ctx,
      onTurn: (_resource, listener) => {
        turnListener = listener;
        return () => (turnListener = undefined);
      },
    };
    contendedBefore(turnCtx, 3n);
    const result = await acquire(turnCtx, 1500, 3000);
    expect(result.ok && result.grant.token.grant.epoch).toBe(4n);
    expect(result.ok && [...result.grant.signers].sort()).toEqual([1, 2, 3, 4].filter((i) => i !== silent));
    // The other first signer was asked at the announcement, the last replica only once the silent one was late.
    const other = [...signers].find((index) => index !== leader && index !== silent)!;
    expect(askedAfterGrant.get(other)).toBe(false);
    expect(askedAfterGrant.get(last)).toBe(true);
  });

  it('a leader that says busy to everyone costs at most the leader-first window', async () => {
    const liar: Script = (body) =>
      body.type === 'status'
        ? reply({ status: 'ok', epoch: 3n, leased: true, remainingMs: 60_000 })
        : reply({ status: 'busy', epoch: 3n, remainingMs: 60_000 });
    const scripts = [honest(3n), honest(3n), honest(3n), honest(3n)];
    scripts[leader - 1] = liar;
    const { ctx } = context(scripts);
    contendedBefore(ctx, 3n);
    const started = performance.now();
    const result = await acquire(ctx, 5000);
    expect(result.ok && result.grant.token.grant.epoch).toBe(4n);
    expect(performance.now() - started).toBeLessThan(1000);
  });

  it('a leader that reports a made-up epoch cannot keep the client away from the honest one', async () => {
    const huge = 1n << 62n;
    const liar: Script = (body) =>
      body.type === 'status'
        ? reply({ status: 'ok', epoch: huge, leased: false, remainingMs: 0 })
        : reply({ status: 'stale', epoch: huge });
    const scripts = [honest(3n), honest(3n), honest(3n), honest(3n)];
    scripts[leader - 1] = liar;
    const { ctx } = context(scripts);
    contendedBefore(ctx, 3n);
    const result = await acquire(ctx, 5000);
    expect(result.ok && result.grant.token.grant.epoch).toBe(4n);
  });
});
