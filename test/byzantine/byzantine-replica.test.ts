/**
 * The attackers themselves: each Byzantine behaviour, run by the real
 * `nodes/byzantine-replica.js` process around the real replica code, does
 * what its name says on the wire. (The scenarios that show the cluster
 * survives them are in byzantine-cluster.test.ts.) Spoken to with the raw
 * test client, so nothing smooths over what the replica sent.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WebSocket } from 'ws';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { loadClusterFile, type Cluster } from '../../src/cluster/description.js';
import { MAX_EPOCH } from '../../src/common/limits.js';
import { decodeServerMessage, encodeMessage } from '../../src/protocol/codec.js';
import { grantMessage } from '../../src/token/grant.js';
import { byzantineEntryPoint, byzantineState, controlByzantine } from '../../src/testing/byzantine/control.js';
import { identityPointBytes } from '../../src/testing/byzantine/forge.js';
import { RawClient, helloFor, newHolder, outcomeOf, type Holder } from '../support/raw-client.js';

let dir: string;
let local: LocalCluster;
let cluster: Cluster;
/** Replica 4 is Byzantine (behaviours set per test); replica 3 runs no-record from the start. */
let url: string;
let noRecordUrl: string;
const clients: RawClient[] = [];
let resourceCounter = 0;
const fresh = () => `byz/${process.pid}/${resourceCounter++}`;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'qf-byz-replica-'));
  dealLocalCluster(join(dir, 'keys'), 4);
  local = await startLocalCluster({
    newStores: true,
    dir: join(dir, 'keys'),
    dataRoot: join(dir, 'data'),
    indices: [3, 4],
    entry: byzantineEntryPoint(),
    extraArgs: (index) =>
      index === 4
        ? [
            '--signing-workers',
            '0',
            '--other-key',
            join(dir, 'keys', 'replica-1.key'),
            '--seed',
            '7',
            '--slow',
            '300ms',
            '--flood',
            '20',
          ]
        : ['--signing-workers', '0', '--behaviour', 'no-record'],
  });
  cluster = local.cluster;
  url = local.replica(4).url;
  noRecordUrl = local.replica(3).url;
});

afterAll(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
  await local?.close();
  rmSync(dir, { recursive: true, force: true });
});

beforeEach(async () => {
  await controlByzantine(url, { behaviours: [], rate: 1 });
});

async function open(holder: Holder = newHolder(), at = url): Promise<RawClient> {
  const client = await RawClient.open(at, holder);
  clients.push(client);
  return client;
}

function verifiesAs(index: number, resource: string, epoch: bigint, holder: Holder, partial: Uint8Array): boolean {
  const message = grantMessage({ clusterId: cluster.id, resource, epoch, holder: holder.publicKey });
  try {
    return cluster.backend.verify(
      cluster.replicas[index - 1]!.publicKeyShare,
      message,
      cluster.backend.decodeSignature(partial),
    );
  } catch {
    return false;
  }
}

describe('Byzantine replica behaviours (each does what it says, on the real replica code)', () => {
  it('equivocate: signs a second holder for one (resource, epoch) that the real record refuses', async () => {
    await controlByzantine(url, { behaviours: ['equivocate'] });
    const [alice, bob] = [newHolder(), newHolder()];
    const resource = fresh();
    const a = outcomeOf(await (await open(alice)).acquire(resource, 1n, 10_000));
    const b = outcomeOf(await (await open(bob)).acquire(resource, 1n, 10_000));
    expect(a.status).toBe('granted');
    expect(b.status).toBe('granted');
    if (a.status !== 'granted' || b.status !== 'granted') return;
    expect(verifiesAs(4, resource, 1n, alice, a.partial)).toBe(true);
    expect(verifiesAs(4, resource, 1n, bob, b.partial)).toBe(true);
    expect((await byzantineState(url)).acts.equivocate).toBeGreaterThanOrEqual(1);
  });

  it('garbage, identity, wrong-share: the granted partial does not verify under the share', async () => {
    for (const behaviour of ['garbage', 'identity', 'wrong-share'] as const) {
      await controlByzantine(url, { behaviours: [behaviour] });
      const holder = newHolder();
      const resource = fresh();
      const answer = outcomeOf(await (await open(holder)).acquire(resource, 1n));
      expect(answer.status, behaviour).toBe('granted');
      if (answer.status !== 'granted') continue;
      expect(verifiesAs(4, resource, 1n, holder, answer.partial), behaviour).toBe(false);
      if (behaviour === 'identity') expect(answer.partial).toEqual(identityPointBytes());
      if (behaviour === 'wrong-share') expect(() => cluster.backend.decodeSignature(answer.partial)).not.toThrow();
    }
  });

  it("replay: a granted partial is an earlier one for another grant; other-replica: signed with replica 1's share", async () => {
    const holder = newHolder();
    const client = await open(holder);
    const first = fresh();
    const earlier = outcomeOf(await client.acquire(first, 1n));
    await controlByzantine(url, { behaviours: ['replay'] });
    const second = fresh();
    const replayed = outcomeOf(await client.acquire(second, 1n));
    expect(earlier.status === 'granted' && replayed.status === 'granted').toBe(true);
    if (replayed.status !== 'granted') return;
    expect(verifiesAs(4, second, 1n, holder, replayed.partial)).toBe(false);

    await controlByzantine(url, { behaviours: ['other-replica'] });
    const third = fresh();
    const other = outcomeOf(await client.acquire(third, 1n));
    expect(other.status).toBe('granted');
    if (other.status !== 'granted') return;
    expect(verifiesAs(1, third, 1n, holder, other.partial)).toBe(true);
    expect(verifiesAs(4, third, 1n, holder, other.partial)).toBe(false);
  });

  it('lie-epoch-huge and lie-epoch-zero: status and refusals report false epochs', async () => {
    const client = await open();
    const resource = fresh();
    expect(outcomeOf(await client.acquire(resource, 5n)).status).toBe('granted');
    await controlByzantine(url, { behaviours: ['lie-epoch-huge'] });
    expect(outcomeOf(await client.status(resource))).toMatchObject({ status: 'ok', epoch: MAX_EPOCH, leased: true });
    expect(outcomeOf(await client.acquire(resource, 2n))).toMatchObject({ status: 'stale', epoch: MAX_EPOCH });
    await controlByzantine(url, { behaviours: ['lie-epoch-zero'] });
    expect(outcomeOf(await client.status(resource))).toMatchObject({ status: 'ok', epoch: 0n, leased: false });
    expect(outcomeOf(await client.acquire(resource, 2n))).toMatchObject({ status: 'stale', epoch: 0n });
  });

  it('silent never answers; slow answers after --slow; drop closes the connection', async () => {
    await controlByzantine(url, { behaviours: ['silent'] });
    const quiet = await open();
    await expect(quiet.exchange({ type: 'status', id: quiet.nextId(), resource: fresh() }, 400)).rejects.toThrow(
      /no answer/,
    );

    await controlByzantine(url, { behaviours: ['slow'] });
    const slow = await open();
    const started = performance.now();
    expect(outcomeOf(await slow.status(fresh())).status).toBe('ok');
    expect(performance.now() - started).toBeGreaterThanOrEqual(250);

    await controlByzantine(url, { behaviours: ['drop'] });
    const dropped = await open();
    await expect(dropped.status(fresh())).rejects.toThrow(/closed/);
  });

  it('flood: every answer comes with --flood extra frames', async () => {
    await controlByzantine(url, { behaviours: ['flood'] });
    const client = await open();
    expect(outcomeOf(await client.status(fresh())).status).toBe('ok');
    let extra = 0;
    for (let k = 0; k < 30; k++) {
      const next = await client.next(500).catch(() => undefined);
      if (!next || !('message' in next)) break;
      extra++;
    }
    expect(extra).toBeGreaterThanOrEqual(10);
  });

  it('malformed: answers are frames the strict codec refuses', async () => {
    await controlByzantine(url, { behaviours: ['malformed'] });
    const holder = newHolder();
    const refused: string[] = [];
    for (let k = 0; k < 6; k++) {
      const socket = new WebSocket(url, { perMessageDeflate: false });
      const frames: { data: Buffer; binary: boolean }[] = [];
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('no answer')), 5_000);
        socket.on('message', (data: Buffer, binary) => {
          frames.push({ data, binary });
          if (frames.length === 1) {
            const challenge = decodeServerMessage(new Uint8Array(data));
            if (challenge.type === 'challenge') socket.send(encodeMessage(helloFor(holder, challenge, 1)));
          } else if (frames.length === 2) socket.send(encodeMessage({ type: 'status', id: 2, resource: 'x' }));
          else {
            clearTimeout(timer);
            resolve();
          }
        });
        socket.on('error', reject);
      });
      socket.terminate();
      const answer = frames[2]!;
      try {
        if (!answer.binary) throw new Error('text frame');
        const message = decodeServerMessage(new Uint8Array(answer.data));
        if (message.type !== 'reply') throw new Error(`unexpected ${message.type}`);
        // Decodes as a frame, so the outcome must be what is wrong.
        expect(message.outcome).not.toHaveProperty('epoch');
        refused.push('outcome');
      } catch (error) {
        refused.push((error as Error).message.slice(0, 20));
      }
    }
    expect(refused).toHaveLength(6);
    expect((await byzantineState(url)).acts.malformed).toBeGreaterThanOrEqual(6);
  });

  it('ignore-release: says released, and the lease keeps running at the real replica', async () => {
    await controlByzantine(url, { behaviours: ['ignore-release'] });
    const [alice, bob] = [newHolder(), newHolder()];
    const resource = fresh();
    const a = await open(alice);
    expect(outcomeOf(await a.acquire(resource, 1n, 30_000)).status).toBe('granted');
    expect(outcomeOf(await a.release(resource, 1n)).status).toBe('released');
    await controlByzantine(url, { behaviours: [] });
    expect(outcomeOf(await (await open(bob)).acquire(resource, 2n))).toMatchObject({ status: 'busy', epoch: 1n });
  });

  it('no-record: after SIGKILL and restart it signs a second holder at an epoch it already signed', async () => {
    const [alice, bob] = [newHolder(), newHolder()];
    const resource = fresh();
    expect(outcomeOf(await (await open(alice, noRecordUrl)).acquire(resource, 1n, 30_000)).status).toBe('granted');
    await local.replica(3).kill('SIGKILL');
    await local.replica(3).restart();
    const b = outcomeOf(await (await open(bob, local.replica(3).url)).acquire(resource, 1n));
    expect(b.status).toBe('granted');
    if (b.status === 'granted') expect(verifiesAs(3, resource, 1n, bob, b.partial)).toBe(true);
  });

  it('clock jumps (control endpoint and SIGUSR2) end leases early at that replica only', async () => {
    const [alice, bob] = [newHolder(), newHolder()];
    const resource = fresh();
    expect(outcomeOf(await (await open(alice)).acquire(resource, 1n, 30_000)).status).toBe('granted');
    const b = await open(bob);
    expect(outcomeOf(await b.acquire(resource, 2n)).status).toBe('busy');
    await controlByzantine(url, { jumpClockMs: 31_000 });
    expect(outcomeOf(await b.acquire(resource, 2n, 30_000)).status).toBe('granted');

    await controlByzantine(url, { clockJumpMs: 31_000 });
    const c = await open();
    expect(outcomeOf(await c.acquire(resource, 3n)).status).toBe('busy');
    const before = (await byzantineState(url)).clockOffsetMs;
    process.kill(local.replica(4).pid, 'SIGUSR2');
    for (let k = 0; k < 100 && (await byzantineState(url)).clockOffsetMs === before; k++)
      await new Promise((r) => setTimeout(r, 20));
    expect(outcomeOf(await c.acquire(resource, 3n)).status).toBe('granted');
  });

  it('an unknown behaviour name is refused by the control endpoint and the entry point', async () => {
    await expect(controlByzantine(url, { behaviours: ['polite'] })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    const { spawnSync } = await import('node:child_process');
    const run = spawnSync(
      process.execPath,
      [
        byzantineEntryPoint(),
        '--cluster',
        join(dir, 'keys', 'cluster.json'),
        '--key',
        join(dir, 'keys', 'replica-1.key'),
        '--data',
        join(dir, 'x'),
        '--behaviour',
        'polite',
      ],
      {
        encoding: 'utf8',
        timeout: 20_000,
      },
    );
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/unknown behaviour "polite".*INVALID_OPTION/);
    expect(loadClusterFile(join(dir, 'keys', 'cluster.json')).id).toEqual(cluster.id);
  });
});
