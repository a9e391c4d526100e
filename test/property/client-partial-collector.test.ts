/**
 * Liveness with f lying replicas, on the signatures themselves: whatever f
 * replicas send as partials (garbage, another replica's partial, a partial on
 * another grant) and in whatever order answers arrive, the collector makes a
 * token that verifies once the honest partials are in, and it names only
 * replicas that actually lied. Real BLS (native backend).
 */
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadBackend } from '../../src/crypto/load.js';
import { EvidenceLog } from '../../src/client/evidence.js';
import { partialHandle } from '../support/partial-handle.js';
import { encodeToken, verifyToken } from '../../src/token/admission-token.js';
import type { Grant } from '../../src/token/grant.js';
import { dealCluster } from '../support/dealt-cluster.js';

const backend = loadBackend();
const clusters = { 1: dealCluster(4, backend), 2: dealCluster(7, backend) } as const;
type Lie = 'garbage' | 'other_share' | 'other_grant';

describe('Liveness: up to f bad partials never stop a token, and only liars are named', () => {
  it('produces a verifying token from the honest partials, in any arrival order', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(1 as const, 2 as const).chain((f) => {
          const n = 3 * f + 1;
          return fc.record({
            f: fc.constant(f),
            liars: fc.uniqueArray(fc.integer({ min: 1, max: n }), { maxLength: f }),
            lies: fc.array(fc.constantFrom<Lie>('garbage', 'other_share', 'other_grant'), {
              minLength: f,
              maxLength: f,
            }),
            order: fc.shuffledSubarray(
              Array.from({ length: n }, (_, k) => k + 1),
              { minLength: n },
            ),
            epoch: fc.bigInt({ min: 1n, max: 1000n }),
          });
        }),
        async ({ f, liars, lies, order, epoch }) => {
          const dealt = clusters[f];
          const { cluster } = dealt;
          const grant: Grant = { clusterId: cluster.id, resource: 'r', epoch, holder: new Uint8Array(32).fill(1) };
          const evidence = new EvidenceLog();
          const collector = partialHandle(cluster, backend, grant, evidence);
          const named = new Set<number>();
          let token;
          for (const replica of order) {
            const lie = liars.indexOf(replica);
            let bytes: Uint8Array;
            if (lie < 0) bytes = dealt.partial(replica, grant).bytes;
            else if (lies[lie] === 'garbage') bytes = new Uint8Array(randomBytes(96));
            else if (lies[lie] === 'other_share') bytes = dealt.partial((replica % cluster.n) + 1, grant).bytes;
            else bytes = dealt.partial(replica, { ...grant, epoch: epoch + 1n }).bytes;
            const added = collector.add(replica, bytes);
            if (!added.ok) named.add(replica);
            if (collector.count >= cluster.t) {
              const combined = await collector.tryCombine();
              if (combined.ok) {
                token = encodeToken(grant, combined.signature);
                expect(combined.signers.every((s) => !liars.includes(s))).toBe(true);
                break;
              }
              for (const bad of combined.bad) named.add(bad);
            }
          }
          expect(token).toBeDefined();
          expect(verifyToken(token!, cluster).ok).toBe(true);
          for (const replica of named) expect(liars).toContain(replica);
          for (const item of evidence.list()) expect(liars).toContain(item.replica);
        },
      ),
    );
  });
});
