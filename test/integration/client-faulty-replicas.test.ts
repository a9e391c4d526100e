/**
 * Liveness with up to f faulty replicas (docs/protocol.md, Liveness; Client rules):
 * an uncontended acquire succeeds against real replica processes while f of
 * the replicas are killed, silent, or lying, for f = 1 (N = 4) and f = 2
 * (N = 7), and the client names the liars it caught.
 *
 * The faulty replicas are small servers in this file that speak (or refuse
 * to speak) the protocol: they are the faulty party, not a stand-in for the
 * system under test. The client is pointed at them with `withEndpoints`; the
 * honest replicas are real processes started by the launcher.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WebSocketServer, type WebSocket } from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { withEndpoints, type Cluster } from '../../src/cluster/description.js';
import { loadReplicaKeyFile, type ReplicaKey } from '../../src/cluster/replica-key.js';
import { QuorumFenceClient } from '../../src/client/client.js';
import { generateIdentity } from '../../src/client/identity.js';
import type { FaultKind } from '../../src/client/evidence.js';
import { decodeClientMessage, encodeMessage } from '../../src/protocol/codec.js';
import type { ServerMessage } from '../../src/protocol/messages.js';
import { startFaultProxy, type FaultProxy } from '../../src/testing/fault-proxy.js';
import { verifyToken } from '../../src/token/admission-token.js';
import { grantMessage } from '../../src/token/grant.js';

/**
 * 96 random bytes that encode no point: the compression flag (the first byte's top bit) cleared, which a 96-byte
 * G2 encoding must have. Fully random bytes now and then decode as a point outside the subgroup, and
 * that is `invalid_partial`, not `undecodable_partial`: the test was then wrong at random.
 */
function undecodableBytes(): Uint8Array {
  const bytes = new Uint8Array(randomBytes(96));
  bytes[0]! &= 0x7f;
  return bytes;
}

type Behaviour =
  /** Accepts the WebSocket and never sends a byte. */
  | 'silent'
  /** Speaks the protocol, grants everything, with 96 random bytes as the partial. */
  | 'garbage_partial'
  /** Grants with a real partial signature made with another replica's share. */
  | 'other_partial'
  /** Reports a huge epoch in every status and stale answer. */
  | 'huge_epoch'
  /** Answers every request with an undecodable frame. */
  | 'garbage_frames'
  /** Completes the handshake, then never answers a request. */
  | 'mute'
  /** Sends a challenge naming another cluster. */
  | 'bad_challenge';

/** A faulty replica for index `index` of `cluster`. */
class FaultyReplica {
  readonly #server: WebSocketServer;
  readonly #sockets = new Set<WebSocket>();
  readonly url: string;

  private constructor(server: WebSocketServer, url: string) {
    this.#server = server;
    this.url = url;
  }

  static async start(
    cluster: Cluster,
    index: number,
    behaviour: Behaviour,
    otherKey: ReplicaKey,
  ): Promise<FaultyReplica> {
    const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await new Promise<void>((resolve) => server.once('listening', () => resolve()));
    const address = server.address();
    const port = typeof address === 'object' && address ? address.port : 0;
    const faulty = new FaultyReplica(server, `ws://127.0.0.1:${port}`);
    server.on('connection', (socket) => {
      faulty.#sockets.add(socket);
      socket.on('close', () => faulty.#sockets.delete(socket));
      socket.on('error', () => undefined);
      if (behaviour === 'silent') return;
      const send = (message: ServerMessage) => socket.send(encodeMessage(message));
      let holder: Uint8Array | undefined;
      const clusterId = behaviour === 'bad_challenge' ? new Uint8Array(randomBytes(32)) : cluster.id;
      send({ type: 'challenge', nonce: new Uint8Array(randomBytes(32)), clusterId, replica: index });
      socket.on('message', (data) => {
        let message;
        try {
          message = decodeClientMessage(data as Buffer);
        } catch {
          return;
        }
        if (message.type === 'hello') {
          holder = message.holder;
          send({ type: 'welcome', id: message.id, replica: index });
          return;
        }
        if (behaviour === 'mute') return;
        if (behaviour === 'garbage_frames') {
          socket.send(randomBytes(40));
          return;
        }
        const huge = 1n << 62n;
        switch (message.type) {
          case 'status':
            send({
              type: 'reply',
              id: message.id,
              outcome: { status: 'ok', epoch: behaviour === 'huge_epoch' ? huge : 0n, leased: false, remainingMs: 0 },
            });
            return;
          case 'acquire': {
            if (behaviour === 'huge_epoch') {
              send({ type: 'reply', id: message.id, outcome: { status: 'stale', epoch: huge } });
              return;
            }
            const partial =
              behaviour === 'garbage_partial'
                ? undecodableBytes()
                : cluster.backend.sign(
                    otherKey.secretKey,
                    grantMessage({
                      clusterId: cluster.id,
                      resource: message.resource,
                      epoch: message.epoch,
                      holder: holder!,
                    }),
                  ).bytes;
            send({ type: 'reply', id: message.id, outcome: { status: 'granted', partial } });
            return;
          }
          case 'renew':
            send({ type: 'reply', id: message.id, outcome: { status: 'renewed', remainingMs: message.ttlMs } });
            return;
          case 'release':
            send({ type: 'reply', id: message.id, outcome: { status: 'released' } });
            return;
          case 'leases':
            send({ type: 'reply', id: message.id, outcome: { status: 'leases', leases: [], more: false } });
            return;
        }
      });
    });
    return faulty;
  }

  async close(): Promise<void> {
    for (const socket of this.#sockets) socket.terminate();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

interface Fixture {
  readonly dir: string;
  readonly local: LocalCluster;
  readonly keys: ReplicaKey[];
  readonly faulty: FaultyReplica[];
  readonly clients: QuorumFenceClient[];
  /** Delaying proxies in front of honest replicas, by index (made on first use). */
  readonly slowed: Map<number, FaultProxy>;
}

async function startFixture(n: number): Promise<Fixture> {
  const dir = mkdtempSync(join(tmpdir(), 'qf-client-faulty-'));
  const { keyPaths } = dealLocalCluster(join(dir, 'keys'), n);
  const local = await startLocalCluster({ newStores: true, dir: join(dir, 'keys'), dataRoot: join(dir, 'data') });
  const keys = keyPaths.map((path) => loadReplicaKeyFile(path, local.cluster));
  return { dir, local, keys, faulty: [], clients: [], slowed: new Map() };
}

async function stopFixture(fixture: Fixture | undefined): Promise<void> {
  if (!fixture) return;
  await Promise.allSettled(fixture.clients.map((c) => c.close()));
  await Promise.allSettled(fixture.faulty.map((f) => f.close()));
  await Promise.allSettled([...fixture.slowed.values()].map((p) => p.close()));
  await fixture.local.close();
  rmSync(fixture.dir, { recursive: true, force: true });
}

/**
 * The cluster as the client sees it: replicas `liars` (by index) replaced by
 * faulty servers of `behaviour`. With `slowHonest`, the honest replicas sit
 * behind a proxy that delays each message by 40 ms, so the liars' answers
 * surely arrive first and must be dealt with (otherwise an acquire may finish
 * on honest partials alone before a liar's answer is even read).
 */
async function clusterWithFaulty(
  fixture: Fixture,
  liars: readonly number[],
  behaviours: readonly Behaviour[],
  slowHonest = false,
): Promise<Cluster> {
  const cluster = fixture.local.cluster;
  const endpoints = cluster.replicas.map((r) => r.endpoint);
  if (slowHonest) {
    for (const replica of cluster.replicas) {
      if (liars.includes(replica.index)) continue;
      let proxy = fixture.slowed.get(replica.index);
      if (!proxy) {
        proxy = await startFaultProxy({ target: replica.endpoint, host: '127.0.0.1', faults: { delayMs: [40, 40] } });
        fixture.slowed.set(replica.index, proxy);
      }
      endpoints[replica.index - 1] = proxy.url;
    }
  }
  for (const [k, index] of liars.entries()) {
    // Signs with the next replica's share: a real partial, but not this replica's.
    const other = fixture.keys[index % cluster.n]!;
    const faulty = await FaultyReplica.start(cluster, index, behaviours[k % behaviours.length]!, other);
    fixture.faulty.push(faulty);
    endpoints[index - 1] = faulty.url;
  }
  return withEndpoints(cluster, endpoints);
}

async function connect(fixture: Fixture, cluster: Cluster): Promise<QuorumFenceClient> {
  // A short handshake timeout so that silent replicas cost little; nothing else is tuned.
  const client = await QuorumFenceClient.connect(cluster, generateIdentity(), { handshakeTimeoutMs: 1000 });
  fixture.clients.push(client);
  return client;
}

for (const f of [1, 2]) {
  const n = 3 * f + 1;
  describe(`Liveness with f = ${f} faulty of N = ${n}: uncontended acquire succeeds`, () => {
    let fixture: Fixture | undefined;
    // The last f replicas are the faulty ones in every case.
    const liars = Array.from({ length: f }, (_, k) => n - k);

    beforeAll(async () => {
      fixture = await startFixture(n);
    }, 60_000);
    afterAll(async () => {
      await stopFixture(fixture);
    }, 60_000);

    async function acquireOk(cluster: Cluster, resource: string, liarsPresent = true) {
      const client = await connect(fixture!, cluster);
      if (process.env.QF_DEBUG)
        console.log(
          resource,
          JSON.stringify(client.replicas().map((r) => [r.replica, r.state.phase, r.state.lastFailure?.kind])),
        );
      const started = performance.now();
      const result = await client.acquire(resource, { ttlMs: 5000 });
      const elapsed = performance.now() - started;
      expect(result.ok, JSON.stringify(!result.ok && result)).toBe(true);
      if (!result.ok) throw new Error('unreachable');
      expect(verifyToken(result.lease.token, fixture!.local.cluster).ok).toBe(true);
      if (liarsPresent) expect(result.lease.signers.every((s) => !liars.includes(s))).toBe(true);
      await result.lease.release();
      return { client, result, elapsed };
    }

    it('with all replicas up', async () => {
      const { result } = await acquireOk(fixture!.local.cluster, 'all-up', false);
      expect(result.faults).toEqual([]);
      expect(result.lease.epoch).toBe(1n);
    });

    it('with f replicas silent (connection accepted, never answered)', async () => {
      const { elapsed } = await acquireOk(await clusterWithFaulty(fixture!, liars, ['silent']), 'silent');
      // The round does not wait for the silent ones: no timeout is spent.
      expect(elapsed).toBeLessThan(1000);
    });

    for (const [behaviour, kind] of [
      ['garbage_partial', 'undecodable_partial'],
      ['other_partial', 'invalid_partial'],
      ['garbage_frames', 'protocol'],
      ['bad_challenge', 'bad_challenge'],
    ] as const satisfies readonly (readonly [Behaviour, FaultKind])[]) {
      it(`with f replicas sending ${behaviour.replace('_', ' ')}, naming them`, async () => {
        const { client, result } = await acquireOk(
          await clusterWithFaulty(fixture!, liars, [behaviour], true),
          behaviour,
        );
        expect(result.faults.map((x) => x.replica).sort()).toEqual([...liars].sort());
        expect(new Set(result.faults.map((x) => x.kind))).toEqual(new Set([kind]));
        if (kind === 'undecodable_partial' || kind === 'invalid_partial') {
          const evidence = client.evidence();
          expect(evidence.map((e) => e.replica).sort()).toEqual([...liars].sort());
          for (const item of evidence) {
            expect(item.kind).toBe(kind);
            expect(item.grantMessage).toEqual(grantMessage(item.grant));
            expect(item.grant.resource).toBe(behaviour);
            // Not a valid partial of that replica: the share it was checked against rejects it.
            const share = fixture!.local.cluster.replicas[item.replica - 1]!.publicKeyShare;
            let valid: boolean;
            try {
              valid = fixture!.local.cluster.backend.verify(
                share,
                item.grantMessage,
                fixture!.local.cluster.backend.decodeSignature(item.partial),
              );
            } catch {
              valid = false;
            }
            expect(valid).toBe(false);
          }
        }
      });
    }

    it('with f replicas reporting huge epochs, the epoch stays honest', async () => {
      const { result } = await acquireOk(await clusterWithFaulty(fixture!, liars, ['huge_epoch']), 'huge-epoch');
      expect(result.lease.epoch).toBe(1n);
    });

    if (f === 2) {
      it('with one silent and one lying replica', async () => {
        const { result } = await acquireOk(
          await clusterWithFaulty(fixture!, liars, ['silent', 'other_partial'], true),
          'mixed',
        );
        expect(result.faults.map((x) => x.replica)).toEqual([liars[1]]);
      });
    }

    it('with f replicas killed', async () => {
      await Promise.all(liars.map((index) => fixture!.local.replica(index).kill('SIGKILL')));
      const { result } = await acquireOk(fixture!.local.cluster, 'killed');
      expect(result.faults).toEqual([]);
    });

    if (f === 1) {
      // Killing one more leaves 2f: no quorum. Runs after the case above (vitest runs a file's tests in order).
      it('with f+1 replicas killed, returns unavailable promptly', async () => {
        await fixture!.local.replica(1).kill('SIGKILL');
        const client = await connect(fixture!, fixture!.local.cluster);
        const started = performance.now();
        const result = await client.acquire('no-quorum', { ttlMs: 5000, waitMs: 10_000 });
        expect(result.ok).toBe(false);
        if (!result.ok) expect(result.reason).toBe('unavailable');
        expect(performance.now() - started).toBeLessThan(1000);
      });
    }
  });
}

describe('Nothing hangs: a deadline or an abort ends an acquire that cannot finish', () => {
  let fixture: Fixture | undefined;
  beforeAll(async () => {
    fixture = await startFixture(4);
  }, 60_000);
  afterAll(async () => {
    await stopFixture(fixture);
  }, 60_000);

  it('f+1 replicas that never answer: timeout at the deadline', async () => {
    const client = await connect(fixture!, await clusterWithFaulty(fixture!, [3, 4], ['mute']));
    const started = performance.now();
    const result = await client.acquire('mute', { ttlMs: 5000, timeoutMs: 600 });
    const elapsed = performance.now() - started;
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.reason).toBe('timeout');
    expect(elapsed).toBeGreaterThanOrEqual(550);
    expect(elapsed).toBeLessThan(1500);
  });

  it('an abort ends the acquire at once, mid-round', async () => {
    const client = await connect(fixture!, await clusterWithFaulty(fixture!, [3, 4], ['mute']));
    const controller = new AbortController();
    const pending = client.acquire('mute-abort', { ttlMs: 5000, timeoutMs: 30_000, signal: controller.signal });
    setTimeout(() => controller.abort(), 100);
    const started = performance.now();
    const result = await pending;
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.reason).toBe('aborted');
    expect(performance.now() - started).toBeLessThan(600);
  });

  it('an already aborted signal returns aborted without asking anyone', async () => {
    const client = await connect(fixture!, fixture!.local.cluster);
    const result = await client.acquire('pre-aborted', { signal: AbortSignal.abort() });
    expect(result.ok === false && result.reason).toBe('aborted');
    const status = await client.status('pre-aborted');
    expect(status.epoch).toBe(0n);
  });
});
