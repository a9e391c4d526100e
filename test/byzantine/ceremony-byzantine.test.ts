/**
 * The key ceremony with f Byzantine members, one behaviour per test, over
 * real sockets: every honest member ends with the same qualified set and
 * group key (or every honest member aborts), never two keys; a dealer caught
 * cheating is excluded and named.
 */
import { WebSocket } from 'ws';
import { describe, expect, it } from 'vitest';
import { parseCluster } from '../../src/cluster/description.js';
import { parseReplicaKey, replicaKeyJson } from '../../src/cluster/replica-key.js';
import type { CeremonyResult } from '../../src/ceremony/events.js';
import { ceremonyBehaviour, garbageFrames, type CeremonyBehaviour } from '../../src/testing/ceremony-byzantine.js';
import { runNetworkCeremony, type NetworkRun } from '../support/ceremony-net.js';

/**
 * Complaints and justifications take three message rounds each (the reliable broadcast), and here every member's
 * crypto shares one thread of a 2-core machine that other test files load too (load averages of 15 to 30 seen):
 * seven members get the production default. Only behaviours that leave a phase to its deadline wait this long.
 */
const PHASE_TIMEOUT_MS: Record<number, number> = { 4: 4000, 7: 10_000 };

/** Byzantine members are the last f. */
function byzantineOf(n: number): number[] {
  const f = (n - 1) / 3;
  return Array.from({ length: f }, (_, k) => n - f + 1 + k);
}

async function runWith(
  behaviour: CeremonyBehaviour,
  n = 4,
): Promise<{ run: NetworkRun; honest: CeremonyResult[]; byzantine: number[] }> {
  const byzantine = byzantineOf(n);
  const run = await runNetworkCeremony(n, {
    rewrites: new Map(byzantine.map((b) => [b, ceremonyBehaviour(behaviour, b, n)])),
    phaseTimeoutMs: PHASE_TIMEOUT_MS[n]!,
  });
  const honestOutcomes = run.outcomes.filter((_, k) => !byzantine.includes(k + 1));
  const finished = honestOutcomes.filter((o) => o?.ok);
  // Never two keys, and never some honest finishing while others abort.
  expect(
    finished.length === 0 || finished.length === honestOutcomes.length,
    JSON.stringify(honestOutcomes.map((o) => (o?.ok ? 'ok' : o))),
  ).toBe(true);
  const honest = finished.map((o) => (o!.ok ? o!.result : undefined)!);
  expect(new Set(honest.map((r) => r.cluster.clusterId)).size).toBeLessThanOrEqual(1);
  expect(new Set(honest.map((r) => r.qualified.join(','))).size).toBeLessThanOrEqual(1);
  return { run, honest, byzantine };
}

/** Every honest member's share loads against the cluster it agreed on. */
function expectUsableShares(run: NetworkRun, honest: CeremonyResult[], byzantine: number[]): void {
  const cluster = parseCluster(honest[0]!.cluster);
  const honestIndices = run.nodeKeys.map((_, k) => k + 1).filter((i) => !byzantine.includes(i));
  honest.forEach((r, k) => {
    const index = honestIndices[k]!;
    expect(() =>
      parseReplicaKey(
        replicaKeyJson(cluster.idHex, {
          index,
          scaledSecretShare: r.scaledSecretShare,
          publicKeyShare: new Uint8Array(),
        }),
        cluster,
      ),
    ).not.toThrow();
  });
}

function expectExcluded(honest: CeremonyResult[], byzantine: number[], reason: RegExp): void {
  expect(honest.length).toBeGreaterThan(0);
  for (const r of honest) {
    for (const b of byzantine) {
      expect(r.qualified).not.toContain(b);
      expect(r.excluded.find((e) => e.dealer === b)?.reason).toMatch(reason);
    }
  }
}

describe('ceremony with f Byzantine members', () => {
  it.each([4, 7])(
    'a wrong share to one member, not justified: the dealer is excluded and named (n = %i)',
    async (n) => {
      const { run, honest, byzantine } = await runWith('wrong-share', n);
      expectExcluded(honest, byzantine, /did not answer the complaint of member 1/);
      expectUsableShares(run, honest, byzantine);
    },
  );

  it('a wrong share to one member, justified in public: the dealer stays, the victim takes the revealed share', async () => {
    const { run, honest, byzantine } = await runWith('wrong-share-justified');
    expect(honest).toHaveLength(3);
    expect(honest[0]!.qualified).toEqual([1, 2, 3, 4]);
    expectUsableShares(run, honest, byzantine);
  });

  it('commitments inconsistent with the shares: every member complains, the dealer cannot justify, it is excluded', async () => {
    const { run, honest, byzantine } = await runWith('bad-commitments');
    expectExcluded(honest, byzantine, /complaint/);
    expectUsableShares(run, honest, byzantine);
  });

  it('two versions of its deal to different members: the echo round shows both, the dealer is excluded as an equivocator', async () => {
    const { run, honest, byzantine } = await runWith('two-deals');
    expectExcluded(honest, byzantine, /equivocated/);
    expectUsableShares(run, honest, byzantine);
  });

  it('a false complaint: the accused honest dealer reveals the share, stays qualified, and the key is unchanged for everyone', async () => {
    const { run, honest, byzantine } = await runWith('false-complaint');
    expect(honest).toHaveLength(3);
    expect(honest[0]!.qualified).toEqual([1, 2, 3, 4]);
    expectUsableShares(run, honest, byzantine);
  });

  it('a bad justification (a share that fails the commitments): the dealer is excluded', async () => {
    const { run, honest, byzantine } = await runWith('bad-justification');
    expectExcluded(honest, byzantine, /fails its commitments/);
    expectUsableShares(run, honest, byzantine);
  });

  it('a missing justification: the dealer is excluded', async () => {
    const { honest, byzantine } = await runWith('missing-justification');
    expectExcluded(honest, byzantine, /did not answer/);
  });

  it('silence after accepting: the silent dealer is excluded after the deal deadline; the others finish', async () => {
    const { run, honest, byzantine } = await runWith('silent-after-accept');
    expectExcluded(honest, byzantine, /sent no deal/);
    expectUsableShares(run, honest, byzantine);
  });

  it.each([4, 7])(
    'a complaint shown to all but the accused (who gets an empty one), or to one bystander only, relayed by no Byzantine member: delivered and answered everywhere or nowhere; every honest member holds a share of one key with every dealer qualified (n = %i)',
    async (n) => {
      for (const behaviour of ['selective-complaint', 'complaint-to-minority'] as const) {
        const { run, honest, byzantine } = await runWith(behaviour, n);
        expect(honest, behaviour).toHaveLength(n - byzantine.length);
        expect(honest[0]!.qualified).toEqual(Array.from({ length: n }, (_, i) => i + 1));
        expectUsableShares(run, honest, byzantine);
      }
    },
  );

  it.each([4, 7])(
    'a justification shown to the victim alone, or another one to the rest: every honest member holds a share of one key, the dealer qualified everywhere or nowhere (n = %i)',
    async (n) => {
      const shown = await runWith('justification-to-victim', n);
      expect(shown.honest).toHaveLength(n - shown.byzantine.length);
      expect(shown.honest[0]!.qualified).toEqual(Array.from({ length: n }, (_, i) => i + 1));
      expectUsableShares(shown.run, shown.honest, shown.byzantine);
      const split = await runWith('two-justifications', n);
      expect(split.honest).toHaveLength(n - split.byzantine.length);
      expectUsableShares(split.run, split.honest, split.byzantine);
    },
  );

  it('garbage frames from outside: refused, counted, nothing changes; the ceremony finishes', async () => {
    const garbage = garbageFrames();
    const run = await runNetworkCeremony(4, {
      meanwhile: async (proposal) => {
        await Promise.all(
          proposal.members.map(
            (m) =>
              new Promise<void>((resolve) => {
                const socket = new WebSocket(m.ceremonyEndpoint);
                socket.on('open', () => {
                  for (const frame of garbage) socket.send(frame);
                  socket.close();
                });
                socket.on('error', () => resolve());
                socket.on('close', () => resolve());
              }),
          ),
        );
      },
    });
    expect(run.outcomes.every((o) => o?.ok)).toBe(true);
    expect(new Set(run.outcomes.map((o) => (o?.ok ? o.result.cluster.clusterId : '')))).toHaveProperty('size', 1);
    const refused = run.events.flat().filter((e) => e.kind === 'refused');
    expect(refused.length).toBeGreaterThan(0);
    expect(refused.every((e) => e.kind === 'refused' && e.code === 'PROTOCOL_ERROR')).toBe(true);
  });

  it('a packet replayed from another ceremony of the same members is refused (CLUSTER_MISMATCH); the ceremony finishes', async () => {
    const captured: Uint8Array[] = [];
    const first = await runNetworkCeremony(4, { tap: (_from, _to, bytes) => captured.push(bytes) });
    expect(first.outcomes.every((o) => o?.ok)).toBe(true);
    const second = await runNetworkCeremony(4, {
      nodeKeys: first.nodeKeys,
      meanwhile: async (proposal) => {
        await Promise.all(
          proposal.members.map(
            (m) =>
              new Promise<void>((resolve) => {
                const socket = new WebSocket(m.ceremonyEndpoint);
                socket.on('open', () => {
                  for (const frame of captured.slice(0, 40)) socket.send(frame);
                  socket.close();
                });
                socket.on('error', () => resolve());
                socket.on('close', () => resolve());
              }),
          ),
        );
      },
    });
    expect(second.outcomes.every((o) => o?.ok)).toBe(true);
    const ids = second.outcomes.map((o) => (o?.ok ? o.result.cluster.clusterId : ''));
    expect(new Set(ids).size).toBe(1);
    expect(ids[0]).not.toBe(first.outcomes[0]!.ok ? first.outcomes[0]!.result.cluster.clusterId : '');
    const refused = second.events.flat().filter((e) => e.kind === 'refused');
    expect(refused.some((e) => e.kind === 'refused' && e.code === 'CLUSTER_MISMATCH')).toBe(true);
  });
});
