/**
 * The ceremony's transport against outsiders, over real sockets (issue 30,
 * finding 5): idle unauthenticated WebSockets and half-sent HTTP upgrades at
 * a member's public ceremony port do not keep the other members out, and the
 * ceremony ends with every member holding a share of one key; a connection
 * holds a member's place only after a hello signed by that member's node key
 * over a fresh challenge (refusals carry their code); a member's new
 * connection replaces its old one; what one member may send is bounded; a
 * place whose connection stops answering pings is freed. Issue 43, finding 3:
 * idle connections from many addresses (127.0.0.2-21) neither push out a
 * member whose hello is in flight nor abort a ceremony, however often they
 * reconnect.
 */
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { parseCluster } from '../../src/cluster/description.js';
import { parseReplicaKey, replicaKeyJson } from '../../src/cluster/replica-key.js';
import { decodeChallenge, encodeHello } from '../../src/ceremony/hello.js';
import { generateNodeKey, type NodeKey } from '../../src/ceremony/node-key.js';
import type { Proposal } from '../../src/ceremony/proposal.js';
import {
  framesAllowed,
  HEARTBEAT_MS,
  HANDSHAKE_TIMEOUT_MS,
  listenAddressOf,
  openWebSocketTransport,
  type CeremonyTransport,
} from '../../src/ceremony/transport.js';
import { proposalFor, runNetworkCeremony } from '../support/ceremony-net.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Resolves once `socket` has opened or closed (whichever comes first), bounded. */
function settled(socket: WebSocket, boundMs = 10_000): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, boundMs);
    const done = () => {
      clearTimeout(timer);
      resolve();
    };
    if (socket.readyState !== WebSocket.CONNECTING) return done();
    socket.once('open', done);
    socket.once('close', done);
    socket.once('error', done);
  });
}

/** Resolves once `socket` has closed, bounded; true when it did. */
function closedWithin(socket: WebSocket | Socket, boundMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const isClosed = socket instanceof WebSocket ? socket.readyState === WebSocket.CLOSED : socket.destroyed;
    if (isClosed) return resolve(true);
    const timer = setTimeout(() => resolve(false), boundMs);
    socket.once('close', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

interface Siege {
  idle: WebSocket[];
  partial: Socket[];
}

/**
 * An outsider at a member's ceremony port: `idle` WebSockets that upgrade and then say nothing (half of them from
 * another loopback address), and `partial` TCP connections that send an HTTP upgrade head one byte every 200 ms.
 */
async function besiege(url: string, idle: number, partial: number): Promise<Siege> {
  const { host, port } = listenAddressOf(url);
  const sockets = Array.from({ length: idle }, (_, k) =>
    new WebSocket(url, { perMessageDeflate: false, ...(k % 2 === 1 ? { localAddress: '127.0.0.2' } : {}) }).on(
      'error',
      () => undefined,
    ),
  );
  const head = `GET / HTTP/1.1\r\nHost: ${host}:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n`;
  const partials = Array.from({ length: partial }, () => {
    const socket = connect(port, host).on('error', () => undefined);
    let sent = 0;
    const trickle = setInterval(() => {
      if (socket.destroyed || sent >= head.length) return clearInterval(trickle);
      socket.write(head[sent++]!);
    }, 200);
    socket.once('close', () => clearInterval(trickle));
    return socket;
  });
  await Promise.all(sockets.map((s) => settled(s)));
  cleanups.push(() => {
    for (const s of sockets) s.terminate();
    for (const s of partials) s.destroy();
  });
  return { idle: sockets, partial: partials };
}

/**
 * An outsider with one idle WebSocket from each of `addresses` at `url`, reconnecting each one as soon as it is
 * closed (displaced, or timed out), until `stop()`; bounded in reconnections and time.
 */
function churn(url: string, addresses: readonly string[], maxOpens = 4000): { opened: () => number; stop: () => void } {
  let stopped = false;
  let opens = 0;
  const live = new Set<WebSocket>();
  const started = Date.now();
  const open = (localAddress: string) => {
    if (stopped || opens >= maxOpens || Date.now() - started > 120_000) return;
    opens++;
    const socket = new WebSocket(url, { perMessageDeflate: false, localAddress });
    live.add(socket);
    socket.on('error', () => undefined);
    socket.once('close', () => {
      live.delete(socket);
      setTimeout(() => open(localAddress), 5);
    });
  };
  for (const address of addresses) open(address);
  const stop = () => {
    stopped = true;
    for (const socket of live) socket.terminate();
  };
  cleanups.push(stop);
  return { opened: () => opens, stop };
}

/** 127.0.0.<from> .. 127.0.0.<to>: loopback addresses other than the members' 127.0.0.1. */
function loopbackAddresses(from: number, to: number): string[] {
  return Array.from({ length: to - from + 1 }, (_, k) => `127.0.0.${from + k}`);
}

describe('ceremony transport: outsiders cannot keep members out (finding 5)', () => {
  it('16, then 64 idle unauthenticated WebSockets and 16 half-sent upgrades at two members, before anyone dials them: every member ends with a share of one key', async () => {
    const sieges: Siege[] = [];
    for (const idle of [16, 64]) {
      const run = await runNetworkCeremony(4, {
        acceptTimeoutMs: 15_000,
        openFirst: [1, 2],
        beforeOthers: async (proposal) => {
          for (const member of [1, 2])
            sieges.push(await besiege(proposal.members[member - 1]!.ceremonyEndpoint, idle, 16));
        },
      });
      const outcomes = run.outcomes.map((o) => (o?.ok ? 'ok' : JSON.stringify(o)));
      expect(outcomes, `with ${idle} idle`).toEqual(['ok', 'ok', 'ok', 'ok']);
      const results = run.outcomes.map((o) => (o?.ok ? o.result : undefined)!);
      expect(new Set(results.map((r) => r.cluster.clusterId)).size).toBe(1);
      const cluster = parseCluster(results[0]!.cluster);
      results.forEach((r, k) =>
        parseReplicaKey(
          replicaKeyJson(cluster.idHex, {
            index: k + 1,
            scaledSecretShare: r.scaledSecretShare,
            publicKeyShare: new Uint8Array(),
          }),
          cluster,
        ),
      );
    }
    // And the outsider's connections do not outlive the handshake timeout (bounded wait, not a timing claim).
    const all = sieges.flatMap((s) => [...s.idle, ...s.partial]);
    const closed = await Promise.all(all.map((s) => closedWithin(s, HANDSHAKE_TIMEOUT_MS + 10_000)));
    expect(closed.filter((c) => !c)).toHaveLength(0);
  });
});

describe('ceremony transport: idle connections from many addresses (issue 43, finding 3)', () => {
  it('20 idle WebSockets from 127.0.0.2-21 do not push out a member whose hello is in flight', async () => {
    const { proposal, keys, frames, refused } = await lone();
    const member = await dial(proposal);
    const outsiders = loopbackAddresses(2, 21).map((localAddress) =>
      new WebSocket(proposal.members[0]!.ceremonyEndpoint, { perMessageDeflate: false, localAddress }).on(
        'error',
        () => undefined,
      ),
    );
    cleanups.push(() => outsiders.forEach((s) => s.terminate()));
    await Promise.all(outsiders.map((s) => settled(s)));
    // The waiting pool (4 x 4 places outside the reserved ones) overflowed: outsiders displaced outsiders.
    expect(outsiders.filter((s) => s.readyState !== WebSocket.OPEN).length).toBeGreaterThanOrEqual(4);
    expect(member.socket.readyState).toBe(WebSocket.OPEN);
    member.socket.send(encodeHello(proposal, 2, 1, member.challenge, (m) => keys[1]!.sign(m)));
    member.socket.send(new Uint8Array([7]));
    await until(() => frames.length === 1);
    expect(frames.map((f) => [...f])).toEqual([[7]]);
    expect(refused).toEqual([]);
  });

  it(
    'two idle connections from each of 127.0.0.2-17, reconnecting as soon as they close, at the first member from the moment it listens: the ceremony completes',
    { timeout: 90_000 },
    async () => {
      let siege: ReturnType<typeof churn> | undefined;
      const run = await runNetworkCeremony(4, {
        acceptTimeoutMs: 20_000,
        openFirst: [1],
        beforeOthers: async (proposal) => {
          // 32 connections for 16 waiting places: they keep displacing each other, and come back at once.
          const addresses = loopbackAddresses(2, 17);
          siege = churn(proposal.members[0]!.ceremonyEndpoint, [...addresses, ...addresses]);
          await until(() => siege!.opened() >= 64, 5000);
        },
      });
      siege?.stop();
      expect(run.outcomes.map((o) => (o?.ok ? 'ok' : JSON.stringify(o)))).toEqual(['ok', 'ok', 'ok', 'ok']);
      expect(new Set(run.outcomes.map((o) => (o?.ok ? o.result.cluster.clusterId : undefined))).size).toBe(1);
      // The siege really ran: its connections were displaced and came back.
      expect(siege!.opened()).toBeGreaterThanOrEqual(64);
    },
  );
});

/** One member's transport alone, and the keys to speak for the others. */
async function lone(): Promise<{
  proposal: Proposal;
  keys: NodeKey[];
  transport: CeremonyTransport;
  frames: Uint8Array[];
  refused: { reason: string; code: string }[];
}> {
  const keys = Array.from({ length: 4 }, () => generateNodeKey());
  const proposal = await proposalFor(keys);
  const transport = await openWebSocketTransport({ proposal, self: 1, nodeKey: keys[0]! });
  cleanups.push(() => transport.close());
  const frames: Uint8Array[] = [];
  const refused: { reason: string; code: string }[] = [];
  transport.onFrame((bytes) => frames.push(bytes));
  transport.onRefused((r) => refused.push(r));
  return { proposal, keys, transport, frames, refused };
}

/** Dials member 1 and waits for its challenge. */
async function dial(proposal: Proposal): Promise<{ socket: WebSocket; challenge: Uint8Array }> {
  const socket = new WebSocket(proposal.members[0]!.ceremonyEndpoint, { perMessageDeflate: false });
  socket.on('error', () => undefined);
  cleanups.push(() => socket.terminate());
  const first = await new Promise<Buffer>((resolve, reject) => {
    socket.once('message', (data) => resolve(data as Buffer));
    socket.once('close', () => reject(new Error('closed before the challenge')));
  });
  return { socket, challenge: decodeChallenge(new Uint8Array(first), proposal) };
}

/** Waits (bounded) until `check` holds. */
async function until(check: () => boolean, boundMs = 5000): Promise<void> {
  for (const started = Date.now(); !check() && Date.now() - started < boundMs;)
    await new Promise((r) => setTimeout(r, 20));
}

describe('ceremony transport: the hello', () => {
  it('garbage, another ceremony, a forged or replayed signature, or the listener itself: refused with its code, the connection closed, no frame delivered', async () => {
    const { proposal, keys, frames, refused } = await lone();
    const other = await proposalFor(keys);
    const outsider = generateNodeKey();
    const earlier = await dial(proposal);
    const replayed = encodeHello(proposal, 2, 1, earlier.challenge, (m) => keys[1]!.sign(m));
    const cases: { hello: (challenge: Uint8Array) => Uint8Array; code: string }[] = [
      { hello: () => new Uint8Array([1, 2, 3]), code: 'PROTOCOL_ERROR' },
      { hello: (c) => encodeHello(other, 2, 1, c, (m) => keys[1]!.sign(m)), code: 'CLUSTER_MISMATCH' },
      { hello: (c) => encodeHello(proposal, 2, 1, c, (m) => outsider.sign(m)), code: 'UNAUTHENTICATED' },
      // Signed for member 3 as the listener: not good at member 1.
      { hello: (c) => encodeHello(proposal, 2, 3, c, (m) => keys[1]!.sign(m)), code: 'UNAUTHENTICATED' },
      { hello: () => replayed, code: 'UNAUTHENTICATED' },
      { hello: (c) => encodeHello(proposal, 1, 1, c, (m) => keys[0]!.sign(m)), code: 'PROTOCOL_ERROR' },
      { hello: (c) => encodeHello(proposal, 9, 1, c, (m) => keys[1]!.sign(m)), code: 'PROTOCOL_ERROR' },
    ];
    for (const [k, { hello, code }] of cases.entries()) {
      const { socket, challenge } = await dial(proposal);
      socket.send(hello(challenge));
      socket.send(new Uint8Array([9, 9, 9]));
      expect(await closedWithin(socket, 5000), `case ${k}`).toBe(true);
      await until(() => refused.length > k);
      expect(refused[k]?.code, `case ${k}: ${refused[k]?.reason}`).toBe(code);
    }
    // One refusal per connection, whatever followed the hello on it.
    expect(refused).toHaveLength(cases.length);
    expect(frames).toHaveLength(0);
  });

  it("a member's valid hello holds its place and its frames arrive; its next connection replaces the first", async () => {
    const { proposal, keys, frames, refused } = await lone();
    const first = await dial(proposal);
    first.socket.send(encodeHello(proposal, 2, 1, first.challenge, (m) => keys[1]!.sign(m)));
    first.socket.send(new Uint8Array([1]));
    await until(() => frames.length === 1);
    expect(frames.map((f) => [...f])).toEqual([[1]]);
    const second = await dial(proposal);
    second.socket.send(encodeHello(proposal, 2, 1, second.challenge, (m) => keys[1]!.sign(m)));
    expect(await closedWithin(first.socket, 5000)).toBe(true);
    second.socket.send(new Uint8Array([2]));
    await until(() => frames.length === 2);
    expect(frames.map((f) => [...f])).toEqual([[1], [2]]);
    expect(refused).toEqual([]);
  });

  it('what one member may send over the whole ceremony is bounded, across its connections', async () => {
    const { proposal, keys, frames } = await lone();
    const allowed = framesAllowed(proposal);
    const { socket, challenge } = await dial(proposal);
    socket.send(encodeHello(proposal, 3, 1, challenge, (m) => keys[2]!.sign(m)));
    for (let k = 0; k <= allowed; k++) socket.send(new Uint8Array([k & 0xff]));
    expect(await closedWithin(socket, 5000)).toBe(true);
    expect(frames).toHaveLength(allowed);
    // A new connection of the same member gets no more.
    const again = await dial(proposal);
    again.socket.send(encodeHello(proposal, 3, 1, again.challenge, (m) => keys[2]!.sign(m)));
    again.socket.send(new Uint8Array([0]));
    expect(await closedWithin(again.socket, 5000)).toBe(true);
    expect(frames).toHaveLength(allowed);
  });

  it('a place whose connection answers no ping is freed; one that answers keeps it', { timeout: 60_000 }, async () => {
    const { proposal, keys } = await lone();
    const silent = await dial(proposal);
    silent.socket.send(encodeHello(proposal, 2, 1, silent.challenge, (m) => keys[1]!.sign(m)));
    const alive = await dial(proposal);
    alive.socket.send(encodeHello(proposal, 3, 1, alive.challenge, (m) => keys[2]!.sign(m)));
    // Stop reading: pings go unanswered.
    const raw = (silent.socket as unknown as { _socket: Socket })._socket;
    await new Promise((r) => setTimeout(r, 200));
    raw.pause();
    await new Promise((r) => setTimeout(r, 4 * HEARTBEAT_MS));
    raw.resume();
    expect(await closedWithin(silent.socket, 5000)).toBe(true);
    expect(alive.socket.readyState).toBe(WebSocket.OPEN);
  });
});
