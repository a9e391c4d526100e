/**
 * A call's state is plain data: no class instance, no function, nothing kept outside it. For a round call (renew,
 * release, status, leases: src/client/core/round-call.ts) and for the acquire call (src/client/core/acquire.ts,
 * attempt.ts, answers.ts). What that buys is replay and inspection: a state copied with structuredClone in the
 * middle of a call steps, event for event, to the same actions and the same result as the original. The acquire's
 * partials are real BLS partials (native backend), combined as the driver combines them.
 */
import { describe, expect, it } from 'vitest';
import {
  newAcquire,
  startAcquire,
  stepAcquire,
  type AcquireEnd,
  type AcquireState,
} from '../../src/client/core/acquire.js';
import { renewBodies } from '../../src/client/core/bodies.js';
import type { CoreEnv } from '../../src/client/core/env.js';
import type { CoreAction, CoreEvent } from '../../src/client/core/io.js';
import {
  newRoundCall,
  roundCallResult,
  startRoundCall,
  stepRoundCall,
  type RoundCallState,
} from '../../src/client/core/round-call.js';
import { RELEASE_RULES, RENEW_RULES, type LeaseRoundParams } from '../../src/client/lease-calls.js';
import { combinePartials } from '../../src/client/partial-collector.js';
import { loadBackend } from '../../src/crypto/load.js';
import type { AcquireOutcome, RenewOutcome } from '../../src/protocol/messages.js';
import { verifyToken } from '../../src/token/admission-token.js';
import { testCoreEnv } from '../support/core-env.js';
import { dealCluster } from '../support/dealt-cluster.js';

const READY = { phase: 'ready', failures: 0, lastFailure: undefined } as const;
const connections = [1, 2, 3, 4].map((index) => ({ index, state: READY }));
const grant = {
  resource: 'orders',
  epoch: 3n,
  holders: new Set([1, 2, 3]),
  evidence: [{ replica: 1, epoch: 3n, partial: new Uint8Array(96).fill(7) }],
};
const params: LeaseRoundParams = { grant, f: 1, t: 3, requestTimeoutMs: 1_000 };

type Send = Extract<CoreAction, { type: 'send' }>;
const sends = (actions: readonly CoreAction[]) => actions.filter((a): a is Send => a.type === 'send');

function renewed(send: Send, at: number, status: RenewOutcome['status'] = 'renewed'): CoreEvent {
  const outcome = status === 'renewed' ? { status, remainingMs: 1_000 } : { status };
  return { type: 'answer', at, request: send.request, answer: { kind: 'reply', outcome: outcome as RenewOutcome } };
}

/** Where a value is not plain data: a function, or an object of a class (Map, Set, arrays and bytes are plain). */
function notPlain(value: unknown, path = 'state'): string[] {
  if (typeof value === 'function') return [`${path} is a function`];
  if (typeof value !== 'object' || value === null) return [];
  if (value instanceof Uint8Array) return [];
  if (value instanceof Map)
    return [...value.entries()].flatMap(([k, v]) => [...notPlain(k, `${path}.key`), ...notPlain(v, `${path}.${k}`)]);
  if (value instanceof Set) return [...value].flatMap((v) => notPlain(v, `${path}[]`));
  const proto = Object.getPrototypeOf(value) as unknown;
  if (proto !== Object.prototype && proto !== Array.prototype && proto !== null) return [`${path} is a class instance`];
  return Object.entries(value).flatMap(([k, v]) => notPlain(v, `${path}.${k}`));
}

function renewCall(): { state: RoundCallState<LeaseRoundParams>; asked: Send[] } {
  const state = newRoundCall({ params, bodies: renewBodies(grant, 1_000), timeoutMs: 1_000 }, connections);
  const asked = sends(startRoundCall(state, RENEW_RULES, 0).actions);
  return { state, asked };
}

describe("a round call's state is plain data", () => {
  it('holds no function and no class instance, mid-call', () => {
    const { state, asked } = renewCall();
    expect(asked.map((send) => send.replica)).toEqual([1, 2, 3, 4]);
    stepRoundCall(state, RENEW_RULES, renewed(asked[0]!, 1));
    expect(notPlain(state)).toEqual([]);
    expect(notPlain({ f: () => 1, m: new Map([[1, new Date()]]) })).toEqual([
      'state.f is a function',
      'state.m.1 is a class instance',
    ]);
  });

  it('a copy made mid-call steps to the same actions and the same result as the original', () => {
    // Replica 4 is still connecting when the call starts: it is asked once it is ready, after the copy is made.
    const connecting = { phase: 'connecting', failures: 0, lastFailure: undefined } as const;
    const state = newRoundCall(
      { params, bodies: renewBodies(grant, 1_000), timeoutMs: 1_000 },
      connections.map((c) => (c.index === 4 ? { ...c, state: connecting } : c)),
    );
    const asked = sends(startRoundCall(state, RENEW_RULES, 0).actions);
    expect(asked.map((send) => send.replica)).toEqual([1, 2, 3]);
    stepRoundCall(state, RENEW_RULES, renewed(asked[0]!, 1));
    const copy = structuredClone(state);
    expect(copy).toEqual(state);
    const both = (event: CoreEvent) => {
      const original = stepRoundCall(state, RENEW_RULES, event).actions;
      expect(stepRoundCall(copy, RENEW_RULES, event).actions).toEqual(original);
      return original;
    };
    const late = sends(both({ type: 'connections', at: 2, connections }));
    expect(late.map((send) => send.replica)).toEqual([4]);
    // Replica 4 is not a holder: it gets the grant's evidence to join.
    expect(late[0]!.body).toMatchObject({ type: 'renew', evidence: grant.evidence });
    both(renewed(asked[1]!, 3, 'not_holder'));
    both(renewed(late[0]!, 4));
    both(renewed(asked[2]!, 5));
    // 2 (a holder) denied; 1, 4 and 3 renewed: t = 3.
    const result = roundCallResult(state, RENEW_RULES);
    expect(result).toMatchObject({ ok: true, sentAt: 0, renewedBy: [1, 4, 3] });
    expect(roundCallResult(copy, RENEW_RULES)).toEqual(result);
  });

  it("requests that time out before the round's own timer fires end the round at its deadline, not for want of replicas", () => {
    // Every replica is up; the three asked answer nothing in time. Their requests were sent with the round's time,
    // so their timing out is the round's deadline, whichever of the timers the driver fires first.
    const { state, asked } = renewCall();
    const timedOut = (send: Send, time: number): CoreEvent => ({
      type: 'answer',
      at: time,
      request: send.request,
      answer: { kind: 'timeout' },
    });
    for (const [k, send] of asked.entries()) stepRoundCall(state, RENEW_RULES, timedOut(send, 1_000 + k));
    expect(roundCallResult(state, RENEW_RULES)).toMatchObject({ ok: false, reason: 'timeout' });
  });

  it('a copy of a release round made before its deadline times out as the original does, with the same timer', () => {
    const state = newRoundCall(
      { params, bodies: { body: { type: 'release', resource: 'orders', epoch: 3n } }, timeoutMs: 500 },
      connections,
    );
    const started = startRoundCall(state, RELEASE_RULES, 0).actions;
    const deadline = started.find((a): a is Extract<CoreAction, { type: 'set_timer' }> => a.type === 'set_timer')!;
    const copy = structuredClone(state);
    const event: CoreEvent = { type: 'timer', at: 500, timer: deadline.timer };
    const original = stepRoundCall(state, RELEASE_RULES, event).actions;
    expect(original.map((a) => a.type)).toContain('abandon');
    expect(stepRoundCall(copy, RELEASE_RULES, event).actions).toEqual(original);
    expect(roundCallResult(copy, RELEASE_RULES)).toEqual(roundCallResult(state, RELEASE_RULES));
    expect(roundCallResult(state, RELEASE_RULES)).toMatchObject({ ok: false, reason: 'timeout', released: 0 });
  });
});

const backend = loadBackend();
const dealt = dealCluster(4, backend);
const holder = new Uint8Array(32).fill(5);

/** A fresh environment per copy: each has its own evidence log, so nothing is shared between the two. */
function acquireEnv(): CoreEnv {
  return testCoreEnv(dealt.cluster, backend, holder);
}

/** Replica `signer`'s partial on the grant a send asks for (from `replica` when it lies with another's). */
function grantedBy(send: Send, signer = send.replica): CoreEvent {
  const body = send.body as { resource: string; epoch: bigint };
  const grant = { clusterId: dealt.cluster.id, resource: body.resource, epoch: body.epoch, holder };
  const outcome: AcquireOutcome = { status: 'granted', partial: dealt.partial(signer, grant).bytes };
  return { type: 'answer', at: 0, request: send.request, answer: { kind: 'reply', outcome } };
}

/**
 * An acquire stepped twice over: the original, and a structuredClone of its state made before every event (each
 * with its own environment). Every step checks the state is plain and the copy asks for the same actions.
 */
function twinAcquire(request: Parameters<typeof newAcquire>[0], hint?: { epoch: bigint; contended: boolean }) {
  const env = acquireEnv();
  let state: AcquireState = newAcquire(request, connections, hint);
  let end: AcquireEnd | undefined;
  let copies = 0;
  const started = startAcquire(state, env, 0).actions;
  expect(notPlain(state)).toEqual([]);
  const step = (event: CoreEvent): CoreAction[] => {
    const copy = structuredClone(state);
    copies++;
    expect(copy).toEqual(state);
    const original = stepAcquire(state, event, env);
    const replayed = stepAcquire(copy, event, acquireEnv());
    expect(replayed.actions).toEqual(original.actions);
    expect(replayed.end).toEqual(original.end);
    expect(notPlain(original.state)).toEqual([]);
    expect(replayed.state).toEqual(original.state);
    end ??= original.end;
    // Go on with the copy: the rest of the call runs on a state that was cloned at every step.
    state = replayed.state;
    return original.actions;
  };
  /** Combines what a `combine` action carries, as the driver does, and hands the outcome back. */
  const combine = async (actions: readonly CoreAction[], at: number): Promise<CoreAction[]> => {
    const action = actions.find((a): a is Extract<CoreAction, { type: 'combine' }> => a.type === 'combine');
    expect(action).toBeDefined();
    const outcome = await combinePartials(action!.partials, env.partials);
    return step({ type: 'combined', at, outcome });
  };
  return { started, step, combine, end: () => end, copies: () => copies, state: () => state };
}

const at = (event: CoreEvent, time: number): CoreEvent => ({ ...event, at: time }) as CoreEvent;

describe("the acquire call's state is plain data", () => {
  it("a hot resource: waits in the leader's line, is told its turn, and is granted; a copy at every step does the same", async () => {
    const acquire = twinAcquire(
      { resource: 'orders', ttlMs: 1_000, waitMs: 2_000, timeoutMs: 3_000 },
      { epoch: 5n, contended: true },
    );
    // Leader-first: only the leader is asked, and may keep the request in its line for the next epoch.
    const [atLeader, ...others] = sends(acquire.started);
    expect(others).toEqual([]);
    expect(atLeader!.body).toMatchObject({ type: 'acquire', epoch: 6n, nextEpoch: true });
    const leader = atLeader!.replica;
    // Its connection is checked while we wait: still the leader, so the check is set again.
    const timers = acquire.started.filter(
      (a): a is Extract<CoreAction, { type: 'set_timer' }> => a.type === 'set_timer',
    );
    // The round's deadline (the request timeout and the turn wait) and the leader check (100 ms).
    expect(timers.map((timer) => timer.ms)).toEqual([expect.any(Number), 100]);
    const check = timers[1];
    const checked = acquire.step({ type: 'timer', at: 100, timer: check!.timer });
    expect(sends(checked)).toEqual([]);
    expect(checked).toEqual([expect.objectContaining({ type: 'set_timer', ms: 100 })]);
    // The leader tells us our turn at epoch 7 (someone took 6): the other first signers are asked for 7 now.
    const signers = sends(acquire.step({ type: 'turn', at: 150, replica: leader, epoch: 7n }));
    expect(signers.length).toBe(dealt.cluster.t - 1);
    expect(signers.every((send) => (send.body as { epoch: bigint }).epoch === 7n)).toBe(true);
    expect(signers.map((send) => send.replica)).not.toContain(leader);
    // Their grants start the clock on the leader (a late one means asking the rest), and ask nobody yet.
    for (const [k, send] of signers.entries()) expect(sends(acquire.step(at(grantedBy(send), 160 + k)))).toEqual([]);
    // The lease in the way ends: the leader grants the turn at 7, and the t partials are combined.
    const turnGrant = grantedBy({ ...atLeader!, body: { ...atLeader!.body, epoch: 7n } as Send['body'] });
    const last = await acquire.combine(acquire.step(at(turnGrant, 400)), 401);
    expect(sends(last)).toEqual([]);
    const end = acquire.end();
    expect(end?.result.ok).toBe(true);
    if (!end?.result.ok) return;
    expect(end.result.grant.token.grant.epoch).toBe(7n);
    expect(end.result.grant.sentAt).toBe(150);
    expect(verifyToken(end.result.grant.token, dealt.cluster).ok).toBe(true);
    expect(end.hint).toEqual({ epoch: 7n, contended: true });
    expect(acquire.state().done).toBe(true);
    expect(acquire.copies()).toBeGreaterThanOrEqual(6);
  });

  it("a turn the leader told and the others lost is retried in the line, though the leader's own grant never came", async () => {
    const acquire = twinAcquire(
      { resource: 'orders', ttlMs: 1_000, waitMs: 2_000, timeoutMs: 3_000 },
      { epoch: 5n, contended: true },
    );
    const [atLeader] = sends(acquire.started);
    const leader = atLeader!.replica;
    // Told its turn at 7, the waiter asks the other first signers; the leader's grant is late (a slow leader).
    const signers = sends(acquire.step({ type: 'turn', at: 10, replica: leader, epoch: 7n }));
    expect(signers).toHaveLength(dealt.cluster.t - 1);
    // Both are past 7 already (a grant decided outside this line): the fourth replica is asked, and grants.
    const stale = (send: Send, time: number): CoreEvent => ({
      type: 'answer',
      at: time,
      request: send.request,
      answer: { kind: 'reply', outcome: { status: 'stale', epoch: 8n } },
    });
    const fourth = sends(acquire.step(stale(signers[0]!, 20)));
    expect(fourth.map((send) => send.replica)).toHaveLength(1);
    expect(sends(acquire.step(stale(signers[1]!, 21)))).toEqual([]);
    const lost = acquire.step(at(grantedBy(fourth[0]!), 22));
    // What was won is released, and the next attempt comes after a pause.
    expect(sends(lost).every((send) => (send.body as { type: string }).type === 'release')).toBe(true);
    const pause = acquire.state().phase;
    if (pause.kind !== 'pause') throw new Error(`expected a pause, got ${pause.kind}`);
    const next = sends(acquire.step({ type: 'timer', at: 100, timer: pause.timer }));
    // The turn was lost, not missed: the next attempt waits in the leader's line again (waitMs), above 8.
    const again = next.filter((send) => send.replica === leader && (send.body as { type: string }).type === 'acquire');
    expect(again).toHaveLength(1);
    expect(again[0]!.body).toMatchObject({ epoch: 9n, waitMs: expect.any(Number) });
    expect((again[0]!.body as { waitMs: number }).waitMs).toBeGreaterThan(0);
    expect(acquire.state().turnsLost).toBe(1);
    expect(acquire.state().turnMissed).toBe(false);
  });

  it('a turn told by a leader that missed our last one is asked of every other replica at once', () => {
    const acquire = twinAcquire(
      { resource: 'orders', ttlMs: 1_000, waitMs: 2_000, timeoutMs: 3_000 },
      { epoch: 5n, contended: true },
    );
    const leader = sends(acquire.started)[0]!.replica;
    // The driver tells the core its connections again: the leader missed this client's last turn.
    const missed = connections.map((c) => (c.index === leader ? { ...c, missedTurn: true } : c));
    expect(sends(acquire.step({ type: 'connections', at: 5, connections: missed }))).toEqual([]);
    const asked = sends(acquire.step({ type: 'turn', at: 10, replica: leader, epoch: 7n }));
    // Not the t-1 other first signers, but all N-1 others: any t of them make the grant without the leader.
    expect(asked.map((send) => send.replica).sort()).toEqual(
      connections.map((c) => c.index).filter((index) => index !== leader),
    );
    expect(asked.every((send) => (send.body as { epoch: bigint }).epoch === 7n)).toBe(true);
  });

  it('first signers whose requests time out, every replica up: the acquire tries again, it does not say unavailable', () => {
    const acquire = twinAcquire({ resource: 'jobs', ttlMs: 1_000, waitMs: 0, timeoutMs: 5_000 });
    const asked = sends(acquire.started);
    expect(asked).toHaveLength(dealt.cluster.t);
    const timedOut = (send: Send, time: number): CoreEvent => ({
      type: 'answer',
      at: time,
      request: send.request,
      answer: { kind: 'timeout' },
    });
    // The first to time out widens the attempt to the fourth replica, which times out too.
    const pending = [...asked];
    for (let k = 0; pending.length > 0 && k < 8; k++)
      pending.push(...sends(acquire.step(timedOut(pending.shift()!, 1_000 + k))));
    expect(acquire.end()).toBeUndefined();
    expect(acquire.state().phase.kind).toBe('pause');
  });

  it('a bad partial: the combine fails, the liar is named, the fourth replica is asked; a copy at every step does the same', async () => {
    const acquire = twinAcquire({ resource: 'jobs', ttlMs: 1_000, waitMs: 0, timeoutMs: 2_000 });
    const asked = sends(acquire.started);
    expect(asked).toHaveLength(dealt.cluster.t);
    const [honest, liar, other] = asked as [Send, Send, Send];
    const fourth = [1, 2, 3, 4].find((r) => !asked.some((send) => send.replica === r))!;
    // The liar replays the fourth replica's partial: a valid point, but not under its own share.
    expect(acquire.step(at(grantedBy(honest), 1))).toEqual([]);
    expect(acquire.step(at(grantedBy(liar, fourth), 2))).toEqual([]);
    const failed = await acquire.combine(acquire.step(at(grantedBy(other), 3)), 4);
    const widened = sends(failed);
    expect(widened.map((send) => send.replica)).toEqual([fourth]);
    expect(acquire.state().faults).toEqual([
      expect.objectContaining({ replica: liar.replica, kind: 'invalid_partial' }),
    ]);
    const last = await acquire.combine(acquire.step(at(grantedBy(widened[0]!), 5)), 6);
    expect(sends(last)).toEqual([]);
    const end = acquire.end();
    expect(end?.result).toMatchObject({ ok: true, faults: [{ replica: liar.replica, kind: 'invalid_partial' }] });
    if (!end?.result.ok) return;
    expect([...end.result.grant.signers].sort()).toEqual([honest.replica, other.replica, fourth].sort());
    expect(verifyToken(end.result.grant.token, dealt.cluster).ok).toBe(true);
  });

  it("a held resource: f+1 busy, the leader's line, the polling wait and its wake-up; a copy at every step does the same", () => {
    const acquire = twinAcquire({ resource: 'queue', ttlMs: 1_000, waitMs: 1_500, timeoutMs: 2_500 });
    const busy = (send: Send, time: number): CoreEvent => {
      const outcome: AcquireOutcome = { status: 'busy', epoch: 3n, remainingMs: 800 };
      return { type: 'answer', at: time, request: send.request, answer: { kind: 'reply', outcome } };
    };
    const asked = sends(acquire.started);
    // f+1 busy: a place in the leader's line is taken at once, asking the leader alone to keep the request.
    acquire.step(busy(asked[0]!, 1));
    const [inLine, ...others] = sends(acquire.step(busy(asked[1]!, 2)));
    expect(others).toEqual([]);
    expect(inLine!.body).toMatchObject({ nextEpoch: true });
    expect(acquire.state().phase.kind).toBe('attempt');
    // The leader says busy anyway (its line is full): the call waits, polling, until a release notice wakes it.
    const waiting = acquire.step(busy(inLine!, 3));
    expect(acquire.state().phase.kind).toBe('busy_wait');
    expect(waiting.filter((a) => a.type === 'set_timer')).toHaveLength(1);
    const woken = acquire.step({ type: 'released', at: 50 });
    expect(woken[0]).toEqual(expect.objectContaining({ type: 'clear_timer' }));
    expect(sends(woken).length).toBeGreaterThan(0);
    expect(acquire.state().phase.kind).toBe('attempt');
    expect(acquire.end()).toBeUndefined();
    // The caller gives up: the call ends aborted, in the copy as in the original.
    acquire.step({ type: 'abort', at: 60 });
    expect(acquire.end()?.result).toMatchObject({ ok: false, reason: 'aborted' });
  });
});
