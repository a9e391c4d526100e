/**
 * Slow replicas (docs/protocol.md): what a connection measures of its replica (replica-latency.ts), and which
 * replicas acquires then leave out of the first signers and of the leader's place (signer-choice.ts). A replica can
 * make itself look slow but not fast.
 */
import { describe, expect, it } from 'vitest';
import type { ConnectionView } from '../../src/client/core/io.js';
import type { RequestBody } from '../../src/client/replica-channel.js';
import {
  GRANT_SAMPLE_MS,
  measureOf,
  PENDING_COUNTS_AFTER_MS,
  ReplicaLatency,
} from '../../src/client/replica-latency.js';
import { firstSigners, leaderFor, leaderOf, routingOf, slowReplicas } from '../../src/client/signer-choice.js';
import { TurnTiming } from '../../src/client/turn-timing.js';

const READY = { phase: 'ready', failures: 0, lastFailure: undefined } as const;
const DOWN = { phase: 'backoff', failures: 1, lastFailure: { kind: 'unreachable', message: 'down' } } as const;

/** Connections measured `latencies` as signers and, unless `lines` says otherwise, alike as lines' keepers. */
function views(
  latencies: (number | undefined)[],
  down: number[] = [],
  lines: (number | undefined)[] = latencies,
  probeDue: number[] = [],
): ConnectionView[] {
  return latencies.map((latencyMs, k) => ({
    index: k + 1,
    state: down.includes(k + 1) ? DOWN : READY,
    latencyMs,
    lineLatencyMs: lines[k],
    probeDue: probeDue.includes(k + 1),
  }));
}

describe('ReplicaLatency: what a connection measures of its replica', () => {
  it('smooths the answer times, late answers included, and counts an unanswered request by its age', () => {
    const latency = new ReplicaLatency();
    expect(latency.estimateMs(0)).toBeUndefined();
    latency.sent('r1', { kind: 'other' }, 0);
    latency.answered('r1', 4);
    expect(latency.estimateMs(10)).toBe(4);
    // A request left unanswered (the caller may have stopped waiting) ages: a hung replica looks slower by the ms,
    // once it is PENDING_COUNTS_AFTER_MS old (a younger one may be a stall of a busy machine's event loop).
    latency.sent('p1', { kind: 'ping' }, 10);
    expect(latency.estimateMs(12)).toBe(4);
    expect(latency.estimateMs(10 + PENDING_COUNTS_AFTER_MS - 1)).toBe(4);
    expect(latency.estimateMs(10 + PENDING_COUNTS_AFTER_MS)).toBe(PENDING_COUNTS_AFTER_MS);
    expect(latency.estimateMs(10 + PENDING_COUNTS_AFTER_MS + 50)).toBe(PENDING_COUNTS_AFTER_MS + 50);
    // Its answer, however late, ends the ageing, and is a sample of its own: a late pong is a slow link or process.
    latency.answered('p1', 200);
    expect(latency.estimateMs(200)).toBe(190);
    latency.sent('r2', { kind: 'other' }, 270);
    latency.answered('r2', 370);
    expect(latency.estimateMs(370)).toBe(190);
    // Quick pongs bring it down again; the other answers' time (0.75 * 4 + 0.25 * 100) is then the slowest kind.
    for (let k = 0; k < 20; k++) {
      latency.sent(`q${k}`, { kind: 'ping' }, 400 + 250 * k);
      latency.answered(`q${k}`, 401 + 250 * k);
    }
    expect(latency.estimateMs(6_000)).toBe(0.75 * 4 + 0.25 * 100);
  });

  it('judges a replica by its slowest kind of answer: fast renewals do not hide slow grants, for a while', () => {
    const latency = new ReplicaLatency();
    latency.sent('r1', { kind: 'grant' }, 0);
    latency.answered('r1', 50);
    for (let k = 2; k < 20; k++) {
      latency.sent(`r${k}`, { kind: 'other' }, k * 10);
      latency.answered(`r${k}`, k * 10 + 1);
    }
    expect(latency.estimateMs(200)).toBe(50);
    // A grant time is kept while nothing asks the replica for a grant (it is left out for being slow): it is due a
    // probe once no acquire went to it for GRANT_SAMPLE_MS, and that probe's sample replaces the old figure, so a
    // replica that recovered is fast again at once.
    expect(latency.estimateMs(50 + GRANT_SAMPLE_MS)).toBe(50);
    expect(latency.probeDue(GRANT_SAMPLE_MS - 1)).toBe(false);
    expect(latency.probeDue(GRANT_SAMPLE_MS)).toBe(true);
    latency.sent('probe', { kind: 'grant' }, 3_000);
    expect(latency.probeDue(3_001)).toBe(false);
    latency.answered('probe', 3_002);
    expect(latency.estimateMs(3_002)).toBe(2);
    // Within GRANT_SAMPLE_MS of each other, samples are smoothed as before.
    latency.sent('r20', { kind: 'grant' }, 3_010);
    latency.answered('r20', 3_050);
    expect(latency.estimateMs(3_050)).toBe(0.75 * 2 + 0.25 * 40);
  });

  it('counts its pongs: a slow link is seen with nothing else sent, though a ping alone proves no speed', () => {
    const latency = new ReplicaLatency();
    latency.sent('r1', { kind: 'grant' }, 0);
    latency.answered('r1', 3);
    // A link 50 ms slower each way, measured by pongs alone: as a signer and as a line's keeper.
    for (let k = 0; k < 8; k++) {
      latency.sent(`p${k}`, { kind: 'ping' }, 250 * k);
      latency.answered(`p${k}`, 250 * k + 104);
    }
    expect(latency.estimateMs(GRANT_SAMPLE_MS + 100)).toBeGreaterThan(90);
    expect(latency.lineEstimateMs(GRANT_SAMPLE_MS + 100)).toBeGreaterThan(90);
  });

  it("as a line's keeper, only pongs count (before the first one, its answers); an unanswered ping ages", () => {
    const latency = new ReplicaLatency();
    latency.sent('r1', { kind: 'grant' }, 0);
    latency.answered('r1', 60);
    expect(latency.lineEstimateMs(60)).toBe(60); // no pong yet: what its answers said
    latency.sent('p1', { kind: 'ping' }, 100);
    latency.answered('p1', 102);
    expect(latency.lineEstimateMs(110)).toBe(2); // slow grants, prompt pongs: a fine line's keeper
    expect(latency.estimateMs(110)).toBe(60); // ...and a slow signer
    latency.sent('p2', { kind: 'ping' }, 350);
    expect(latency.lineEstimateMs(350 + PENDING_COUNTS_AFTER_MS - 1)).toBe(2);
    expect(latency.lineEstimateMs(350 + 400)).toBe(400); // hung: its ping ages
  });

  it('a lost connection forgets what was unanswered on it; an answer nobody asked for changes nothing', () => {
    const latency = new ReplicaLatency();
    latency.sent('r1', { kind: 'other' }, 0);
    latency.lost();
    expect(latency.estimateMs(1_000)).toBeUndefined();
    latency.answered('r9', 5);
    expect(latency.estimateMs(1_000)).toBeUndefined();
  });
});

describe("TurnTiming: how late each replica grants a line's turn against the others", () => {
  const granted = (status = 'granted', epoch: unknown = 7n) => ({ status, epoch });

  it('times each turn against its (f+1)-th grant: the first f+1 are not late, each one after by the time since', () => {
    const turns = new TurnTiming(1);
    expect(turns.granted('hot', 7n, 0, 100)).toBe(0);
    expect(turns.granted('hot', 7n, 0, 101)).toBe(0); // the f+1-th: the reference
    expect(turns.granted('hot', 7n, 0, 103)).toBe(2);
    expect(turns.granted('hot', 7n, 0, 151)).toBe(50); // a replica granting 50 ms after the others
    // Another turn, another reference.
    expect(turns.granted('hot', 8n, 120, 300)).toBe(0);
    expect(turns.granted('other', 7n, 0, 300)).toBe(0);
  });

  it('a replica granting early (f of them, Byzantine) cannot make the honest ones look late', () => {
    const turns = new TurnTiming(1);
    expect(turns.granted('hot', 7n, 0, 10)).toBe(0); // a liar, before the lease in the way even ended
    expect(turns.granted('hot', 7n, 0, 100)).toBe(0); // honest ones, within a flush of each other
    expect(turns.granted('hot', 7n, 0, 101)).toBe(1);
    expect(turns.granted('hot', 7n, 0, 102)).toBe(2);
  });

  it('a replica asked after the turn was first granted is not compared: it could not have granted sooner', () => {
    const turns = new TurnTiming(1);
    expect(turns.granted('hot', 7n, 0, 100)).toBe(0);
    expect(turns.granted('hot', 7n, 100, 140)).toBeUndefined();
    expect(turns.granted('hot', 7n, 0, 101)).toBe(0);
  });

  it("a connection feeds it its waiting acquires' grants: a replica late at turns is a slow signer, not a slow line", () => {
    const turns = new TurnTiming(1);
    const [fast1, fast2, late] = [new ReplicaLatency(turns), new ReplicaLatency(turns), new ReplicaLatency(turns)];
    const prompt: RequestBody<'acquire'> = { type: 'acquire', resource: 'hot', epoch: 7n, ttlMs: 1_000 };
    const waiting = measureOf({ ...prompt, waitMs: 5_000 } as RequestBody<'acquire'>);
    expect(waiting).toEqual({ turnOf: { resource: 'hot', epoch: 7n } });
    expect(measureOf(prompt)).toEqual({ kind: 'grant' });
    for (const latency of [fast1, fast2, late]) {
      latency.sent('w', waiting, 0);
      latency.sent('p', { kind: 'ping' }, 0);
      latency.answered('p', 2);
    }
    // Its turn came after 300 ms (on purpose: nothing to say), the late one granting it 50 ms after the others.
    fast1.answered('w', 300, granted());
    fast2.answered('w', 301, granted());
    late.answered('w', 351, granted());
    expect(fast2.estimateMs(351)).toBe(2);
    expect(late.estimateMs(351)).toBe(2 + 50);
    expect(late.lineEstimateMs(351)).toBe(2);
    // What is not a grant of a turn (busy, a malformed late reply) says nothing.
    late.sent('w2', waiting, 400);
    late.answered('w2', 900, granted('busy'));
    late.sent('w3', waiting, 400);
    late.answered('w3', 900, granted('granted', 'seven'));
    expect(late.estimateMs(900)).toBe(2 + 50);
    // A grant at the epoch asked need not name it; a small epoch comes off the wire as a number.
    const next = measureOf({ ...prompt, epoch: 8n, waitMs: 5_000 } as RequestBody<'acquire'>);
    for (const latency of [fast1, fast2, late]) latency.sent('x', next, 1_000);
    fast1.answered('x', 1_200, { status: 'granted' });
    fast2.answered('x', 1_201, { status: 'granted', epoch: 8 });
    late.answered('x', 1_211, { status: 'granted' });
    expect(late.estimateMs(1_211)).toBe(2 + 0.75 * 50 + 0.25 * 10);
  });
});

describe('a leader that missed our last turn (slow flushes behind its line, its pongs and pushes on time)', () => {
  const prompt: RequestBody<'acquire'> = { type: 'acquire', resource: 'hot', epoch: 7n, ttlMs: 1_000 };
  const waiting = (epoch: bigint) => measureOf({ ...prompt, epoch, waitMs: 5_000 } as RequestBody<'acquire'>);

  it('TurnTiming.missed: a turn first granted after the request left was granted by f+1 others before the answer', () => {
    const turns = new TurnTiming(1);
    expect(turns.missed('hot', 0, 500)).toBe(false); // no turn at all
    expect(turns.seen('hot', 9n)).toBe(false);
    turns.granted('hot', 9n, 0, 300);
    expect(turns.seen('hot', 9n)).toBe(true);
    expect(turns.missed('hot', 0, 500)).toBe(false); // one grant only: not yet f+1
    turns.granted('hot', 9n, 0, 301);
    expect(turns.missed('hot', 0, 500)).toBe(true);
    expect(turns.missed('hot', 0, 300)).toBe(false); // answered before the others had granted it
    expect(turns.missed('hot', 300, 500)).toBe(false); // a request sent after the turn: another turn's
    expect(turns.missed('other', 0, 500)).toBe(false);
  });

  it('ReplicaLatency: a turn answered without a grant after the others granted it; cleared by a grant after another', () => {
    const turns = new TurnTiming(1);
    const [a, b, leader] = [new ReplicaLatency(turns), new ReplicaLatency(turns), new ReplicaLatency(turns)];
    for (const latency of [a, b, leader]) latency.sent('w', waiting(7n), 0);
    a.answered('w', 300, { status: 'granted', epoch: 7n });
    b.answered('w', 301, { status: 'granted', epoch: 7n });
    // The holder released at once; the leader, still flushing, answers its withdrawn request `busy`.
    leader.answered('w', 305, { status: 'busy', epoch: 7n, remainingMs: 0 });
    expect(leader.missedTurn).toBe(true);
    expect(a.missedTurn).toBe(false);
    // Its signer figure is unchanged: a miss says it was late, not by how much.
    expect(leader.estimateMs(305)).toBeUndefined();
    // The next turn: it grants first (it has no lease in the way, being behind). That says nothing: still missed.
    leader.sent('x', waiting(8n), 310);
    leader.answered('x', 400, { status: 'granted', epoch: 9n });
    expect(leader.missedTurn).toBe(true);
    // A turn it grants after another replica did: back in step.
    for (const latency of [a, leader]) latency.sent('y', waiting(10n), 500);
    a.answered('y', 600, { status: 'granted', epoch: 10n });
    leader.answered('y', 601, { status: 'granted', epoch: 10n });
    expect(leader.missedTurn).toBe(false);
  });

  it('routingOf changes when a leader missed a turn, so the driver tells the core at the next turn', () => {
    const healthy = views([2, 2, 2, 2]);
    const missed = healthy.map((c) => (c.index === 1 ? { ...c, missedTurn: true } : c));
    expect(routingOf(missed, 3)).not.toBe(routingOf(healthy, 3));
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

  it('judges the leader by its pongs: one that only grants late keeps the line; its partials are not waited for', () => {
    const resource = 'orders/1';
    const leader = leaderOf(resource, 4);
    const ring = [0, 1, 2, 3].map((k) => ((leader - 1 + k) % 4) + 1);
    const at = (leaderMs: number) => [2, 2, 2, 2].map((ms, k) => (k + 1 === leader ? leaderMs : ms));
    const lateGrants = views(at(152), [], at(2));
    expect(leaderFor(lateGrants, resource, 3)).toBe(leader);
    expect([...firstSigners({ channels: lateGrants }, resource, 3)!]).toEqual(ring.slice(1, 4));
    // A slow link shows in its pongs too: then the line moves.
    expect(leaderFor(views(at(152), [], at(104)), resource, 3)).toBe(ring[1]);
  });

  it('routingOf changes whenever a choice would: a slow signer, a slow line keeper, a probe falling due', () => {
    // Replica 1 already a slow signer (it grants late); then its link slows too: only its line figure moves, and
    // the leader changes. A waiting call must hear of it (drive.ts), though the slow signers are the same.
    const lateGrants = views([152, 2, 2, 2], [], [2, 2, 2, 2]);
    const slowLink = views([152, 2, 2, 2], [], [104, 2, 2, 2]);
    expect([...slowReplicas(lateGrants, 3)]).toEqual([...slowReplicas(slowLink, 3)]);
    expect(routingOf(lateGrants, 3)).not.toBe(routingOf(slowLink, 3));
    const due = views([152, 2, 2, 2], [], [2, 2, 2, 2], [1]);
    expect(routingOf(lateGrants, 3)).not.toBe(routingOf(due, 3));
    // A fast replica falling due a probe changes no choice.
    expect(routingOf(views([2, 2, 2, 2]), 3)).toBe(routingOf(views([2, 2, 2, 2], [], [2, 2, 2, 2], [3]), 3));
  });

  it('asks a slow replica due a probe beside the first t signers, never instead of one', () => {
    const resource = 'orders/1';
    const leader = leaderOf(resource, 4);
    const ring = [0, 1, 2, 3].map((k) => ((leader - 1 + k) % 4) + 1);
    const slowMs = [2, 2, 2, 2].map((ms, k) => (k + 1 === ring[2] ? 140 : ms));
    expect([...firstSigners({ channels: views(slowMs) }, resource, 3)!]).toEqual([ring[0], ring[1], ring[3]]);
    const due = views(slowMs, [], slowMs, [ring[2]!]);
    expect([...firstSigners({ channels: due }, resource, 3)!].sort()).toEqual([...ring].sort());
    // A fast replica due a probe is a first signer or not as before: nothing to learn.
    const fastDue = views([2, 2, 2, 2], [], [2, 2, 2, 2], [ring[3]!]);
    expect([...firstSigners({ channels: fastDue }, resource, 3)!]).toEqual(ring.slice(0, 3));
  });
});
