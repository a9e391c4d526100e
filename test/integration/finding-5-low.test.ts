/**
 * Issue 16, finding 5 (low): small-order Ed25519 holder keys, an unbounded
 * guard log, half-closed sockets at the resource, error-level logs for a
 * client's own disconnect, and no per-address cap on unauthenticated sockets
 * at the replica (now a newcomer over it displaces its address's oldest:
 * issue 43, finding 9). Real processes on loopback, real LMDB.
 */
import { readdirSync, mkdtempSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ed25519 } from '@noble/curves/ed25519.js';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { WebSocket } from 'ws';
import { isUsableEd25519Key } from '../../src/common/ed25519.js';
import {
  dealLocalCluster,
  startLocalCluster,
  startLocalResource,
  type LocalCluster,
} from '../../src/cluster/launcher.js';
import { LmdbGuard } from '../../src/guard/lmdb-guard.js';
import { bodyDigest, verifyRequestProof } from '../../src/guard/proof.js';
import { CloseCode } from '../../src/protocol/messages.js';
import { newHolder, RawClient } from '../support/raw-client.js';
import { makeTokenFactory } from '../support/token-factory.js';

const factory = makeTokenFactory();
const root = mkdtempSync(join(tmpdir(), 'qf-finding5-'));
const clusterFile = factory.writeClusterFile(root);

/** The identity point's encoding and a signature that verifies under it for any message (cofactored rules). */
const SMALL_ORDER_KEY = Uint8Array.from({ length: 32 }, (_, i) => (i === 0 ? 1 : 0));
const FORGED_SIGNATURE = Uint8Array.from({ length: 64 }, (_, i) => (i === 0 ? 1 : 0));
/** y = p + 1: a non-canonical encoding (y >= p) that a lenient (ZIP-215) decoder accepts. */
const NON_CANONICAL_KEY = Uint8Array.from({ length: 32 }, (_, i) => (i === 0 ? 0xee : i === 31 ? 0x7f : 0xff));

afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

function until(check: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolve) => {
    const tick = () => {
      if (check()) return resolve(true);
      if (Date.now() > deadline) return resolve(false);
      setTimeout(tick, 50);
    };
    tick();
  });
}

const descriptors = (pid: number): number => readdirSync(`/proc/${pid}/fd`).length;

/** The descriptor count once it has not moved for 500 ms: earlier tests' sockets may still be closing. */
async function settledDescriptors(pid: number): Promise<number> {
  let last = descriptors(pid);
  for (let round = 0; round < 20; round++) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    const now = descriptors(pid);
    if (now === last) return now;
    last = now;
  }
  return last;
}

describe('finding 5: small-order and non-canonical Ed25519 holder keys', () => {
  test('the forged pair verifies under lenient rules, and isUsableEd25519Key refuses both keys', () => {
    // What made the attack work: a cofactored / ZIP-215 verifier accepts the pair for any message.
    expect(ed25519.verify(FORGED_SIGNATURE, Uint8Array.of(1, 2, 3), SMALL_ORDER_KEY)).toBe(true);
    expect(() => ed25519.Point.fromBytes(NON_CANONICAL_KEY, true)).not.toThrow();
    expect(isUsableEd25519Key(SMALL_ORDER_KEY)).toBe(false);
    expect(isUsableEd25519Key(NON_CANONICAL_KEY)).toBe(false);
    expect(isUsableEd25519Key(ed25519.getPublicKey(ed25519.utils.randomSecretKey()))).toBe(true);
  });

  test('the proof-of-possession guard refuses the forged proof (bad_proof) and changes nothing', async () => {
    const fields = {
      audience: '',
      tokenDigest: new Uint8Array(32),
      method: 'PUT',
      resource: 'finding5',
      key: 'k',
      bodyDigest: bodyDigest(new Uint8Array(0)),
      counter: 1n,
    };
    expect(verifyRequestProof(SMALL_ORDER_KEY, fields, FORGED_SIGNATURE)).toBe(false);
    const guard = await LmdbGuard.open(join(root, 'proof'), factory.cluster, { requireProof: true });
    try {
      const token = factory.issue({ resource: 'finding5', epoch: 1, holder: SMALL_ORDER_KEY });
      const result = await guard.write(
        {
          token: token.bytes,
          resource: 'finding5',
          key: 'k',
          op: 'put',
          proof: { method: 'PUT', bodyDigest: bodyDigest(new Uint8Array(0)), counter: 1n, signature: FORGED_SIGNATURE },
        },
        (tx) => tx.put('k', Uint8Array.of(1)),
      );
      expect(result).toMatchObject({ ok: false, reason: 'bad_proof' });
      expect(guard.barrier('finding5')).toBeUndefined();
      expect(guard.read('finding5', 'k')).toBeUndefined();
    } finally {
      await guard.close();
    }
  });

  describe('at the replica', () => {
    let cluster: LocalCluster;
    beforeAll(async () => {
      dealLocalCluster(join(root, 'keys'));
      cluster = await startLocalCluster({
        newStores: true,
        dir: join(root, 'keys'),
        indices: [1],
        dataRoot: join(root, 'replica-data'),
        extraArgs: ['--max-unauthenticated-per-address', '3'],
      });
    });
    afterAll(async () => {
      await cluster?.close();
    });

    test.each([
      ['small-order', SMALL_ORDER_KEY],
      ['non-canonical', NON_CANONICAL_KEY],
    ])('a hello with a %s key and the forged signature is refused with 1008', async (_label, holder) => {
      const client = await RawClient.connect(cluster.replica(1).url);
      client.send({ type: 'hello', id: 1, holder, signature: FORGED_SIGNATURE });
      const next = await client.next();
      expect(next).toMatchObject({ closed: { code: CloseCode.POLICY_VIOLATION } });
    });

    test('the same class at the replica: HTTP sockets whose head never ends are destroyed after authTimeoutMs (10 s)', async () => {
      const replica = cluster.replica(1);
      const baseline = await settledDescriptors(replica.pid);
      const sockets: Socket[] = [];
      try {
        for (let i = 0; i < 5; i++) {
          const socket = connect(replica.port, '127.0.0.1');
          socket.pause();
          socket.on('error', () => undefined);
          socket.write('GET /healthz HTTP/1.1\r\nhost: x\r\n'); // the head never ends
          sockets.push(socket);
        }
        expect(await until(() => descriptors(replica.pid) >= baseline + 5, 5_000)).toBe(true);
        expect(await until(() => descriptors(replica.pid) <= baseline, 15_000)).toBe(true);
      } finally {
        for (const socket of sockets) socket.destroy();
      }
    });

    test("per-address cap on unauthenticated sockets: the 4th from one address displaces that address's oldest; others and authenticated ones are not counted", async () => {
      const url = cluster.replica(1).url;
      const open = (localAddress = '127.0.0.1') =>
        new Promise<WebSocket>((resolve, reject) => {
          const socket = new WebSocket(url, { localAddress });
          socket.once('open', () => resolve(socket));
          socket.once('unexpected-response', (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
          socket.once('error', reject);
        });
      const closed = (socket: WebSocket) =>
        until(() => socket.readyState === WebSocket.CLOSED || socket.readyState === WebSocket.CLOSING, 5_000);
      const idle = [await open(), await open(), await open()];
      try {
        // Issue 43, finding 9: a newcomer is let in (no 503), and its own address pays for it with its oldest.
        idle.push(await open());
        expect(await closed(idle[0]!)).toBe(true);
        expect(idle.slice(1).map((s) => s.readyState)).toEqual([WebSocket.OPEN, WebSocket.OPEN, WebSocket.OPEN]);
        // Another address has its own allowance: nobody from 127.0.0.1 goes for it.
        const elsewhere = await open('127.0.0.2');
        await until(() => false, 200);
        expect(idle.slice(1).map((s) => s.readyState)).toEqual([WebSocket.OPEN, WebSocket.OPEN, WebSocket.OPEN]);
        elsewhere.terminate();
        // An authenticated connection stops counting: three idle ones and it, and nobody displaced.
        idle[1]!.terminate();
        await until(() => false, 200);
        const authenticated = await RawClient.open(url, newHolder());
        idle[1] = await open();
        expect(idle.slice(1).map((s) => s.readyState)).toEqual([WebSocket.OPEN, WebSocket.OPEN, WebSocket.OPEN]);
        idle.push(await open());
        expect(await closed(idle[2]!)).toBe(true);
        expect(await authenticated.status('r')).toMatchObject({ outcome: { status: 'ok' } });
        await authenticated.close();
      } finally {
        for (const socket of idle) socket.terminate();
      }
    });
  });
});

describe('finding 5: the guard log is bounded', () => {
  test('refused entries past maxRefusedLogEntries are dropped oldest first; accepted and conflict entries stay', async () => {
    const guard = await LmdbGuard.open(join(root, 'bounded'), factory.cluster, { maxRefusedLogEntries: 5 });
    try {
      const first = await guard.write({
        token: factory.issueText({ resource: 'r', epoch: 2 }),
        resource: 'r',
        op: 'put',
      });
      expect(first.ok).toBe(true);
      const other = factory.issue({ resource: 'r', epoch: 2, holder: newHolder().publicKey });
      expect(await guard.write({ token: other.bytes, resource: 'r', op: 'put' })).toMatchObject({ reason: 'conflict' });
      // Refusals that reach the log: a genuine token below the barrier (garbage tokens are never logged).
      for (let i = 0; i < 40; i++) {
        const stale = await guard.write({
          token: factory.issueText({ resource: 'r', epoch: 1 }),
          resource: 'r',
          op: 'put',
        });
        expect(stale).toMatchObject({ ok: false, reason: 'stale' });
      }
      expect(await guard.write({ token: 'garbage', resource: 'r', op: 'put' })).toMatchObject({ seq: null });
      const log = guard.readLog();
      expect(log.filter((e) => e.outcome === 'accepted')).toHaveLength(1);
      expect(log.filter((e) => e.outcome === 'conflict')).toHaveLength(1);
      const refused = log.filter((e) => !e.accepted && e.outcome !== 'conflict');
      expect(refused.map((e) => e.seq)).toEqual([38, 39, 40, 41, 42]);
      expect(guard.logRetention()).toEqual({ refusedKept: 5, refusedDropped: 35, maxRefused: 5 });
      expect(guard.lastSeq()).toBe(42);
    } finally {
      await guard.close();
    }
  });
});

describe('finding 5: the resource releases sockets of clients that stall or vanish', () => {
  test('ten clients that stop mid-request and never read or close release their descriptors promptly', async () => {
    const resource = await startLocalResource({
      clusterFile,
      dataDir: join(root, 'stalls'),
      extraArgs: ['--headers-timeout', '500ms', '--request-timeout', '1s'],
    });
    const sockets: Socket[] = [];
    try {
      const baseline = descriptors(resource.pid);
      const port = resource.port;
      for (let i = 0; i < 10; i++) {
        const socket = connect(port, '127.0.0.1');
        socket.pause(); // never reads
        socket.on('error', () => undefined);
        socket.write('PUT /kv/a/b HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n'); // the head never ends
        sockets.push(socket);
      }
      expect(await until(() => descriptors(resource.pid) >= baseline + 10, 5_000)).toBe(true);
      // headers timeout 0.5 s, checked every 100 ms: well within 5 s every descriptor is back.
      expect(await until(() => descriptors(resource.pid) <= baseline, 5_000)).toBe(true);
    } finally {
      for (const socket of sockets) socket.destroy();
      await resource.stop();
    }
  });

  test('a client that disconnects mid-body is logged at debug as its own doing, never at error', async () => {
    const resource = await startLocalResource({
      clusterFile,
      dataDir: join(root, 'vanish'),
      env: { QUORUMFENCE_LOG_LEVEL: 'debug' },
    });
    try {
      const token = factory.issueText({ resource: 'vanish', epoch: 1 });
      for (let i = 0; i < 5; i++) {
        const socket = connect(resource.port, '127.0.0.1');
        socket.on('error', () => undefined);
        await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
        socket.write(
          `PUT /kv/vanish/k HTTP/1.1\r\nhost: x\r\nauthorization: QuorumFence ${token}\r\ncontent-length: 1000\r\n\r\npartial`,
        );
        await until(() => false, 50);
        socket.destroy();
      }
      expect(
        await until(
          () => resource.logLines().filter((line) => line.msg === 'client disconnected mid-request').length === 5,
          5_000,
        ),
      ).toBe(true);
      expect(resource.logLines().filter((line) => Number(line.level) >= 50)).toEqual([]);
      const health = await fetch(`${resource.url}/healthz`);
      expect(health.status).toBe(200);
    } finally {
      await resource.stop();
    }
  });
});
