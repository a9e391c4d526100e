/**
 * A member's end of the ceremony (src/ceremony/confirmation.ts,
 * confirmResult): its own draft with t confirmations; else a result t
 * members confirmed, taken only when its own deals and shares give exactly
 * that cluster id; never with fewer than t distinct members' confirmations.
 */
import { describe, expect, it } from 'vitest';
import { confirmResult, type ResultDraft } from '../../src/ceremony/confirmation.js';
import type { Packet } from '../../src/ceremony/packets.js';
import { makeProposal } from '../../src/ceremony/proposal.js';
import { generateNodeKey } from '../../src/ceremony/node-key.js';
import type { ClusterDescriptionJson } from '../../src/cluster/description.js';

const keys = Array.from({ length: 4 }, () => generateNodeKey());
const proposal = makeProposal(
  keys.map((k, i) => ({
    nodeKey: k.nodeKey,
    encryptionKey: k.encryptionKey,
    endpoint: `ws://127.0.0.1:${7101 + i}`,
    ceremonyEndpoint: `ws://127.0.0.1:${7201 + i}`,
  })),
  1,
);

const id = (b: number) => new Uint8Array(32).fill(b);
const draftWith = (b: number, qualified: number[]): ResultDraft => ({
  cluster: { clusterId: Buffer.from(id(b)).toString('hex') } as ClusterDescriptionJson,
  qualified,
  clusterId: id(b),
  share: new Uint8Array(32).fill(b),
});
const confirm = (from: number, b: number, qualified: number[]): Packet<'confirm'> => ({
  phase: 'confirm',
  from,
  body: { clusterId: id(b), qualified, signature: new Uint8Array(64).fill(from) },
  bodyDigest: new Uint8Array(32),
  bytes: new Uint8Array([from, b]),
});
const receivers = [1, 2, 3, 4];
const dealers = [1, 2, 3, 4];

describe('ceremony confirmation', () => {
  it('keeps its own draft once t members confirmed it', () => {
    const out = confirmResult(
      proposal,
      draftWith(1, [1, 2, 3, 4]),
      [confirm(1, 1, [1, 2, 3, 4]), confirm(2, 1, [1, 2, 3, 4]), confirm(3, 1, [1, 2, 3, 4])],
      receivers,
      new Map(),
      dealers,
      () => undefined,
    );
    expect(out).toMatchObject({ ok: true, adopted: false });
  });

  it('takes another result t members confirmed when its own deals and shares give that id, naming who signed and who left', () => {
    const others = [confirm(1, 2, [1, 2, 4]), confirm(2, 2, [1, 2, 4]), confirm(4, 2, [1, 2, 4])];
    const out = confirmResult(
      proposal,
      draftWith(1, [1, 2, 3, 4]),
      [confirm(3, 1, [1, 2, 3, 4]), ...others],
      receivers,
      new Map(),
      dealers,
      (q) => (q.join(',') === '1,2,4' ? draftWith(2, [1, 2, 4]) : undefined),
    );
    expect(out.ok).toBe(true);
    if (!out.ok) return;
    expect(out.adopted).toBe(true);
    expect(out.result.qualified).toEqual([1, 2, 4]);
    expect(out.result.signatures.map((s) => s.index)).toEqual([1, 2, 4]);
    expect(out.result.excluded).toEqual([
      { dealer: 3, reason: 'not qualified by the 3 members that confirmed the result' },
    ]);
    expect([...out.result.scaledSecretShare]).toEqual([...draftWith(2, []).share]);
  });

  it('refuses to take a result its own deals do not give (another id), or one fewer than t distinct members confirmed', () => {
    const others = [confirm(1, 2, [1, 2, 4]), confirm(2, 2, [1, 2, 4]), confirm(4, 2, [1, 2, 4])];
    const wrongId = confirmResult(proposal, draftWith(1, [1, 2, 3, 4]), others, receivers, new Map(), dealers, () =>
      draftWith(3, [1, 2, 4]),
    );
    expect(wrongId.ok).toBe(false);
    const repeated = [confirm(1, 2, [1, 2, 4]), confirm(1, 2, [1, 2, 4]), confirm(2, 2, [1, 2, 4])];
    const tooFew = confirmResult(proposal, draftWith(1, [1, 2, 3, 4]), repeated, receivers, new Map(), dealers, () =>
      draftWith(2, [1, 2, 4]),
    );
    expect(tooFew.ok).toBe(false);
  });
});
