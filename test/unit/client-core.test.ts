/**
 * The client's acquire core (src/client/core) driven message by message, with no clock, socket or timer: the test
 * is the network. It starts the core, reads the requests it wants sent, hands it answers and timer firings, and
 * checks what it asks for next: one round trip to t replicas when nobody holds the resource, releases of a split
 * vote's partial grants and a backoff timer before the next epoch, and a busy refusal that needs no timer at all.
 */
import { describe, expect, it } from 'vitest';
import { acquireCore, newAcquire } from '../../src/client/core/acquire.js';
import type { CoreEnv } from '../../src/client/core/env.js';
import type { CoreAction, CoreEvent } from '../../src/client/core/io.js';
import { combinePartials } from '../../src/client/partial-collector.js';
import type { AcquireOutcome } from '../../src/protocol/messages.js';
import { dealRunKeys } from '../../src/simulation/crypto.js';
import { verifyToken } from '../../src/token/admission-token.js';
import { grantMessage } from '../../src/token/grant.js';
import { testCoreEnv } from '../support/core-env.js';

const keys = dealRunKeys('sim', 4, 9, (run) => run());
const { cluster } = keys;
const holder = new Uint8Array(32).fill(9);
const READY = { phase: 'ready', failures: 0, lastFailure: undefined } as const;
const connections = [1, 2, 3, 4].map((index) => ({ index, state: READY }));

const env: CoreEnv = testCoreEnv(cluster, cluster.backend, holder);

const request = { resource: 'orders', ttlMs: 1_000, waitMs: 0, timeoutMs: 2_000 };

type Send = Extract<CoreAction, { type: 'send' }>;
const sends = (actions: readonly CoreAction[]) => actions.filter((a): a is Send => a.type === 'send');

/** Replica `replica`'s honest partial on the acquire `send` asks for. */
function granted(send: Send): AcquireOutcome {
  const body = send.body as { epoch: bigint };
  const grant = { clusterId: cluster.id, resource: 'orders', epoch: body.epoch, holder };
  return {
    status: 'granted',
    partial: cluster.backend.sign(keys.secretKeys[send.replica - 1]!, grantMessage(grant)).bytes,
  };
}

function answer(send: Send, outcome: AcquireOutcome, at: number): CoreEvent {
  return { type: 'answer', at, request: send.request, answer: { kind: 'reply', outcome } };
}

describe('the acquire core, driven by hand', () => {
  it('asks t replicas, combines their partials, and ends with a token that verifies: one round trip', async () => {
    const core = acquireCore(env, newAcquire(request, connections, undefined));
    const first = sends(core.start(0));
    expect(first).toHaveLength(cluster.t);
    expect(first.every((send) => (send.body as { epoch: bigint }).epoch === 1n)).toBe(true);
    let actions: CoreAction[] = [];
    for (const [k, send] of first.entries()) actions = core.step(answer(send, granted(send), 1 + k));
    const combine = actions.find((a) => a.type === 'combine');
    expect(combine).toBeDefined();
    expect(core.result).toBeUndefined();
    const outcome = await combinePartials((combine as Extract<CoreAction, { type: 'combine' }>).partials, env.partials);
    const last = core.step({ type: 'combined', at: 5, outcome });
    expect(sends(last)).toEqual([]);
    const end = core.result!;
    expect(end.result.ok).toBe(true);
    if (!end.result.ok) return;
    expect(end.result.grant.token.grant.epoch).toBe(1n);
    expect(verifyToken(end.result.grant.token, cluster).ok).toBe(true);
    expect(end.hint).toEqual({ epoch: 1n, contended: false });
  });

  it("a split vote releases what it won, backs off on a timer it asks for, and tries above the others' epoch", () => {
    const core = acquireCore(env, newAcquire(request, connections, undefined));
    const asked = sends(core.start(0));
    // Two grant epoch 1; the third has signed epoch 1 for someone else.
    expect(sends(core.step(answer(asked[0]!, granted(asked[0]!), 1)))).toEqual([]);
    expect(sends(core.step(answer(asked[1]!, granted(asked[1]!), 2)))).toEqual([]);
    let actions = core.step(answer(asked[2]!, { status: 'stale', epoch: 1n }, 3));
    const fourth = sends(actions);
    expect(fourth.map((s) => s.replica)).toEqual([[1, 2, 3, 4].find((r) => !asked.some((s) => s.replica === r))]);
    actions = core.step(answer(fourth[0]!, { status: 'stale', epoch: 1n }, 4));
    const releases = actions.filter((a) => a.type === 'notify');
    expect(releases.map((a) => (a as { replica: number }).replica).sort()).toEqual(
      [asked[0]!.replica, asked[1]!.replica].sort(),
    );
    expect(releases.every((a) => (a as { body: { type: string; epoch: bigint } }).body.type === 'release')).toBe(true);
    const pause = actions.find((a): a is Extract<CoreAction, { type: 'set_timer' }> => a.type === 'set_timer');
    expect(pause).toBeDefined();
    expect(core.result).toBeUndefined();
    const retry = sends(core.step({ type: 'timer', at: 10, timer: pause!.timer }));
    expect(retry.length).toBeGreaterThan(0);
    expect(retry.every((send) => (send.body as { epoch: bigint }).epoch === 2n)).toBe(true);
  });

  it('f+1 busy answers with no wait end the call as busy, with the (f+1)-th smallest remaining time, and no timer', () => {
    const core = acquireCore(env, newAcquire(request, connections, undefined));
    const asked = sends(core.start(0));
    core.step(answer(asked[0]!, { status: 'busy', epoch: 4n, remainingMs: 0 }, 1));
    const actions = core.step(answer(asked[1]!, { status: 'busy', epoch: 4n, remainingMs: 700 }, 2));
    expect(core.result?.result).toMatchObject({ ok: false, reason: 'busy', epoch: 4n, remainingMs: 700 });
    expect(actions.filter((a) => a.type === 'set_timer')).toEqual([]);
  });
});
