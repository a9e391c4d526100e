/**
 * S4's "one atomic, durable step", against SIGKILL: a resource process is
 * killed at a random moment during a stream of writes, again and again, and
 * after each kill its store must be consistent:
 *   - every write answered 200 before the kill is there;
 *   - no write is visible whose barrier raise was lost (every stored value's
 *     epoch is at most the barrier);
 *   - no barrier was raised without its write (some stored value carries the
 *     barrier's epoch);
 *   - the guard log has exactly one accepted entry per stored write, no gaps,
 *     and nothing that was never sent is anywhere.
 * A process kill leaves the page cache intact, so this checks atomicity and
 * the ordering of commit and acknowledgement; power loss is LMDB's fsync's job.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { LmdbGuard } from '../../src/guard/lmdb-guard.js';
import { startResource, stopAllResources, type ResourceProcess } from '../support/resource-process.js';
import { makeTokenFactory } from '../support/token-factory.js';

/** The issue asks for at least 30 kills. */
const KILLS = 32;
/** One sequential writer per resource; several resources so that writes share group commits. */
const RESOURCES = ['kill/a', 'kill/b', 'kill/c', 'kill/d', 'kill/e', 'kill/f'];
/** A new token (a higher epoch) every few writes, so kills land both on barrier raises and on plain writes. */
const WRITES_PER_TOKEN = 3;
/** How long after the first acknowledgement of a cycle the kill comes: random within this. */
const MAX_KILL_DELAY_MS = 120;

const factory = makeTokenFactory();
const root = mkdtempSync(join(tmpdir(), 'qf-kill-'));
const clusterFile = factory.writeClusterFile(root);
const dataDir = join(root, 'data');

afterAll(async () => {
  await stopAllResources();
  rmSync(root, { recursive: true, force: true });
});

const epochOf = (write: number) => Math.floor(write / WRITES_PER_TOKEN) + 1;
const keyOf = (write: number) => `w${String(write).padStart(6, '0')}`;
const valueOf = (write: number) => `${epochOf(write)}:${write}`;

interface Stream {
  next: number;
  readonly acked: Set<number>;
  /** Sent, but the kill came before the answer: may or may not be stored. */
  readonly unknown: Set<number>;
}

async function writeUntilKilled(
  server: ResourceProcess,
  resource: string,
  stream: Stream,
  killed: { value: boolean },
  onAck: () => void,
): Promise<void> {
  while (!killed.value) {
    const write = stream.next++;
    const token = factory.issueText({ resource, epoch: epochOf(write) });
    try {
      const response = await fetch(`${server.url}/kv/${encodeURIComponent(resource)}/${keyOf(write)}`, {
        method: 'PUT',
        headers: { authorization: `QuorumFence ${token}` },
        body: valueOf(write),
      });
      await response.arrayBuffer();
      if (response.status !== 200) throw new Error(`write ${write} to ${resource}: unexpected ${response.status}`);
      stream.acked.add(write);
      onAck();
    } catch (error) {
      if (!killed.value) throw error;
      stream.unknown.add(write);
    }
  }
}

/** Checks the store as a restart finds it; returns each resource's barrier epoch (undefined: none). */
async function checkStore(streams: Map<string, Stream>): Promise<Map<string, bigint | undefined>> {
  const barriers = new Map<string, bigint | undefined>();
  const guard = await LmdbGuard.open(dataDir, factory.cluster, { maxLogPage: 100_000 });
  try {
    const log = guard.readLog({ limit: 100_000 });
    expect(log.map((e) => e.seq)).toEqual(Array.from({ length: log.length }, (_, i) => i + 1));
    for (const [resource, stream] of streams) {
      const stored = guard.entries(resource);
      const writes = stored.map(({ key, value }) => {
        const write = Number(key.slice(1));
        expect(new TextDecoder().decode(value), `value of ${resource}/${key}`).toBe(valueOf(write));
        return write;
      });
      const present = new Set(writes);
      for (const write of stream.acked)
        expect(present.has(write), `acknowledged write ${write} of ${resource} survived`).toBe(true);
      for (const write of present)
        expect(stream.acked.has(write) || stream.unknown.has(write), `write ${write} of ${resource} was sent`).toBe(
          true,
        );

      const barrier = guard.barrier(resource);
      barriers.set(resource, barrier?.epoch);
      if (present.size === 0) {
        expect(barrier, `no barrier without a write for ${resource}`).toBeUndefined();
        continue;
      }
      const epochs = writes.map(epochOf);
      const highest = BigInt(Math.max(...epochs));
      expect(barrier?.epoch, `barrier of ${resource} matches its highest stored write`).toBe(highest);

      const accepted = log.filter((e) => e.resource === resource && e.accepted);
      expect(accepted.map((e) => e.key).sort(), `one accepted log entry per stored write of ${resource}`).toEqual(
        stored.map((s) => s.key),
      );
      expect(accepted.at(-1)!.barrierAfter).toBe(highest.toString());
    }
    return barriers;
  } finally {
    await guard.close();
  }
}

/** The restarted process serves the barriers the store holds. */
async function checkServedBarriers(server: ResourceProcess, barriers: Map<string, bigint | undefined>): Promise<void> {
  for (const [resource, epoch] of barriers) {
    const response = await fetch(`${server.url}/barrier/${encodeURIComponent(resource)}`);
    const body = (await response.json()) as { epoch?: string };
    expect(response.status).toBe(epoch === undefined ? 404 : 200);
    if (epoch !== undefined) expect(body.epoch).toBe(epoch.toString());
  }
}

describe('S4 fencing: barrier and data change in one atomic, durable step (SIGKILL)', () => {
  test(`${KILLS} kills during a stream of writes leave data, barrier and log consistent, with every acknowledged write kept`, async () => {
    const streams = new Map<string, Stream>(
      RESOURCES.map((r) => [r, { next: 0, acked: new Set<number>(), unknown: new Set<number>() }]),
    );
    // Tokens made up front, so that signing does not pace the writers.
    for (const resource of RESOURCES) for (let epoch = 1; epoch <= 80; epoch++) factory.issue({ resource, epoch });

    let barriers = new Map<string, bigint | undefined>();
    for (let kill = 0; kill < KILLS; kill++) {
      const server = await startResource({ clusterFile, dataDir });
      await checkServedBarriers(server, barriers);
      const killed = { value: false };
      let firstAck: () => void = () => undefined;
      const started = new Promise<void>((resolve) => (firstAck = resolve));
      const writers = RESOURCES.map((resource) =>
        writeUntilKilled(server, resource, streams.get(resource)!, killed, firstAck),
      );
      const failed = Promise.race(writers.map((w) => w.then(() => new Promise<never>(() => undefined))));
      await Promise.race([started, failed]);
      await new Promise((resolve) => setTimeout(resolve, Math.random() * MAX_KILL_DELAY_MS));
      killed.value = true;
      expect(await server.stop('SIGKILL')).toBe('SIGKILL');
      await Promise.all(writers);
      barriers = await checkStore(streams);
    }
    const acked = [...streams.values()].reduce((n, s) => n + s.acked.size, 0);
    const unknown = [...streams.values()].reduce((n, s) => n + s.unknown.size, 0);
    // The stream really ran: on average well over one acknowledged write per resource per cycle.
    expect(acked).toBeGreaterThan(KILLS * RESOURCES.length);
    expect(unknown).toBeGreaterThan(0);
  }, 240_000);
});
