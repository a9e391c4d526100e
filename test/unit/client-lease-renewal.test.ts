/**
 * Leases that outlive f signers, at the client (docs/protocol.md, "Client rules"): right after the grant the lease
 * asks the replicas that did not sign it to join it (a renew carrying f+1 of the grant's partials), renewals go to
 * every replica and succeed once any t confirm, and only replicas that held the lease can deny it: a liar among the
 * signers that answers `not_holder` to every renewal costs nothing, f+1 holders denying it end it, and a replica
 * that never held it (it could not join) is no evidence against it. Replicas are scripted.
 */
import { describe, expect, it } from 'vitest';
import { BoundedMap } from '../../src/common/bounded-map.js';
import { loadBackend } from '../../src/crypto/load.js';
import { acquireGrant } from '../../src/client/acquire.js';
import type { ConnectionState } from '../../src/client/connection-state.js';
import { EvidenceLog } from '../../src/client/evidence.js';
import { generateIdentity } from '../../src/client/identity.js';
import { Lease } from '../../src/client/lease.js';
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

function context(): { ctx: QuorumContext; replicas: ScriptedReplica[] } {
  const replicas = [1, 2, 3, 4].map((index) => new ScriptedReplica(index));
  const ctx: QuorumContext = {
    cluster: dealt.cluster,
    backend,
    identity,
    options: resolveClientOptions({ requestTimeoutMs: 200 }),
    channels: { channels: replicas, subscribe: () => () => undefined },
    evidence: new EvidenceLog(),
    epochHints: new BoundedMap(16),
    releases: new Set(),
    onReleased: () => () => undefined,
  };
  return { ctx, replicas };
}

async function leaseOn(ctx: QuorumContext, resource: string): Promise<Lease> {
  const result = await acquireGrant(ctx, { resource, ttlMs: 10_000, waitMs: 0, timeoutMs: 5_000 });
  if (!result.ok) throw new Error(`not granted: ${result.reason}`);
  const lease = new Lease(ctx, result.grant, result.faults, { autoRenew: false }, () => () => undefined);
  // The join round runs off the holder's path; let its answers arrive.
  await new Promise((resolve) => setTimeout(resolve, 10));
  return lease;
}

describe('Leases that outlive f signers (client)', () => {
  it("asks the replica that did not sign to join at once, with f+1 of the grant's partials; then it holds the lease", async () => {
    const { ctx, replicas } = context();
    const lease = await leaseOn(ctx, 'jobs/join');
    const [outsider] = replicas.filter((r) => !lease.signers.includes(r.index));
    expect(outsider!.renewals).toHaveLength(1);
    const evidence = outsider!.renewals[0]!.evidence!;
    expect(evidence.map((e) => e.replica)).toEqual(lease.signers.slice(0, dealt.cluster.f + 1));
    expect(evidence.every((e) => e.epoch === lease.epoch && e.partial.length === 96)).toBe(true);
    expect(lease.holders).toEqual([1, 2, 3, 4]);
    // Signers are asked nothing more until the first renewal; then a holder's renewal carries no evidence.
    for (const signer of replicas.filter((r) => lease.signers.includes(r.index))) expect(signer.renewals).toEqual([]);
    expect((await lease.renew()).ok).toBe(true);
    expect(outsider!.renewals[1]!.evidence).toBeUndefined();
  });

  it('a signer that is silent, or lies that it does not hold the lease, costs nothing: t others renew it', async () => {
    for (const script of ['silent', 'not_holder'] as const) {
      const { ctx, replicas } = context();
      const lease = await leaseOn(ctx, `jobs/${script}`);
      replicas[lease.signers[0]! - 1]!.renew = script;
      const renewed = await lease.renew();
      expect(renewed, script).toMatchObject({ ok: true });
      expect(lease.active).toBe(true);
    }
  });

  it('f+1 replicas that held the lease denying it end it (lost); a replica that never held it is no evidence', async () => {
    const { ctx, replicas } = context();
    const lease = await leaseOn(ctx, 'jobs/denied');
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
    const held = await leaseOn(again.ctx, 'jobs/outsider');
    expect(held.holders).not.toContain(outsider.index);
    again.replicas[held.signers[0]! - 1]!.renew = 'not_holder';
    const notLost = await held.renew();
    expect(notLost).toMatchObject({ ok: false, reason: 'unavailable' });
    expect(held.ended).toBeUndefined();
  });
});
