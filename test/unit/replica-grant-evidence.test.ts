/**
 * Catch-up evidence on the wire and at the replica (docs/protocol.md, "Epoch steps"): the codec takes exactly
 * `{ replica, epoch, partial }` entries, at most 30; the checker counts only other replicas' partials that verify
 * on a grant of the request's resource to the asking holder at the requested epoch or above, each replica once,
 * and spends the connection's pairing budget only on partials it has not verified before.
 */
import { Packr } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { loadBackend } from '../../src/crypto/load.js';
import { decodeClientMessage, encodeMessage } from '../../src/protocol/codec.js';
import type { AcquireRequest, GrantEvidence } from '../../src/protocol/messages.js';
import { EvidenceAllowance, EvidenceChecker, MAX_PENDING_PER_IDENTITY } from '../../src/replica/grant-evidence.js';
import { VerifyBatcher } from '../../src/crypto/verify-batch.js';
import { TokenBucket } from '../../src/common/token-bucket.js';
import { catchUpStep } from '../../src/client/catch-up.js';
import { dealCluster } from '../support/dealt-cluster.js';
import { codeOf } from '../support/error-code.js';

const backend = loadBackend();
const dealt = dealCluster(4, backend);
const holder = new Uint8Array(32).fill(5);
const other = new Uint8Array(32).fill(6);
const resource = 'orders/7';

function evidenceBy(replica: number, epoch: bigint, forHolder = holder, forResource = resource): GrantEvidence {
  const partial = dealt.partial(replica, {
    clusterId: dealt.cluster.id,
    resource: forResource,
    epoch,
    holder: forHolder,
  }).bytes;
  return { replica, epoch, partial };
}

function acquire(epoch: bigint, evidence: GrantEvidence[]): AcquireRequest {
  return { type: 'acquire', id: 1, resource, epoch, ttlMs: 1_000, evidence };
}

describe('evidence on the wire', () => {
  it('round-trips, and an acquire without evidence decodes as before', () => {
    const request = acquire(9n, [evidenceBy(2, 9n), evidenceBy(3, 12n)]);
    expect(decodeClientMessage(encodeMessage(request))).toEqual(request);
    expect(decodeClientMessage(encodeMessage({ ...request, evidence: [] }))).toEqual({
      type: 'acquire',
      id: 1,
      resource,
      epoch: 9n,
      ttlMs: 1_000,
    });
  });

  it('refuses malformed evidence with PROTOCOL_ERROR', () => {
    const packr = new Packr({ useRecords: false, mapsAsObjects: true, int64AsType: 'bigint' });
    const good = { replica: 2, epoch: 9n, partial: new Uint8Array(96) };
    const frames = [
      { evidence: 'x' },
      { evidence: [1] },
      { evidence: [{ ...good, extra: 1 }] },
      { evidence: [{ ...good, replica: 0 }] },
      { evidence: [{ ...good, replica: 32 }] },
      { evidence: [{ ...good, epoch: 0n }] },
      { evidence: [{ ...good, partial: new Uint8Array(95) }] },
      { evidence: Array.from({ length: 31 }, () => good) },
    ];
    for (const extra of frames) {
      const frame = packr.pack({ v: 1, type: 'acquire', id: 1, resource, epoch: 9n, ttlMs: 1_000, ...extra });
      expect(
        codeOf(() => decodeClientMessage(frame)),
        JSON.stringify(Object.keys(extra)),
      ).toBe('PROTOCOL_ERROR');
    }
  });
});

describe('EvidenceChecker', () => {
  const unlimited = () => true;

  it('counts other replicas whose partial verifies at the requested epoch or above, each once', async () => {
    const checker = new EvidenceChecker(dealt.cluster, 1);
    const support = await checker.support(
      acquire(9n, [evidenceBy(2, 9n), evidenceBy(2, 10n), evidenceBy(3, 40n), evidenceBy(4, 8n), evidenceBy(1, 9n)]),
      holder,
      unlimited,
    );
    // Replica 2 once (its first entry), replica 3 above the epoch; replica 4 below it and this replica's own: none.
    expect(support).toEqual([
      { replica: 2, epoch: 9n },
      { replica: 3, epoch: 40n },
    ]);
  });

  it('gives no support for a partial of another holder, resource or epoch than it claims, or not a point', async () => {
    const checker = new EvidenceChecker(dealt.cluster, 1);
    const wrong = [
      evidenceBy(2, 9n, other),
      evidenceBy(3, 9n, holder, 'orders/8'),
      { ...evidenceBy(4, 9n), epoch: 10n },
    ];
    expect(await checker.support(acquire(9n, wrong), holder, unlimited)).toEqual([]);
    const garbage = { replica: 2, epoch: 9n, partial: new Uint8Array(96).fill(0xff) };
    expect(await checker.support(acquire(9n, [garbage]), holder, unlimited)).toEqual([]);
  });

  it('spends one unit of the budget per partial it has not verified before, and none without a budget left', async () => {
    const checker = new EvidenceChecker(dealt.cluster, 1);
    let spent = 0;
    const budget = () => ++spent <= 1;
    const request = acquire(9n, [evidenceBy(2, 9n), evidenceBy(3, 9n)]);
    expect(await checker.support(request, holder, budget)).toEqual([{ replica: 2, epoch: 9n }]);
    expect(spent).toBe(2);
    // Replica 2's partial is remembered; replica 3's still needs a pairing, and the budget is gone.
    expect(await checker.support(request, holder, () => false)).toEqual([{ replica: 2, epoch: 9n }]);
    expect(await checker.support(request, holder, unlimited)).toEqual([
      { replica: 2, epoch: 9n },
      { replica: 3, epoch: 9n },
    ]);
  });
});

describe('EvidenceChecker: cheapest checks first (issue 43, finding 2)', () => {
  /** A budget that counts what it was asked for. */
  const counting = () => {
    const budget = Object.assign(() => ++budget.spent > 0, { spent: 0 });
    return budget;
  };
  const atLeast = (count: number) => (support: readonly unknown[]) => support.length >= count;
  /** A point in the subgroup that is no partial of this cluster: a partial of another cluster's key. */
  const stranger = dealCluster(4, backend);
  const randomPoint = (replica: number, epoch: bigint): GrantEvidence => ({
    replica,
    epoch,
    partial: stranger.partial(replica, { clusterId: stranger.cluster.id, resource, epoch, holder }).bytes,
  });

  it('checks nothing when even all of the evidence, verified, would not be enough', async () => {
    const checker = new EvidenceChecker(dealt.cluster, 1);
    const budget = counting();
    const request = acquire(9n, [evidenceBy(2, 9n), evidenceBy(3, 9n)]);
    expect(await checker.support(request, holder, budget, atLeast(3))).toEqual([]);
    expect(budget.spent).toBe(0);
  });

  it('checks only as many as are still needed, and more only when some fail', async () => {
    const budget = counting();
    const request = acquire(9n, [evidenceBy(2, 9n), evidenceBy(3, 9n), evidenceBy(4, 9n)]);
    expect(await new EvidenceChecker(dealt.cluster, 1).support(request, holder, budget, atLeast(1))).toEqual([
      { replica: 2, epoch: 9n },
    ]);
    expect(budget.spent).toBe(1);
    const mixed = counting();
    const withBad = acquire(9n, [randomPoint(2, 9n), evidenceBy(3, 9n), randomPoint(4, 9n)]);
    expect(await new EvidenceChecker(dealt.cluster, 1).support(withBad, holder, mixed, atLeast(2))).toEqual([
      { replica: 3, epoch: 9n },
    ]);
    // Two at first (both needed), then the third to replace the one that failed.
    expect(mixed.spent).toBe(3);
  });

  it('one identity holds at most MAX_PENDING_PER_IDENTITY places in the queue; another identity still gets one', async () => {
    // A batcher that runs only when told: every check stays pending meanwhile.
    const held: (() => void)[] = [];
    const batcher = new VerifyBatcher(backend, 8, (run) => held.push(run));
    const checker = new EvidenceChecker(dealt.cluster, 1, batcher, { maxPending: 1_000 });
    const flood = Array.from({ length: MAX_PENDING_PER_IDENTITY + 4 }, (_, k) =>
      checker.support(acquire(BigInt(100 + k), [randomPoint(2, BigInt(100 + k))]), other, () => true),
    );
    expect(checker.pending).toBe(MAX_PENDING_PER_IDENTITY);
    const honest = checker.support(acquire(9n, [evidenceBy(2, 9n)]), holder, () => true);
    expect(checker.pending).toBe(MAX_PENDING_PER_IDENTITY + 1);
    for (let turns = 0; held.length > 0 && turns < 100; turns++) held.shift()!();
    expect(await honest).toEqual([{ replica: 2, epoch: 9n }]);
    expect((await Promise.all(flood)).flat()).toEqual([]);
    expect(checker.pending).toBe(0);
  });

  it('checks nothing while a full queue of checks waits, and spends no budget on it', async () => {
    const checker = new EvidenceChecker(dealt.cluster, 1, undefined, { maxPending: 0 });
    const budget = counting();
    expect(await checker.support(acquire(9n, [evidenceBy(2, 9n)]), holder, budget)).toEqual([]);
    expect(budget.spent).toBe(0);
    expect(checker.pending).toBe(0);
  });
});

describe('EvidenceAllowance (issue 43, finding 2)', () => {
  it("one identity's connections share its allowance: more connections buy no more checks", () => {
    let now = 0;
    const allowance = new EvidenceAllowance({ perIdentity: 3, total: 100 }, () => now);
    const connections = Array.from({ length: 8 }, () => new TokenBucket(32, 32, 0));
    const spent = connections.map((c) => allowance.budgetFor(holder, c)).map((budget) => [budget(), budget()]);
    expect(spent.flat().filter(Boolean)).toHaveLength(3);
    // Another identity has its own.
    expect(allowance.budgetFor(other)()).toBe(true);
    now = 1_000;
    expect(allowance.budgetFor(holder, connections[0])()).toBe(true);
  });

  it('every identity together draws on the total; a refused check costs no allowance', () => {
    const allowance = new EvidenceAllowance({ perIdentity: 5, total: 4 }, () => 0);
    const identities = Array.from({ length: 6 }, (_, k) => new Uint8Array(32).fill(k + 10));
    const granted = identities.map((key) => allowance.budgetFor(key)());
    expect(granted).toEqual([true, true, true, true, false, false]);
    // A connection out of tokens refuses without spending its identity's or the total's.
    const fresh = new EvidenceAllowance({ perIdentity: 1, total: 1 }, () => 0);
    const empty = new TokenBucket(1, 1, 0);
    empty.take(0);
    expect(fresh.budgetFor(holder, empty)()).toBe(false);
    expect(fresh.budgetFor(holder)()).toBe(true);
  });
});

describe('catchUpStep (the client)', () => {
  const held = [evidenceBy(1, 500n), evidenceBy(2, 500n), evidenceBy(3, 500n)];
  it('f+1 partials: straight to the epoch, at any distance, and never the target replica’s own', () => {
    expect(catchUpStep(4, 0n, 500n, held, 1, 100n)).toEqual({ epoch: 500n, evidence: held.slice(0, 2) });
    expect(catchUpStep(1, 0n, 500n, held, 1, 100n)?.evidence.map((e) => e.replica)).toEqual([2, 3]);
  });

  it('fewer than f+1: the epoch within maxEpochStep, else a step of maxEpochStep; none: nothing to send', () => {
    const one = held.slice(0, 1);
    expect(catchUpStep(4, 450n, 500n, one, 1, 100n)).toEqual({ epoch: 500n, evidence: one });
    expect(catchUpStep(4, 250n, 500n, one, 1, 100n)).toEqual({ epoch: 350n, evidence: one });
    expect(catchUpStep(4, 250n, 500n, [], 1, 100n)).toBeUndefined();
    expect(catchUpStep(1, 250n, 500n, one, 1, 100n)).toBeUndefined();
  });
});
