/**
 * Arrival order at one replica when requests meet in the record's critical section (src/replica/service.ts,
 * handoff-queue.ts): a real replica service on a real LMDB signing record. A waiting acquire decided `busy` joins
 * its resource's line only once its answer is back from the section, a few microtasks later; meanwhile the section
 * decides the next request. Found by a simulator sweep (run 1346954583): the holder asked for its next turn right
 * behind a waiter, was granted at once (its own lease was the only one in the way), and the waiter that came first
 * was told the turn after it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/common/clock.js';
import { loadBackend } from '../../src/crypto/load.js';
import type { AcquireRequest, Outcome } from '../../src/protocol/messages.js';
import { ReplicaService } from '../../src/replica/service.js';
import { inThreadSigner } from '../../src/replica/signer.js';
import { SigningRecord } from '../../src/replica/signing-record.js';
import { dealCluster, testPolicy } from '../support/dealt-cluster.js';

const backend = loadBackend();
const dealt = dealCluster(4, backend);
const policy = testPolicy(dealt.cluster, { freeEpochStep: 6n, maxEpochStep: 6n });
const root = mkdtempSync(join(tmpdir(), 'qf-line-order-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const RESOURCE = 'orders/hot';
const first = new Uint8Array(32).fill(1);
const holder = new Uint8Array(32).fill(2);

function waitingAcquire(id: number, epoch: bigint): AcquireRequest {
  return { type: 'acquire', id, resource: RESOURCE, epoch, ttlMs: 30_000, waitMs: 20_000, nextEpoch: true };
}

function grantedEpoch(outcome: Outcome): bigint {
  expect(outcome.status).toBe('granted');
  return (outcome as { epoch: bigint }).epoch;
}

describe('a replica line when requests meet in the critical section', () => {
  it('a holder asking for its next turn right behind a waiter does not overtake it', async () => {
    const store = SigningRecord.open(
      join(root, 'replica'),
      { clusterId: dealt.cluster.id, replicaIndex: 1 },
      {
        probe: false,
        create: true,
      },
    );
    const clock = new ManualClock(1_000);
    const service = new ReplicaService({
      store,
      signer: inThreadSigner(backend, dealt.secretKeys[0]!),
      clock,
      policy,
    });
    try {
      const held = await service.handle(
        { type: 'acquire', id: 1, resource: RESOURCE, epoch: 1n, ttlMs: 30_000 },
        holder,
      );
      expect(held.status).toBe('granted');

      // In one turn, as they arrive back to back on two connections: the waiter, then the holder asking for its
      // next turn, then the holder's release of the lease it holds.
      const answered: string[] = [];
      const note = (who: string) => (outcome: Outcome) => {
        answered.push(who);
        return outcome;
      };
      const waiter = service.handle(waitingAcquire(2, 2n), first).then(note('waiter'));
      const next = service.handle(waitingAcquire(3, 2n), holder).then(note('holder'));
      const released = await service.handle({ type: 'release', id: 4, resource: RESOURCE, epoch: 1n }, holder);
      expect(released.status).toBe('released');

      const waiterEpoch = grantedEpoch(await waiter);
      expect(waiterEpoch).toBe(2n);
      expect(answered).toEqual(['waiter']);

      // The waiter's lease ends with its release; then the holder's turn comes, at the epoch after it.
      await service.handle({ type: 'release', id: 5, resource: RESOURCE, epoch: waiterEpoch }, first);
      expect(grantedEpoch(await next)).toBe(3n);
      expect(answered).toEqual(['waiter', 'holder']);
      // Nobody waits any more, nor is on the way into the line (an arrival never matched would hold every later
      // grant of the resource back).
      expect(service.handoffs.size).toBe(0);
      expect(service.handoffs.hasWaiters(RESOURCE)).toBe(false);
    } finally {
      service.handoffs.close();
      await store.close();
    }
  });
});
