/**
 * Combining partials without trusting replicas (real BLS, native backend):
 * optimistic combine and one verification, per-partial verification only on
 * failure, bad replicas named with evidence, equivocation caught across
 * holders and checkable by anyone with the cluster description.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { loadBackend } from '../../src/crypto/load.js';
import { EvidenceLog, verifyEquivocation } from '../../src/client/evidence.js';
import { partialHandle } from '../support/partial-handle.js';
import { encodeToken, verifyToken } from '../../src/token/admission-token.js';
import { grantMessage, type Grant } from '../../src/token/grant.js';
import { dealCluster } from '../support/dealt-cluster.js';
import { g2Encoding } from '../support/curve-encodings.js';
import { reshareByHand } from '../support/reshared-key.js';
import { describeDealtKey, localEndpoints, parseCluster } from '../../src/cluster/description.js';
import { systemRandom } from '../../src/crypto/random.js';
import { combinePartials } from '../../src/crypto/threshold.js';

const backend = loadBackend();
const dealt = dealCluster(4, backend);
const { cluster } = dealt;
const holderA = new Uint8Array(32).fill(0xa);
const holderB = new Uint8Array(32).fill(0xb);

function grantFor(holder: Uint8Array, epoch = 7n, resource = 'orders'): Grant {
  return { clusterId: cluster.id, resource, epoch, holder };
}

function collectorFor(grant: Grant, evidence = new EvidenceLog()) {
  return { collector: partialHandle(cluster, backend, grant, evidence), evidence };
}

describe('partial collection: combine optimistically, verify once', () => {
  it('t honest partials make a token that verifies', async () => {
    const grant = grantFor(holderA);
    const { collector, evidence } = collectorFor(grant);
    for (const i of [4, 2, 1]) expect(collector.add(i, dealt.partial(i, grant).bytes)).toEqual({ ok: true });
    const combined = await collector.tryCombine();
    expect(combined.ok).toBe(true);
    if (!combined.ok) return;
    expect(combined.signers).toEqual([1, 2, 4]);
    expect(verifyToken(encodeToken(grant, combined.signature), cluster).ok).toBe(true);
    expect(evidence.list()).toEqual([]);
  });

  it("names a replica that sent another replica's partial, and succeeds once an honest one arrives", async () => {
    const grant = grantFor(holderA);
    const { collector, evidence } = collectorFor(grant);
    collector.add(1, dealt.partial(1, grant).bytes);
    collector.add(2, dealt.partial(3, grant).bytes); // replica 2 replays replica 3's partial
    collector.add(4, dealt.partial(4, grant).bytes);
    const first = await collector.tryCombine();
    expect(first).toEqual({ ok: false, bad: [2] });
    expect(collector.count).toBe(2);
    expect(collector.add(3, dealt.partial(3, grant).bytes)).toEqual({ ok: true });
    const second = await collector.tryCombine();
    expect(second.ok && second.signers).toEqual([1, 3, 4]);
    expect(evidence.list().map((e) => [e.kind, e.replica])).toEqual([['invalid_partial', 2]]);
    expect(evidence.list()[0]!.grantMessage).toEqual(grantMessage(grant));
  });

  it('holds a partial outside the subgroup until the combined signature fails, then names it with evidence', async () => {
    // Partials are not checked for the subgroup one by one (the combined signature is): a replica that sends a curve
    // point outside it spoils the combination, and the per-partial checks that follow name it.
    const grant = grantFor(holderA);
    const { collector, evidence } = collectorFor(grant);
    const offSubgroup = g2Encoding(true);
    collector.add(1, dealt.partial(1, grant).bytes);
    expect(collector.add(2, offSubgroup)).toEqual({ ok: true });
    collector.add(4, dealt.partial(4, grant).bytes);
    expect(await collector.tryCombine()).toEqual({ ok: false, bad: [2] });
    expect(evidence.list().map((e) => [e.kind, e.replica])).toEqual([['invalid_partial', 2]]);
    expect(evidence.list()[0]!.partial).toEqual(offSubgroup);
    collector.add(3, dealt.partial(3, grant).bytes);
    const combined = await collector.tryCombine();
    expect(combined.ok && combined.signers).toEqual([1, 3, 4]);
    expect(combined.ok && verifyToken(encodeToken(grant, combined.signature), cluster).ok).toBe(true);
  });

  it('rejects bytes that are not a point at once, with evidence, and no second answer from that replica', async () => {
    const grant = grantFor(holderA);
    const { collector, evidence } = collectorFor(grant);
    // The compression flag (the first byte's top bit), which a 96-byte G2 encoding must have, cleared: fully random
    // bytes now and then decode as a point (outside the subgroup), which is another answer than `undecodable`.
    const garbage = new Uint8Array(randomBytes(96));
    garbage[0]! &= 0x7f;
    const added = collector.add(2, garbage);
    expect(added.ok).toBe(false);
    if (!added.ok) expect(added.reason).toBe('undecodable');
    expect(collector.add(2, dealt.partial(2, grant).bytes).ok).toBe(false);
    expect(evidence.list()).toMatchObject([{ kind: 'undecodable_partial', replica: 2 }]);
    expect(evidence.list()[0]!.partial).toEqual(garbage);
  });

  it('a valid point signed for another message is caught by verification', async () => {
    const grant = grantFor(holderA);
    const { collector } = collectorFor(grant);
    collector.add(1, dealt.partial(1, grant).bytes);
    collector.add(2, dealt.partial(2, grantFor(holderA, 8n)).bytes); // right key, wrong epoch
    collector.add(3, dealt.partial(3, grant).bytes);
    expect(await collector.tryCombine()).toEqual({ ok: false, bad: [2] });
  });
});

describe('evidence of equivocation', () => {
  it('a replica that signs two holders at one (resource, epoch) is caught, and the proof verifies independently', async () => {
    const shared = new EvidenceLog();
    const grantA = grantFor(holderA, 3n);
    const grantB = grantFor(holderB, 3n);
    const a = collectorFor(grantA, shared).collector;
    for (const i of [1, 2, 3]) a.add(i, dealt.partial(i, grantA).bytes);
    expect((await a.tryCombine()).ok).toBe(true);
    // Replica 3 now signs holder B at the same epoch: S1 says an honest replica never would.
    const b = collectorFor(grantB, shared).collector;
    expect(b.add(3, dealt.partial(3, grantB).bytes)).toEqual({ ok: true });
    const items = shared.list();
    expect(items).toHaveLength(1);
    const proof = items[0]!;
    expect(proof).toMatchObject({ kind: 'equivocation', replica: 3 });
    expect(verifyEquivocation(proof, cluster)).toBe(true);
    // Tampering with either half breaks the proof.
    expect(verifyEquivocation({ ...proof, partial: dealt.partial(3, grantFor(holderB, 4n)).bytes }, cluster)).toBe(
      false,
    );
    expect(
      verifyEquivocation(
        { ...proof, conflicting: { ...proof.conflicting!, grant: grantFor(holderB, 3n, 'other') } },
        cluster,
      ),
    ).toBe(false);
    expect(verifyEquivocation({ ...proof, replica: 2 }, cluster)).toBe(false);
  });

  it('a second, different partial from one replica for the same grant is invalid, and recorded', async () => {
    const shared = new EvidenceLog();
    const grant = grantFor(holderA, 5n);
    const first = collectorFor(grant, shared).collector;
    for (const i of [1, 2, 3]) first.add(i, dealt.partial(i, grant).bytes);
    expect((await first.tryCombine()).ok).toBe(true);
    const retry = collectorFor(grant, shared).collector;
    const added = retry.add(2, dealt.partial(2, grantFor(holderA, 6n)).bytes);
    expect(added.ok === false && added.reason).toBe('invalid');
    expect(shared.list()).toMatchObject([{ kind: 'invalid_partial', replica: 2 }]);
  });

  it('keeps a bounded number of items, oldest dropped first', async () => {
    const log = new EvidenceLog({ maxEvidence: 2 });
    const grant = grantFor(holderA);
    for (const replica of [1, 2, 3])
      log.record({
        kind: 'invalid_partial',
        replica,
        grant,
        grantMessage: grantMessage(grant),
        partial: new Uint8Array(96),
      });
    expect(log.list().map((e) => e.replica)).toEqual([2, 3]);
  });
});

describe('share generations: partials of one generation only are combined', () => {
  // Generation 1: the same group key reshared to new shares (membershipVersion 1); generation 0: the dealt shares.
  const reshared = reshareByHand(dealt.key, 4, systemRandom);
  const next = parseCluster({ ...describeDealtKey(reshared, localEndpoints(4)), membershipVersion: 1 }, { backend });
  const nextPartial = (index: number, grant: Grant) =>
    backend.sign(backend.secretKeyFromBytes(reshared.shares[index - 1]!.scaledSecretShare), grantMessage(grant));

  it('a partial of another generation is not held (other_generation, no evidence), and t of the cluster generation combine', async () => {
    const grant: Grant = { clusterId: next.id, resource: 'orders', epoch: 9n, holder: holderA };
    const evidence = new EvidenceLog();
    const collector = partialHandle(next, backend, grant, evidence);
    expect(collector.add(1, nextPartial(1, grant).bytes, 1)).toEqual({ ok: true });
    expect(collector.add(2, nextPartial(2, grant).bytes, 1)).toEqual({ ok: true });
    // Replica 3 still runs the old shares (generation 0): a valid old partial, never combined with new ones.
    const old = collector.add(3, dealt.partial(3, grant).bytes, 0);
    expect(old.ok ? 'held' : old.reason).toBe('other_generation');
    expect(collector.count).toBe(2);
    expect(await collector.tryCombine()).toEqual({ ok: false, bad: [] });
    expect(collector.add(4, nextPartial(4, grant).bytes, 1)).toEqual({ ok: true });
    const combined = await collector.tryCombine();
    expect(combined.ok && combined.signers).toEqual([1, 2, 4]);
    if (combined.ok) expect(verifyToken(encodeToken(grant, combined.signature), next).ok).toBe(true);
    expect(evidence.list()).toEqual([]);
  });

  it('a client on generation 0 holds no partial that names generation 1, whatever its bytes', async () => {
    const grant = grantFor(holderA);
    const { collector } = collectorFor(grant);
    const added = collector.add(1, dealt.partial(1, grant).bytes, 1);
    expect(added.ok ? 'held' : added.reason).toBe('other_generation');
    expect(collector.add(1, dealt.partial(1, grant).bytes, 0).ok).toBe(false); // no second say
  });

  it('mixed generations, had they been combined, would not make a valid token (why the rule exists)', async () => {
    const grant: Grant = { clusterId: next.id, resource: 'orders', epoch: 9n, holder: holderA };
    const mixed = combinePartials(backend, 4, [
      { index: 1, signature: nextPartial(1, grant) },
      { index: 2, signature: nextPartial(2, grant) },
      { index: 3, signature: dealt.partial(3, grant) },
    ]);
    expect(mixed !== null && verifyToken(encodeToken(grant, mixed), next).ok).toBe(false);
  });
});
