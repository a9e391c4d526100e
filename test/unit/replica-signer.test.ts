/**
 * The replica's signer with real signing threads. While the calling thread's
 * event loop is not busy, every request is signed there (no hand-off); while
 * it is, a lone request while every thread is idle is still signed there and a
 * burst in one event-loop turn goes to the threads after its first. Every
 * partial is the share's signature whichever thread made it. The threads run
 * the built worker script (dist/, built by `pretest`), as a replica process
 * runs it. The rule itself (busy or not, with its hysteresis) is tested as the
 * pure functions it is, and the meter against a loop kept busy and one left idle.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clusterToJson } from '../../src/cluster/description.js';
import { replicaKeyJson } from '../../src/cluster/replica-key.js';
import type { BlsBackend } from '../../src/crypto/backend.js';
import { loadBackend } from '../../src/crypto/load.js';
import {
  BUSY_LOOP_ABOVE,
  eventLoopMeter,
  IDLE_LOOP_BELOW,
  loopIsBusy,
  signInThisThread,
  type PartialSigner,
} from '../../src/replica/signer.js';
import { dealCluster } from '../support/dealt-cluster.js';

const backend = loadBackend();
const dealt = dealCluster(4, backend);
const share = dealt.key.shares[0]!;
const publicShare = dealt.cluster.replicas[0]!.publicKeyShare;

let inlineSigns = 0;
/** The real backend, counting the signatures made in this (the calling) thread. */
const countingBackend: BlsBackend = {
  ...backend,
  sign: (secretKey, message) => {
    inlineSigns++;
    return backend.sign(secretKey, message);
  },
};

/** The event loop as busy (a replica at its limit) and as not busy (the signer's two regimes). */
let signer: PartialSigner;
let idleLoopSigner: PartialSigner;

beforeAll(async () => {
  // The built module: its worker script is dist/src/replica/signing-worker.js.
  const { startWorkerSigner } = (await import(
    '../../dist/src/replica/signer.js' as string
  )) as typeof import('../../src/replica/signer.js');
  const start = (utilization: number) =>
    startWorkerSigner({
      workers: 1,
      cluster: clusterToJson(dealt.cluster),
      key: replicaKeyJson(dealt.cluster.idHex, share),
      backend: backend.name,
      inline: { backend: countingBackend, secretKey: dealt.secretKeys[0]! },
      loopUtilization: () => utilization,
    });
  [signer, idleLoopSigner] = await Promise.all([start(1), start(0)]);
});

afterAll(async () => {
  await Promise.all([signer?.close(), idleLoopSigner?.close()]);
});

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));
const message = (k: number) => new TextEncoder().encode(`grant message ${k}`);
const verifies = (bytes: Uint8Array, k: number) =>
  backend.verify(publicShare, message(k), backend.decodeSignature(bytes));

describe('replica signer: where a signature is made', () => {
  it('counts the loop busy from BUSY_LOOP_ABOVE and idle again only below IDLE_LOOP_BELOW', () => {
    expect(IDLE_LOOP_BELOW).toBeLessThan(BUSY_LOOP_ABOVE);
    expect(loopIsBusy(false, BUSY_LOOP_ABOVE - 0.01)).toBe(false);
    expect(loopIsBusy(false, BUSY_LOOP_ABOVE)).toBe(true);
    // Between the two levels the loop keeps its state: moving the signing away does not flip it straight back.
    const between = (IDLE_LOOP_BELOW + BUSY_LOOP_ABOVE) / 2;
    expect(loopIsBusy(true, between)).toBe(true);
    expect(loopIsBusy(false, between)).toBe(false);
    expect(loopIsBusy(true, IDLE_LOOP_BELOW)).toBe(false);
  });

  it("signs here whenever the loop is not busy; when it is, only a turn's first while the threads are idle", () => {
    for (const signedHereThisTurn of [false, true])
      for (const threadsIdle of [false, true])
        expect(signInThisThread({ loopBusy: false, signedHereThisTurn, threadsIdle })).toBe(true);
    expect(signInThisThread({ loopBusy: true, signedHereThisTurn: false, threadsIdle: true })).toBe(true);
    expect(signInThisThread({ loopBusy: true, signedHereThisTurn: true, threadsIdle: true })).toBe(false);
    expect(signInThisThread({ loopBusy: true, signedHereThisTurn: false, threadsIdle: false })).toBe(false);
  });

  it('reads a loop kept busy as busy and a loop left idle as not busy', async () => {
    const meter = eventLoopMeter(50);
    const until = performance.now() + 120;
    while (performance.now() < until); // the event loop's thread never yields
    expect(meter()).toBeGreaterThan(BUSY_LOOP_ABOVE);
    await new Promise((resolve) => setTimeout(resolve, 120));
    expect(meter()).toBeLessThan(IDLE_LOOP_BELOW);
  });

  it('signs a whole burst in the calling thread while its event loop is not busy', async () => {
    await nextTurn();
    const before = inlineSigns;
    const partials = await Promise.all(Array.from({ length: 12 }, (_, k) => idleLoopSigner.sign(message(300 + k))));
    expect(inlineSigns - before).toBe(12);
    partials.forEach((partial, k) => expect(verifies(partial, 300 + k)).toBe(true));
  });
});

describe('replica signer, event loop busy: in the calling thread when idle, threads for bursts', () => {
  it('signs a lone request in the calling thread, with the same partial a thread makes', async () => {
    await nextTurn();
    const before = inlineSigns;
    const partial = await signer.sign(message(1));
    expect(inlineSigns - before).toBe(1);
    expect(verifies(partial, 1)).toBe(true);
    expect(partial).toEqual(backend.sign(dealt.secretKeys[0]!, message(1)).bytes);
  });

  it('sends a burst to the threads after its first, and every partial verifies under the share', async () => {
    await nextTurn();
    const before = inlineSigns;
    const burst = Array.from({ length: 12 }, (_, k) => signer.sign(message(100 + k)));
    const partials = await Promise.all(burst);
    expect(inlineSigns - before).toBe(1);
    partials.forEach((partial, k) => expect(verifies(partial, 100 + k)).toBe(true));
  });

  it('signs here again once a turn has passed and the threads are idle', async () => {
    await nextTurn();
    const before = inlineSigns;
    for (let k = 0; k < 3; k++) {
      await nextTurn();
      expect(verifies(await signer.sign(message(200 + k)), 200 + k)).toBe(true);
    }
    expect(inlineSigns - before).toBe(3);
  });
});
