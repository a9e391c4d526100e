/**
 * Slow replicas (docs/protocol.md): what a connection measures of its replica (replica-latency.ts), and which
 * replicas acquires then leave out of the first signers and of the leader's place (signer-choice.ts). A replica can
 * make itself look slow but not fast.
 */
import { describe, expect, it } from 'vitest';
import type { ConnectionView } from '../../src/client/core/io.js';
import { GRANT_SAMPLE_MS, PENDING_COUNTS_AFTER_MS, ReplicaLatency } from '../../src/client/replica-latency.js';
import { firstSigners, leaderFor, leaderOf, slowReplicas } from '../../src/client/signer-choice.js';

const READY = { phase: 'ready', failures: 0, lastFailure: undefined } as const;
const DOWN = { phase: 'backoff', failures: 1, lastFailure: { kind: 'unreachable', message: 'down' } } as const;

function views(latencies: (number | undefined)[], down: number[] = []): ConnectionView[] {
  return latencies.map((latencyMs, k) => ({ index: k + 1, state: down.includes(k + 1) ? DOWN : READY, latencyMs }));
}

describe('ReplicaLatency: what a connection measures of its replica', () => {
  it('smooths the answer times, late answers included, and counts an unanswered request by its age', () => {
    const latency = new ReplicaLatency();
    expect(latency.estimateMs(0)).toBeUndefined();
    latency.sent('r1', 'other', 0);
    latency.answered('r1', 4);
    expect(latency.estimateMs(10)).toBe(4);
    // A request left unanswered (the caller may have stopped waiting) ages: a hung replica looks slower by the ms,
    // once it is PENDING_COUNTS_AFTER_MS old (a younger one may be a stall of a busy machine's event loop).
    latency.sent('p1', 'ping', 10);
    expect(latency.estimateMs(12)).toBe(4);
    expect(latency.estimateMs(10 + PENDING_COUNTS_AFTER_MS - 1)).toBe(4);
    expect(latency.estimateMs(10 + PENDING_COUNTS_AFTER_MS)).toBe(PENDING_COUNTS_AFTER_MS);
    expect(latency.estimateMs(10 + PENDING_COUNTS_AFTER_MS + 50)).toBe(PENDING_COUNTS_AFTER_MS + 50);
    // Its answer, however late, ends the ageing, and is a sample of its own: a late pong is a slow link or process.
    latency.answered('p1', 200);
    expect(latency.estimateMs(200)).toBe(190);
    latency.sent('r2', 'other', 270);
    latency.answered('r2', 370);
    expect(latency.estimateMs(370)).toBe(190);
    // Quick pongs bring it down again; the other answers' time (0.75 * 4 + 0.25 * 100) is then the slowest kind.
    for (let k = 0; k < 20; k++) {
      latency.sent(`q${k}`, 'ping', 400 + 250 * k);
      latency.answered(`q${k}`, 401 + 250 * k);
    }
    expect(latency.estimateMs(6_000)).toBe(0.75 * 4 + 0.25 * 100);
  });

  it('judges a replica by its slowest kind of answer: fast renewals do not hide slow grants, for a while', () => {
    const latency = new ReplicaLatency();
    latency.sent('r1', 'grant', 0);
    latency.answered('r1', 50);
    for (let k = 2; k < 20; k++) {
      latency.sent(`r${k}`, 'other', k * 10);
      latency.answered(`r${k}`, k * 10 + 1);
    }
    expect(latency.estimateMs(200)).toBe(50);
    // Grant times not renewed for a while are forgotten, so a replica left out for slow grants is tried again.
    expect(latency.estimateMs(50 + GRANT_SAMPLE_MS)).toBeLessThan(2);
  });

  it('counts its pongs: a slow link is seen with nothing else sent, though a ping alone proves no speed', () => {
    const latency = new ReplicaLatency();
    latency.sent('r1', 'grant', 0);
    latency.answered('r1', 3);
    // A link 50 ms slower each way, measured by pongs alone once the grant time is forgotten.
    for (let k = 0; k < 8; k++) {
      latency.sent(`p${k}`, 'ping', 250 * k);
      latency.answered(`p${k}`, 250 * k + 104);
    }
    expect(latency.estimateMs(GRANT_SAMPLE_MS + 100)).toBeGreaterThan(90);
  });

  it('a lost connection forgets what was unanswered on it; an answer nobody asked for changes nothing', () => {
    const latency = new ReplicaLatency();
    latency.sent('r1', 'other', 0);
    latency.lost();
    expect(latency.estimateMs(1_000)).toBeUndefined();
    latency.answered('r9', 5);
    expect(latency.estimateMs(1_000)).toBeUndefined();
  });
});

describe('slowReplicas, firstSigners, leaderFor: acquires leave the slowest f out', () => {
  it('leaves out a replica far slower than the t-th fastest, at most all but t, and none among similar ones', () => {
    expect([...slowReplicas(views([2, 2.5, 3, 52]), 3)]).toEqual([4]);
    expect([...slowReplicas(views([2, 2.5, 3, 7.9]), 3)]).toEqual([]); // within 5 ms of the t-th fastest
    expect([...slowReplicas(views([20, 21, 22, 44]), 3)]).toEqual([]); // within twice it
    expect([...slowReplicas(views([20, 21, 22, 45]), 3)]).toEqual([4]);
    expect([...slowReplicas(views([20, 21, 22, 25]), 3)]).toEqual([]); // a 20 ms network: all alike
    // N = 7, t = 5: two slow ones left out; with three slow, the t-th fastest is slow itself and none is.
    expect([...slowReplicas(views([2, 2, 2, 2, 2, 80, 90]), 5)].sort()).toEqual([6, 7]);
    expect([...slowReplicas(views([2, 2, 2, 2, 90, 80, 70]), 5)]).toEqual([]);
    // Unmeasured counts as fast; a replica down is not a candidate at all.
    expect([...slowReplicas(views([undefined, 2, 3, 60]), 3)]).toEqual([4]);
    expect([...slowReplicas(views([2, 2, 60, 3], [4]), 3)]).toEqual([]);
  });

  it('the first signers and the leader skip the slow replica in ring order; all else as before', () => {
    const resource = 'orders/1';
    const leader = leaderOf(resource, 4);
    const healthy = views([2, 2, 2, 2]);
    expect(leaderFor(healthy, resource, 3)).toBe(leader);
    const ring = [0, 1, 2, 3].map((k) => ((leader - 1 + k) % 4) + 1);
    expect([...firstSigners({ channels: healthy }, resource, 3)!]).toEqual(ring.slice(0, 3));
    const slowLeader = views([2, 2, 2, 2].map((ms, k) => (k + 1 === leader ? 60 : ms)));
    expect(leaderFor(slowLeader, resource, 3)).toBe(ring[1]);
    expect([...firstSigners({ channels: slowLeader }, resource, 3)!]).toEqual(ring.slice(1, 4));
  });

  it('keeps the leader, and its line, through the lag leading itself costs; not through a 50 ms delay', () => {
    const resource = 'orders/1';
    const leader = leaderOf(resource, 4);
    const ring = [0, 1, 2, 3].map((k) => ((leader - 1 + k) % 4) + 1);
    const withLeaderAt = (ms: number, others: number) =>
      views([others, others, others, others].map((fast, k) => (k + 1 === leader ? ms : fast)));
    // A hot resource's leader on a busy machine, measured: 37 ms against 2 (and 120 against 36): a slow signer, but
    // still the leader, so that every client keeps waiting in the same line.
    for (const [ms, others] of [
      [37, 2],
      [120, 36],
    ] as const) {
      expect([...slowReplicas(withLeaderAt(ms, others), 3)]).toEqual([leader]);
      expect(leaderFor(withLeaderAt(ms, others), resource, 3)).toBe(leader);
    }
    // 50 ms late on a 2 ms network, or hung (its oldest request's age): the line moves to the next in the ring.
    expect(leaderFor(withLeaderAt(53, 3), resource, 3)).toBe(ring[1]);
    expect(leaderFor(withLeaderAt(500, 3), resource, 3)).toBe(ring[1]);
  });
});
