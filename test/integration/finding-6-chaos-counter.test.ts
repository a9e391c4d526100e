/**
 * Issue 16, finding 6: `quorumfence-dev chaos --replicas 7` ended "violations 0"
 * but "counter-N/n: value 0, 1873 accepted writes". No write was lost: the
 * run's final plain read went out on a keep-alive connection that the
 * resource had closed (Node's 5 s keep-alive timeout) while the chaos process
 * was busy in the history check (7 s of token verification after a 150 s
 * run); undici reused the dead socket ("other side closed", UND_ERR_SOCKET),
 * the read client turned the failure into "absent", and the report into 0.
 * Real resource process on loopback, real LMDB, the real client.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { formatChaosReport, type ChaosReport } from '../../src/testing/chaos-report.js';
import { ResourceHttpClient, WorkloadRecorder, counterCheck } from '../../src/testing/workload.js';
import { startResource, stopAllResources, type ResourceProcess } from '../support/resource-process.js';
import { makeTokenFactory } from '../support/token-factory.js';

const factory = makeTokenFactory();
const root = mkdtempSync(join(tmpdir(), 'qf-finding6-'));
const clusterFile = factory.writeClusterFile(root);
/** Node's default `server.keepAliveTimeout` (the resource keeps it) plus a margin. */
const LONGER_THAN_KEEP_ALIVE_MS = 6_000;

let resource: ResourceProcess;

beforeAll(async () => {
  resource = await startResource({ clusterFile, dataDir: join(root, 'resource') });
});

afterAll(async () => {
  await stopAllResources();
  rmSync(root, { recursive: true, force: true });
});

/** Blocks this process's event loop, as the history check does: timers and socket events wait. */
function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

describe("finding 6: the chaos run's final counter read", () => {
  test('a plain read right after the event loop was busy past the keep-alive timeout still returns the value', async () => {
    const client = new ResourceHttpClient(resource.url);
    const token = factory.issueText({ resource: 'finding6', epoch: 1 });
    expect((await client.put('finding6', 'n', '42', token)).ok).toBe(true);
    // The connection is now idle in the pool; the resource closes it after 5 s while this process cannot notice.
    expect(await client.read('finding6', 'n')).toBeDefined();
    busy(LONGER_THAN_KEEP_ALIVE_MS);
    const stored = await client.read('finding6', 'n');
    expect(new TextDecoder().decode(stored?.value)).toBe('42');
  }, 30_000);

  test('final reads tell a value, an absent key (version 0) and nothing else apart', async () => {
    const client = new ResourceHttpClient(resource.url);
    const recorder = new WorkloadRecorder();
    recorder.keys.add('finding6\u0000n');
    recorder.keys.add('finding6\u0000never-written');
    const final = await recorder.finalReads(client);
    const written = final.get('finding6\u0000n');
    expect(written).toMatchObject({ ok: true, version: 1 });
    expect(new TextDecoder().decode(written?.ok === true ? written.value : undefined)).toBe('42');
    expect(final.get('finding6\u0000never-written')).toEqual({ ok: true, value: undefined, version: 0 });
    const history = await recorder.history(client, final);
    expect(history.unreadFinal).toEqual([new Set()]);
    expect(history.finalVersions).toEqual([new Map([['finding6\u0000n', 1]])]);
  });

  test('a resource that cannot answer is "could not read" with its code, never a value of 0', async () => {
    const gone = await startResource({ clusterFile, dataDir: join(root, 'gone') });
    const client = new ResourceHttpClient(gone.url, { timeoutMs: 2_000 });
    const recorder = new WorkloadRecorder();
    recorder.keys.add('finding6\u0000n');
    await gone.stop();
    const final = await recorder.finalReads(client);
    const read = final.get('finding6\u0000n');
    expect(read).toMatchObject({ ok: false, code: 'unreachable' });
    // The log says nothing was accepted; the unread counter is reported as such, not as a mismatch against 0.
    const log = [] as Parameters<typeof counterCheck>[0];
    const check = counterCheck(log, final);
    expect(check.mismatches).toEqual([]);
    expect(check.unread).toEqual([
      { slot: 'finding6\u0000n', accepted: 0, code: 'unreachable', message: expect.any(String) as string },
    ]);
  }, 30_000);

  test('the report prints an unread counter as "could not read (code: reason)", apart from mismatches and values', () => {
    const report: ChaosReport = {
      seed: 777,
      replicas: 7,
      f: 2,
      byzantine: [6, 7],
      durationMs: 150_000,
      operations: 10,
      outcomes: { incremented: 10 },
      guardEntries: 20,
      accepted: 20,
      refusedByReason: {},
      tokens: 10,
      faults: {},
      kills: 0,
      staleHolderWrites: { attempted: 3, refused: 1, undelivered: 1 },
      byzantineActs: {},
      byzantineClients: {},
      violations: [],
      counterMismatches: [],
      unreadCounters: ['chaos/777/counter-1/n: could not read (unreachable: fetch failed), 1539 accepted writes'],
    };
    const table = formatChaosReport(report);
    expect(table).toMatch(/could not read\s+chaos\/777\/counter-1\/n: could not read \(unreachable: fetch failed\)/);
    expect(table).not.toMatch(/value 0/);
    expect(table).toMatch(/counters\s+every value read equals its accepted writes/);
    // Same class: a resumed holder whose write got no answer is not counted as refused by the fence.
    expect(table).toMatch(
      /3 resumed .*: 1 refused as stale, 1 never reached the guard \(unreachable or timeout\), the rest accepted/,
    );
  });
});
