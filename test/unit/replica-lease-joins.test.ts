/**
 * Leases that outlive f signers (docs/protocol.md): a renew at a replica that does not hold the lease joins it when
 * the replica could grant it now, above its record (durably, like a grant without a partial) or at or below it (in
 * memory, for a grant it never signed); a joined lease keeps every other holder out, and its holder renews and
 * releases it as any other. And a lapsed lease is not revived by a session the replica does not know (issue 43,
 * item 1). The pure policy first, then the service over a real LMDB signing record, restart included.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/common/clock.js';
import { loadBackend } from '../../src/crypto/load.js';
import type { Request } from '../../src/protocol/messages.js';
import { decide, floorRecord, type PolicyRecord } from '../../src/replica/policy.js';
import { ReplicaService } from '../../src/replica/service.js';
import { inThreadSigner } from '../../src/replica/signer.js';
import { SigningRecord } from '../../src/replica/signing-record.js';
import { grantDigest } from '../../src/token/grant.js';
import { dealCluster, testPolicy } from '../support/dealt-cluster.js';

const backend = loadBackend();
const dealt = dealCluster(4, backend);
const config = testPolicy(dealt.cluster);
const holder = new Uint8Array(32).fill(1);
const other = new Uint8Array(32).fill(2);
const R = 'orders/1';

const renew = (epoch: bigint, ttlMs = 1_000): Request => ({ type: 'renew', id: 1, resource: R, epoch, ttlMs });
const acquire = (epoch: bigint, ttlMs = 1_000): Request => ({ type: 'acquire', id: 1, resource: R, epoch, ttlMs });
const release = (epoch: bigint): Request => ({ type: 'release', id: 1, resource: R, epoch });

function recordOf(epoch: bigint, of: Uint8Array, lease: Partial<PolicyRecord> = {}): PolicyRecord {
  return {
    epoch,
    holder: of,
    grantDigest: grantDigest({ clusterId: config.clusterId, resource: R, epoch, holder: of }),
    leaseEndsAt: 0,
    released: false,
    ...lease,
  };
}

describe('Leases that outlive f signers: a renew joins the lease where it could be granted (policy)', () => {
  it('above the record: a join is recorded durably, for the renewing session, and signs nothing', () => {
    const decision = decide(recordOf(3n, other, { leaseEndsAt: 500 }), renew(5n), holder, 1_000, config, 0n, [], 's');
    expect(decision).toMatchObject({
      action: 'join',
      record: { epoch: 5n, holder },
      leaseEndsAt: 2_000,
      outcome: { status: 'renewed', remainingMs: 1_000 },
    });
    expect(decision.action === 'join' && decision.joined).toBeUndefined();
    // Without a record at all, above the floor.
    expect(decide(undefined, renew(5n), holder, 1_000, config, 2n)).toMatchObject({ action: 'join', record: {} });
  });

  it('refuses to join while another lease runs here: another holder, or the same holder under another session', () => {
    const running = recordOf(3n, other, { leaseEndsAt: 1_500, session: 'x' });
    expect(decide(running, renew(5n), holder, 1_000, config)).toEqual({
      action: 'reply',
      outcome: { status: 'not_holder', epoch: 3n },
    });
    const ownOtherSession = recordOf(3n, holder, { leaseEndsAt: 1_500, session: 'x' });
    expect(decide(ownOtherSession, renew(5n), holder, 1_000, config, 0n, [], 'y')).toMatchObject({
      outcome: { status: 'not_holder' },
    });
    // Below the record, not even the caller's own running lease is replaced by a grant it never got.
    expect(decide(ownOtherSession, renew(2n), holder, 1_000, config, 0n, [], 'x')).toMatchObject({
      outcome: { status: 'not_holder', epoch: 3n },
    });
    // Its own session's lease at a lower epoch is no obstacle above the record: the join supersedes it.
    expect(decide(ownOtherSession, renew(5n), holder, 1_000, config, 0n, [], 'x')).toMatchObject({ action: 'join' });
  });

  it('above the record, follows the epoch steps: beyond the free step only with evidence', () => {
    const behind = recordOf(3n, other);
    expect(decide(behind, renew(50n), holder, 1_000, config)).toMatchObject({ outcome: { status: 'not_holder' } });
    const one = [{ replica: 2, epoch: 50n }];
    expect(decide(behind, renew(50n), holder, 1_000, config, 0n, one)).toMatchObject({ action: 'join' });
    expect(decide(behind, renew(500n), holder, 1_000, config, 0n, one)).toMatchObject({
      outcome: { status: 'not_holder' },
    });
    const two = [...one, { replica: 3, epoch: 500n }].map((s) => ({ ...s, epoch: 500n }));
    expect(decide(behind, renew(500n), holder, 1_000, config, 0n, two)).toMatchObject({ action: 'join' });
  });

  it('at or below the record, once the lease there ended, joins in memory for a grant it never signed', () => {
    // A contender that lost epoch 5 got this replica first (its record is at 6), then let go.
    const passed = recordOf(6n, other, { released: true });
    const decision = decide(passed, renew(5n), holder, 1_000, config, 0n, [], 's');
    expect(decision).toMatchObject({
      action: 'join',
      joined: { epoch: 5n, holder },
      outcome: { status: 'renewed' },
    });
    expect(decision.action === 'join' && decision.record).toBeUndefined();
    // The same epoch as the record, another holder: the lease of the epoch's winner, not the record's.
    expect(decide(recordOf(5n, other), renew(5n), holder, 1_000, config)).toMatchObject({ joined: { epoch: 5n } });
  });

  it('without a record, at or below the floor (compaction raised it past the epoch): joins in memory too', () => {
    expect(decide(undefined, renew(5n), holder, 1_000, config, 8n, [], 's')).toMatchObject({
      action: 'join',
      joined: { epoch: 5n, holder },
    });
    // The floor then stands for the record, holding that lease: another holder is kept out, its holder renews.
    const lease = { epoch: 5n, holder, session: 's', released: false };
    const held = floorRecord(8n, lease, 2_000);
    expect(decide(held, acquire(9n), other, 1_000, config, 8n, [], 'o')).toMatchObject({
      outcome: { status: 'busy', epoch: 8n },
    });
    expect(decide(held, renew(5n), holder, 1_000, config, 8n, [], 's')).toMatchObject({ action: 'renew' });
    expect(decide(held, release(5n), holder, 1_000, config, 8n, [], 's')).toMatchObject({ action: 'release' });
    // Once it ended, the resource is a resource without a record again: the wide first step from the floor applies.
    expect(decide(floorRecord(8n, lease, 500), acquire(100n), other, 1_000, config, 8n)).toMatchObject({
      action: 'grant',
    });
  });

  it('a joined lease keeps everyone else out, and its holder renews and releases it; no partial is sent for it', () => {
    const joined = recordOf(6n, other, {
      joined: { epoch: 5n, holder, session: 's', released: false },
      leaseEndsAt: 2_000,
      session: 'o',
    });
    expect(decide(joined, acquire(7n), other, 1_000, config, 0n, [], 'o')).toMatchObject({
      outcome: { status: 'busy', remainingMs: 1_000 },
    });
    expect(decide(joined, renew(6n), other, 1_000, config, 0n, [], 'o')).toMatchObject({
      outcome: { status: 'not_holder' },
    });
    expect(decide(joined, renew(5n, 3_000), holder, 1_000, config, 0n, [], 's')).toMatchObject({
      action: 'renew',
      leaseEndsAt: 4_000,
    });
    expect(decide(joined, renew(5n), holder, 1_000, config, 0n, [], 'other session')).toMatchObject({
      outcome: { status: 'not_holder' },
    });
    expect(decide(joined, release(5n), holder, 1_000, config, 0n, [], 's')).toMatchObject({ action: 'release' });
    // The record's grant is not this holder's: asking for its partial is stale, never a resend.
    expect(decide(joined, acquire(5n), holder, 1_000, config, 0n, [], 's')).toMatchObject({
      outcome: { status: 'stale' },
    });
    // Its holder asking for a new epoch is not kept out by its own lease.
    expect(decide(joined, acquire(7n), holder, 1_000, config, 0n, [], 's')).toMatchObject({ action: 'grant' });
  });

  it('never joins the grant the record holds once its lease there ended or was released', () => {
    expect(
      decide(recordOf(5n, holder, { released: true, session: 's' }), renew(5n), holder, 1_000, config, 0n, [], 's'),
    ).toMatchObject({ outcome: { status: 'not_holder', epoch: 5n } });
    // A grant the record holds under a session that is over is not joined by another one either (issue 43, item 1).
    expect(
      decide(recordOf(5n, holder, { leaseEndsAt: 500 }), renew(5n), holder, 1_000, config, 0n, [], 's2'),
    ).toMatchObject({ outcome: { status: 'not_holder' } });
  });
});

describe("Leases that outlive f signers: the record's grant after a lease joined below it", () => {
  // The record's grant (epoch 6) lapsed here; another holder joined below it at epoch 5, and that lease is over now.
  const after = (lease: Partial<PolicyRecord> = {}) =>
    recordOf(6n, other, {
      joined: { epoch: 5n, holder, session: 's', released: true },
      leaseEndsAt: 0,
      session: 'o',
      ...lease,
    });

  it('its holding session takes its lease up again (renew, or the identical acquire), as it revives a lapsed lease', () => {
    expect(decide(after(), renew(6n), other, 1_000, config, 0n, [], 'o')).toMatchObject({
      action: 'renew',
      leaseEndsAt: 2_000,
    });
    const resend = decide(after(), acquire(6n), other, 1_000, config, 0n, [], 'o');
    expect(resend).toMatchObject({ action: 'resend' });
  });

  it('not while the joined lease runs, not once released, and not for another session', () => {
    const running = after({ joined: { epoch: 5n, holder, session: 's', released: false }, leaseEndsAt: 1_500 });
    expect(decide(running, renew(6n), other, 1_000, config, 0n, [], 'o')).toMatchObject({
      outcome: { status: 'not_holder' },
    });
    expect(decide(running, acquire(6n), other, 1_000, config, 0n, [], 'o')).toMatchObject({
      outcome: { status: 'stale' },
    });
    expect(decide(after({ released: true }), renew(6n), other, 1_000, config, 0n, [], 'o')).toMatchObject({
      outcome: { status: 'not_holder' },
    });
    expect(decide(after(), renew(6n), other, 1_000, config, 0n, [], 'o2')).toMatchObject({
      outcome: { status: 'not_holder' },
    });
  });
});

describe('Sessions: a lapsed lease is not revived by a session the replica does not know (issue 43, item 1)', () => {
  it('an unknown session renews or releases a lease only while it runs (the restart rule), and then holds it', () => {
    const lapsed = recordOf(7n, holder, { leaseEndsAt: 900 });
    expect(decide(lapsed, renew(7n), holder, 1_000, config, 0n, [], 's2')).toMatchObject({
      outcome: { status: 'not_holder', epoch: 7n },
    });
    expect(decide(lapsed, release(7n), holder, 1_000, config, 0n, [], 's2')).toMatchObject({
      outcome: { status: 'not_holder' },
    });
    expect(decide(lapsed, acquire(7n), holder, 1_000, config, 0n, [], 's2')).toMatchObject({
      outcome: { status: 'stale' },
    });
    const restartLease = recordOf(7n, holder, { leaseEndsAt: 60_000 });
    expect(decide(restartLease, renew(7n), holder, 1_000, config, 0n, [], 's2')).toMatchObject({ action: 'renew' });
    // The session that held it may still revive its own lapsed lease: nobody else was signed meanwhile.
    const known = recordOf(7n, holder, { leaseEndsAt: 900, session: 's1' });
    expect(decide(known, renew(7n), holder, 1_000, config, 0n, [], 's1')).toMatchObject({ action: 'renew' });
  });
});

describe('Leases that outlive f signers: the service over a real signing record', () => {
  const root = mkdtempSync(join(tmpdir(), 'qf-lease-joins-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  // `create` the first time only: a restart opens the record it made, as a replica does.
  function open(dir: string, clock: ManualClock, create = false): { service: ReplicaService; store: SigningRecord } {
    const identity = { clusterId: dealt.cluster.id, replicaIndex: 4 };
    const store = SigningRecord.open(join(root, dir), identity, { probe: false, create });
    const signer = inThreadSigner(backend, dealt.secretKeys[3]!);
    return { service: new ReplicaService({ store, signer, clock, policy: config }), store };
  }

  it('a join above the record is durable before `renewed`: after a restart the lease still keeps others out', async () => {
    const clock = new ManualClock(1_000);
    const { service, store } = open('above', clock, true);
    expect(await service.handle(renew(4n, 30_000), holder, { session: 's' })).toMatchObject({ status: 'renewed' });
    expect(store.get(R)).toMatchObject({ epoch: 4n });
    expect(await service.handle(acquire(5n), other)).toMatchObject({ status: 'busy' });
    await store.close();
    const restarted = open('above', clock);
    try {
      expect(await restarted.service.handle(acquire(5n), other)).toMatchObject({ status: 'busy' });
      // Its holder, whatever its session now, renews it (the restart rule), as for a lease it was granted.
      expect(await restarted.service.handle(renew(4n), holder, { session: 't' })).toMatchObject({ status: 'renewed' });
    } finally {
      await restarted.store.close();
    }
  });

  it('a join below the record writes nothing, keeps others out, and ends with its release', async () => {
    const clock = new ManualClock(1_000);
    const { service, store } = open('below', clock, true);
    try {
      expect(await service.handle(acquire(6n), other, { session: 'o' })).toMatchObject({ status: 'granted' });
      expect(await service.handle(release(6n), other, { session: 'o' })).toMatchObject({ status: 'released' });
      expect(await service.handle(renew(5n), holder, { session: 's' })).toMatchObject({ status: 'renewed' });
      expect(store.get(R)).toMatchObject({ epoch: 6n, holder: other });
      expect(await service.handle(acquire(7n), other, { session: 'o' })).toMatchObject({ status: 'busy' });
      const listed = service.activeLeases({ type: 'leases', id: 1, limit: 8 }, holder);
      expect(listed).toMatchObject({ leases: [{ resource: R, epoch: 5n, holder }] });
      expect(await service.handle(release(5n), holder, { session: 's' })).toMatchObject({ status: 'released' });
      expect(await service.handle(acquire(7n), other, { session: 'o' })).toMatchObject({ status: 'granted' });
    } finally {
      await store.close();
    }
  });
});
