/**
 * Finding 6 (issue 16): a 7-replica chaos run ended "violations 0" but with a
 * counter read as 0 after 1,873 accepted writes. No write was lost. The run
 * checked its history (thousands of token verifications, synchronous) right
 * before its final reads; that kept the event loop busy for longer than the
 * resource's keep-alive timeout, so the first read went out on a socket the
 * resource had already closed, failed, and the report turned "could not
 * read" into the value 0. Here, against a real resource process: the same
 * stall makes a plain read fail with a reason (never an absent key), and the
 * final reads retry it and get the value.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { ResourceHttpClient, WorkloadRecorder, counterValues } from '../../src/testing/workload.js';
import { startResource, stopAllResources, type ResourceProcess } from '../support/resource-process.js';
import { makeTokenFactory } from '../support/token-factory.js';

const factory = makeTokenFactory();
const root = mkdtempSync(join(tmpdir(), 'qf-finding-6-'));
const clusterFile = factory.writeClusterFile(root);
let server: ResourceProcess;

/** Node's HTTP server closes a keep-alive socket idle for 5 s; the stall outlasts it. */
const STALL_MS = 6_500;

/** Blocks this thread the way a long synchronous history check does: no timer, no socket event runs meanwhile. */
function stallEventLoop(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

beforeAll(async () => {
  server = await startResource({ clusterFile, dataDir: join(root, 'data') });
});

afterAll(async () => {
  await stopAllResources();
  rmSync(root, { recursive: true, force: true });
});

describe('finding 6: a final read that cannot be made is never a value', () => {
  test('after a stall past the keep-alive timeout, a read names its failure; final reads retry and get the value', async () => {
    const resource = 'finding-6/counter';
    const guard = new ResourceHttpClient(server.url);
    const put = await guard.put(resource, 'n', '1873', factory.issueText({ resource, epoch: 1 }));
    expect(put.ok).toBe(true);

    // Reads that find the socket dead: some runs race the close and get through, so try a few stalls.
    let failed: { ok: false; code: string } | undefined;
    for (let attempt = 0; attempt < 3 && failed === undefined; attempt++) {
      expect(await guard.read(resource, 'n')).toMatchObject({ ok: true }); // a fresh keep-alive socket
      stallEventLoop(STALL_MS);
      const read = await guard.read(resource, 'n');
      if (!read.ok) failed = read;
      else expect(new TextDecoder().decode(read.stored?.value)).toBe('1873');
    }
    expect(failed, 'the stale keep-alive socket was never hit').toBeDefined();
    expect(failed!.code).toBe('unreachable');

    const recorder = new WorkloadRecorder();
    recorder.keys.add(`${resource}\u0000n`);
    expect(await guard.read(resource, 'n')).toMatchObject({ ok: true });
    stallEventLoop(STALL_MS);
    const { values, unreadable } = counterValues(await recorder.finalReads(guard));
    expect(unreadable).toEqual([]);
    expect(values.get(`${resource}\u0000n`)).toBe(1873);
  }, 60_000);

  test('a key that was never written reads as absent, and a resource that is gone reads as unreadable', async () => {
    const guard = new ResourceHttpClient(server.url);
    expect(await guard.read('finding-6/never', 'n')).toEqual({ ok: true, stored: undefined });
    const gone = new ResourceHttpClient('http://127.0.0.1:1', { timeoutMs: 500 });
    const recorder = new WorkloadRecorder();
    recorder.keys.add('finding-6/never\u0000n');
    const { values, unreadable } = counterValues(await recorder.finalReads(gone));
    expect(values.size).toBe(0);
    expect(unreadable).toEqual([expect.stringMatching(/^finding-6\/never\/n: unreachable \(/)]);
    expect(recorder.failedFinalReads.length).toBe(4);
  }, 60_000);
});
