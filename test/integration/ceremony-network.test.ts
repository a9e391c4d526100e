/**
 * The key ceremony over real sockets: 4 and 7 members finish with one
 * cluster whose key is the sum of the qualified dealers' constant
 * commitments and whose shares make tokens that `verify`, both backends and
 * the LMDB guard accept; f+1 absent members abort it within its timeout,
 * named, and a new run with everyone succeeds.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ceremonyClusterJson, verifiedSigners } from '../../src/ceremony/output.js';
import { groupKeyOf } from '../../src/ceremony/dealing.js';
import { decodeCommitments } from '../../src/ceremony/vss.js';
import { parseCluster } from '../../src/cluster/description.js';
import { parseReplicaKey, replicaKeyJson } from '../../src/cluster/replica-key.js';
import { toHex } from '../../src/common/bytes.js';
import { loadBackend } from '../../src/crypto/load.js';
import { combinePartials } from '../../src/crypto/threshold.js';
import { LmdbGuard } from '../../src/guard/lmdb-guard.js';
import { encodeToken, tokenToText, verifyToken } from '../../src/token/admission-token.js';
import { grantMessage, makeGrant } from '../../src/token/grant.js';
import type { CeremonyResult } from '../../src/ceremony/events.js';
import { runCli } from '../support/cli.js';
import { runNetworkCeremony } from '../support/ceremony-net.js';

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function results(run: Awaited<ReturnType<typeof runNetworkCeremony>>): CeremonyResult[] {
  return run.outcomes.map((o, k) => {
    if (!o?.ok) throw new Error(`member ${k + 1} did not finish: ${JSON.stringify(o)}`);
    return o.result;
  });
}

describe('key ceremony over real sockets', () => {
  it.each([4, 7])('%i members finish with one cluster; its tokens verify everywhere', async (n) => {
    const run = await runNetworkCeremony(n);
    const all = results(run);
    expect(new Set(all.map((r) => r.cluster.clusterId)).size).toBe(1);
    const first = all[0]!;
    expect(first.qualified).toHaveLength(n);

    // Signed by every member, checkable by anyone from cluster.json alone.
    const json = ceremonyClusterJson(run.proposal, first);
    expect(verifiedSigners(json)).toEqual(Array.from({ length: n }, (_, i) => i + 1));

    for (const backendName of ['noble', 'blst'] as const) {
      const backend = loadBackend(backendName);
      // parseCluster checks every public share against the commitments and the recomputed id.
      const cluster = parseCluster(json, { backend });
      const keys = all.map((r, i) =>
        parseReplicaKey(
          replicaKeyJson(cluster.idHex, {
            index: i + 1,
            scaledSecretShare: r.scaledSecretShare,
            publicKeyShare: new Uint8Array(),
          }),
          cluster,
        ),
      );
      const grant = makeGrant({
        clusterId: cluster.id,
        resource: 'orders',
        epoch: 3n,
        holder: new Uint8Array(32).fill(7),
      });
      const partials = keys
        .slice(0, cluster.t)
        .map((key) => ({ index: key.index, signature: backend.sign(key.secretKey, grantMessage(grant)) }));
      for (const p of partials)
        expect(backend.verify(cluster.replicas[p.index - 1]!.publicKeyShare, grantMessage(grant), p.signature)).toBe(
          true,
        );
      const token = encodeToken(grant, combinePartials(backend, n, partials)!);
      expect(verifyToken(token, cluster).ok).toBe(true);

      const dir = mkdtempSync(join(tmpdir(), 'qf-ceremony-'));
      dirs.push(dir);
      writeFileSync(join(dir, 'cluster.json'), JSON.stringify(json));
      const verified = await runCli(['verify', tokenToText(token), '--cluster', join(dir, 'cluster.json'), '--json']);
      expect(verified.code, verified.stderr).toBe(0);
      const guard = await LmdbGuard.open(join(dir, 'guard'), cluster);
      try {
        const write = await guard.write(
          { token: tokenToText(token), resource: 'orders', op: 'put', key: 'k' },
          (tx) => {
            tx.put('k', new TextEncoder().encode('v'));
          },
        );
        expect(write).toMatchObject({ ok: true, epoch: 3n });
      } finally {
        await guard.close();
      }
    }
  });

  it("group key = sum of the qualified dealers' constant commitments; every public share matches the commitments", async () => {
    const run = await runNetworkCeremony(4);
    const first = results(run)[0]!;
    // The deals are public: rebuild Σ C₀ from the commitments the members agreed on.
    const cluster = parseCluster(first.cluster);
    expect(cluster.commitments.map(toHex)).toEqual(first.cluster.commitments);
    expect(first.cluster.commitments[0]).toBe(first.cluster.groupPublicKey);
    const fromDeals = first.qualified.map((dealer) => run.dealCommitments(1, dealer));
    expect(first.cluster.groupPublicKey).toBe(toHex(groupKeyOf(fromDeals.map((c) => decodeCommitments(c, cluster.t)))));
  });

  it('f+1 absent members: every present member aborts within the accept timeout naming them; a new run with everyone succeeds', async () => {
    const started = Date.now();
    const run = await runNetworkCeremony(4, { absent: [3, 4], acceptTimeoutMs: 2000 });
    const elapsed = Date.now() - started;
    for (const index of [1, 2]) {
      const outcome = run.outcomes[index - 1]!;
      expect(outcome.ok).toBe(false);
      if (!outcome.ok) {
        expect(outcome.members).toEqual([3, 4]);
        expect(outcome.reason).toMatch(/members 3, 4 did not accept/);
      }
    }
    expect(elapsed).toBeLessThan(2000 + 3000);
    const again = await runNetworkCeremony(4, { nodeKeys: run.nodeKeys });
    expect(new Set(results(again).map((r) => r.cluster.clusterId)).size).toBe(1);
  });
});
