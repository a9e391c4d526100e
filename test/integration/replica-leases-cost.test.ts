/**
 * Issue 30, finding 6: the console's `leases` request must not stall a replica. With 5,000 running leases, each
 * `leases {limit: 32}` used to scan every lease, read each record and sort them, synchronously (16-28 ms of the
 * event loop), and 1,000 of them a second per connection were allowed: 200 at once delayed `/healthz` and another
 * client's acquire by seconds. Now the answer is a bounded walk of an index ordered by lease end, and `leases` has
 * its own per-connection rate. A real replica process, real sockets; the assertions are about behaviour (who is
 * answered, what the answers say), not about how fast this machine is.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocalCluster } from '../../src/cluster/launcher.js';
import { DEFAULT_REPLICA_LIMITS } from '../../src/replica/options.js';
import { startOneReplica, type OneReplica } from '../support/one-replica.js';
import { newHolder, outcomeOf, RawClient } from '../support/raw-client.js';

/** The finding's figures: 5,000 running leases, 200 `leases` requests sent at once. */
const RUNNING_LEASES = 5_000;
const BURST_OF_LEASES_REQUESTS = 200;
/** Connections that create the leases, each with this many acquires in flight (below maxInFlightPerConnection). */
const LOADERS = 4;
const WINDOW = 50;

let replica: OneReplica;
let local: LocalCluster;
let url: string;
const sandboxed = newHolder();

beforeAll(async () => {
  replica = await startOneReplica('qf-leases-cost', new Map([[sandboxed.publicKey, ['sandbox/']]]));
  ({ local, url } = replica);
  const loaders = await Promise.all(Array.from({ length: LOADERS }, () => RawClient.open(url)));
  try {
    await Promise.all(
      loaders.map(async (loader, l) => {
        for (let start = l; start < RUNNING_LEASES; start += LOADERS * WINDOW) {
          const batch = Array.from({ length: WINDOW }, (_, k) => start + k * LOADERS).filter((i) => i < RUNNING_LEASES);
          const answers = await Promise.all(batch.map((i) => loader.acquire(`load/${i}`, 1n, 60_000)));
          for (const answer of answers) expect(outcomeOf(answer).status).toBe('granted');
        }
      }),
    );
  } finally {
    await Promise.all(loaders.map((loader) => loader.close()));
  }
}, 180_000);

afterAll(async () => {
  await replica?.close();
});

describe('leases against 5,000 running leases (issue 30, finding 6)', () => {
  it('a burst of 200 is answered only within its own rate (RATE_LIMITED beyond it), and another client still acquires and /healthz answers', async () => {
    const attacker = await RawClient.open(url);
    const victim = await RawClient.open(url);
    try {
      const started = performance.now();
      const burst = Array.from({ length: BURST_OF_LEASES_REQUESTS }, () => attacker.leases(32));
      const acquired = victim.acquire('victim/after-the-burst', 1n, 5_000);
      const health = fetch(local.replica(1).healthUrl);
      const answers = await Promise.all(burst);
      const elapsedSeconds = (performance.now() - started) / 1000;

      expect(outcomeOf(await acquired).status).toBe('granted');
      expect((await health).status).toBe(200);

      const served = answers.filter((a) => 'outcome' in a);
      const limited = answers.filter((a) => 'error' in a);
      expect(limited.every((a) => 'error' in a && a.error.code === 'RATE_LIMITED')).toBe(true);
      // The bucket starts full (one burst of `rate`) and refills at `rate` a second.
      const rate = DEFAULT_REPLICA_LIMITS.leasesPerSecondPerConnection;
      expect(served.length).toBeGreaterThanOrEqual(1);
      expect(served.length).toBeLessThanOrEqual(rate + Math.ceil(rate * elapsedSeconds));
      expect(served.length + limited.length).toBe(BURST_OF_LEASES_REQUESTS);
      for (const answer of served) {
        const outcome = outcomeOf(answer);
        expect(outcome.status).toBe('leases');
        if (outcome.status !== 'leases') continue;
        // The 32 ending last, ending last first, and more left out.
        expect(outcome.leases).toHaveLength(32);
        expect(outcome.more).toBe(true);
        const remaining = outcome.leases.map((lease) => lease.remainingMs);
        expect(remaining).toEqual([...remaining].sort((a, b) => b - a));
      }
      // The connection stays usable: a refused `leases` is not a protocol error.
      expect(outcomeOf(await victim.status('victim/after-the-burst'))).toMatchObject({ status: 'ok', leased: true });
    } finally {
      await attacker.close();
      await victim.close();
    }
  });

  it('a holder that may access none of them gets an empty list that says it may be incomplete (more: true): the walk stops at its bound instead of reading all 5,000', async () => {
    const client = await RawClient.open(url, sandboxed);
    try {
      expect(outcomeOf(await client.leases(32))).toEqual({ status: 'leases', leases: [], more: true });
    } finally {
      await client.close();
    }
  });
});
