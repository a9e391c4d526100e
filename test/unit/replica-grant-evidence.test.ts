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
import { EvidenceChecker } from '../../src/replica/grant-evidence.js';
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
