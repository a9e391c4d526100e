/**
 * The replica's signer with real signing threads: a lone request while every
 * thread is idle is signed in the calling thread (no hand-off), a burst in one
 * event-loop turn goes to the threads after its first, and every partial is
 * the share's signature whichever thread made it. The threads run the built
 * worker script (dist/, built by `pretest`), as a replica process runs it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clusterToJson } from '../../src/cluster/description.js';
import { replicaKeyJson } from '../../src/cluster/replica-key.js';
import type { BlsBackend } from '../../src/crypto/backend.js';
import { loadBackend } from '../../src/crypto/load.js';
import type { PartialSigner } from '../../src/replica/signer.js';
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

let signer: PartialSigner;

beforeAll(async () => {
  // The built module: its worker script is dist/src/replica/signing-worker.js.
  const { startWorkerSigner } = (await import(
    '../../dist/src/replica/signer.js' as string
  )) as typeof import('../../src/replica/signer.js');
  signer = await startWorkerSigner({
    workers: 1,
    cluster: clusterToJson(dealt.cluster),
    key: replicaKeyJson(dealt.cluster.idHex, share),
    backend: backend.name,
    inline: { backend: countingBackend, secretKey: dealt.secretKeys[0]! },
  });
});

afterAll(async () => {
  await signer?.close();
});

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));
const message = (k: number) => new TextEncoder().encode(`grant message ${k}`);
const verifies = (bytes: Uint8Array, k: number) =>
  backend.verify(publicShare, message(k), backend.decodeSignature(bytes));

describe('replica signer: in the calling thread when idle, threads for bursts', () => {
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
