/**
 * Leases that outlive f signers, at the client (docs/protocol.md, "Client rules"): at its join time (a tenth of the
 * ttl after the grant, at most 1 s, never after the first renewal) the lease asks the replicas that did not sign it to
 * join it (a renew carrying f+1 of the grant's partials), and a lease released before then asks nobody; renewals go
 * to every replica and succeed once any t confirm, and only replicas that held the lease can deny it: a liar among the
 * signers that answers `not_holder` to every renewal costs nothing, f+1 holders denying it end it, and a replica
 * that never held it (it could not join) is no evidence against it. Replicas are scripted.
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
import { joinTime, localExpiry } from '../../src/client/lease-timing.js';
import { resolveClientOptions } from '../../src/client/options.js';
import { firstSigners } from '../../src/client/signer-choice.js';
import type { QuorumContext } from '../../src/client/quorum-context.js';
import type { ReplicaAnswer, ReplicaChannel, RequestBody, RequestKind } from '../../src/client/replica-channel.js';
import type { RenewOutcome } from '../../src/protocol/messages.js';
import { dealCluster } from '../support/dealt-cluster.js';

const backend = loadBackend();
const dealt = dealCluster(4, backend);
const identity = generateIdentity();
const READY: ConnectionState = { phase: 'ready', failures: 0, lastFailure: undefined };

/** How a scripted replica answers renewals. */
type RenewScript = 'renewed' | 'not_holder' | 'silent';

/** Grants every acquire with a valid partial; answers renewals as scripted, and keeps what it was sent. */
class ScriptedReplica implements ReplicaChannel {
  readonly state = READY;
  readonly renewals: RequestBody<'renew'>[] = [];
  renew: RenewScript = 'renewed';
  constructor(readonly index: number) {}

  request<K extends RequestKind>(body: RequestBody<K>): Promise<ReplicaAnswer<K>> {
    const answer = (outcome: unknown) => Promise.resolve({ kind: 'reply', outcome } as ReplicaAnswer<K>);
    if (body.type === 'renew') {
      const renewal = body as unknown as RequestBody<'renew'>;
      this.renewals.push(renewal);
      if (this.renew === 'silent') return new Promise(() => undefined);
      const outcome: RenewOutcome =
        this.renew === 'renewed'
          ? { status: 'renewed', remainingMs: renewal.ttlMs }
          : { status: 'not_holder', epoch: renewal.epoch + 1n };
      return answer(outcome);
    }
    if (body.type === 'release') return answer({ status: 'released' });
    const acquire = body as unknown as RequestBody<'acquire'>;
    const grant = {
      clusterId: dealt.cluster.id,
      resource: acquire.resource,
      epoch: acquire.epoch,
      holder: identity.publicKey,
    };
    return answer({ status: 'granted', partial: dealt.partial(this.index, grant).bytes });
  }

  notify(): boolean {
    return true;
  }
}

/** A client over four scripted replicas, on a clock the test moves (so a join comes exactly when the test says). */
function context(options: { renewAtFraction?: number } = {}): {
  ctx: QuorumContext;
  replicas: ScriptedReplica[];
  clock: ManualClock;
} {
  const replicas = [1, 2, 3, 4].map((index) => new ScriptedReplica(index));
  const clock = new ManualClock(1_000);
  const ctx: QuorumContext = {
    cluster: dealt.cluster,
    backend,
    identity,
    options: resolveClientOptions({ requestTimeoutMs: 200, clock, ...options }),
    channels: { channels: replicas, subscribe: () => () => undefined },
    evidence: new EvidenceLog(),
    epochHints: new BoundedMap(16),
    releases: new Set(),
    onReleased: () => () => undefined,
  };
  return { ctx, replicas, clock };
}

const TTL_MS = 2_000;

async function grantOn(ctx: QuorumContext, resource: string, autoRenew = false): Promise<Lease> {
  const result = await acquireGrant(ctx, { resource, ttlMs: TTL_MS, waitMs: 0, timeoutMs: 5_000 });
  if (!result.ok) throw new Error(`not granted: ${result.reason}`);
  return new Lease(ctx, result.grant, result.faults, { autoRenew }, () => () => undefined);
}

/** When the lease's view started (sentAt, before its first request left): its view ends a ttl less the margin later. */
function grantedAt(ctx: QuorumContext, lease: Lease): number {
  return lease.expiresAt - localExpiry(0, TTL_MS, ctx.options);
}

/** When the lease asks its non-signers to join (the clock's time). */
function joinsAt(ctx: QuorumContext, lease: Lease): number {
  return joinTime(grantedAt(ctx, lease), TTL_MS, ctx.options);
}

/** A lease whose join round has run: the clock moved to its join time, and every non-signer was asked and answered. */
async function leaseOn(ctx: QuorumContext, clock: ManualClock, replicas: ScriptedReplica[], resource: string) {
  const lease = await grantOn(ctx, resource);
  clock.advance(Math.max(0, joinsAt(ctx, lease) - clock.now()));
  const outsiders = replicas.filter((r) => !lease.signers.includes(r.index));
  await vi.waitFor(() => expect(outsiders.every((r) => r.renewals.length === 1)).toBe(true));
  await new Promise((resolve) => setImmediate(resolve)); // their answers, already given, reach the lease
  return lease;
}

describe('Leases that outlive f signers (client)', () => {
  it('a lease released before its join time asks nobody to join: one held a moment costs no replica a join', async () => {
    const { ctx, replicas, clock } = context();
    const lease = await grantOn(ctx, 'jobs/brief');
    clock.advance(Math.max(0, joinsAt(ctx, lease) - clock.now() - 1));
    expect(replicas.flatMap((r) => r.renewals)).toEqual([]);
    await lease.release();
    clock.advance(TTL_MS);
    await new Promise((resolve) => setImmediate(resolve));
    expect(replicas.flatMap((r) => r.renewals)).toEqual([]);
    expect(lease.holders).toEqual(lease.signers);
  });

  it("asks the replica that did not sign to join at its join time, with f+1 of the grant's partials; then it holds the lease", async () => {
    const { ctx, replicas, clock } = context();
    const lease = await grantOn(ctx, 'jobs/join');
    const [outsider] = replicas.filter((r) => !lease.signers.includes(r.index));
    const joinAt = joinsAt(ctx, lease);
    // A tenth of the ttl after the grant (at most 1 s), well before the first renewal.
    expect(joinAt - grantedAt(ctx, lease)).toBe(TTL_MS / 10);
    clock.advance(Math.max(0, joinAt - clock.now() - 1));
    expect(outsider!.renewals).toEqual([]);
    clock.advance(1);
    await vi.waitFor(() => expect(lease.holders).toEqual([1, 2, 3, 4]));
    expect(outsider!.renewals).toHaveLength(1);
    const evidence = outsider!.renewals[0]!.evidence!;
    expect(evidence.map((e) => e.replica)).toEqual(lease.signers.slice(0, dealt.cluster.f + 1));
    expect(evidence.every((e) => e.epoch === lease.epoch && e.partial.length === 96)).toBe(true);
    // Signers are asked nothing more until the first renewal; then a holder's renewal carries no evidence.
    for (const signer of replicas.filter((r) => lease.signers.includes(r.index))) expect(signer.renewals).toEqual([]);
    expect((await lease.renew()).ok).toBe(true);
    expect(outsider!.renewals[1]!.evidence).toBeUndefined();
  });

  it('the join time: a tenth of the ttl after the grant, at most 1 s, and never after the first renewal', () => {
    const { ctx } = context();
    expect(joinTime(500, 2_000, ctx.options)).toBe(700);
    expect(joinTime(500, 60_000, ctx.options)).toBe(1_500);
    const early = context({ renewAtFraction: 0.05 }).ctx.options;
    expect(joinTime(500, 2_000, early)).toBe(600);
  });

  it('a signer that is silent, or lies that it does not hold the lease, costs nothing: t others renew it', async () => {
    for (const script of ['silent', 'not_holder'] as const) {
      const { ctx, replicas, clock } = context();
      const lease = await leaseOn(ctx, clock, replicas, `jobs/${script}`);
      replicas[lease.signers[0]! - 1]!.renew = script;
      const renewed = await lease.renew();
      expect(renewed, script).toMatchObject({ ok: true });
      expect(lease.active).toBe(true);
    }
  });

  it('f+1 replicas that held the lease denying it end it (lost); a replica that never held it is no evidence', async () => {
    const { ctx, replicas, clock } = context();
    const lease = await leaseOn(ctx, clock, replicas, 'jobs/denied');
    const [first, second] = lease.signers;
    replicas[first! - 1]!.renew = 'not_holder';
    replicas[second! - 1]!.renew = 'not_holder';
    const renewed = await lease.renew();
    expect(renewed).toMatchObject({ ok: false, reason: 'lost' });
    expect(lease.ended?.reason).toBe('lost');

    // The same two denials, one of them from a replica that never held the lease (it could not join): not lost.
    const again = context();
    const first3 = firstSigners({ channels: again.replicas }, 'jobs/outsider', dealt.cluster.t)!;
    const outsider = again.replicas.find((r) => !first3.has(r.index))!;
    outsider.renew = 'not_holder';
    const held = await leaseOn(again.ctx, again.clock, again.replicas, 'jobs/outsider');
    expect(held.holders).not.toContain(outsider.index);
    again.replicas[held.signers[0]! - 1]!.renew = 'not_holder';
    const notLost = await held.renew();
    expect(notLost).toMatchObject({ ok: false, reason: 'unavailable' });
    expect(held.ended).toBeUndefined();
  });
});
