/**
 * The SDK's replica connection over an injected transport and clock (replica-transport.ts): the seam the simulator
 * runs it through. A scripted transport plays the replica's side with the real codec, and a manual clock moves the
 * handshake deadline and the reconnect backoff.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/common/clock.js';
import { identityFromSecretKey } from '../../src/client/identity.js';
import { resolveClientOptions } from '../../src/client/options.js';
import type { ReplicaFault } from '../../src/client/evidence.js';
import { ReplicaConnection } from '../../src/client/replica-connection.js';
import type { LinkEvents, ReplicaLink, ReplicaTransport } from '../../src/client/replica-transport.js';
import { decodeClientMessage, encodeMessage } from '../../src/protocol/codec.js';
import { CloseCode, type ServerMessage } from '../../src/protocol/messages.js';
import { admitsRequest, helloVerifies } from '../../src/replica/connections.js';
import { TokenBucket } from '../../src/common/token-bucket.js';

const CLUSTER_ID = new Uint8Array(32).fill(7);
const NONCE = new Uint8Array(32).fill(9);
const SESSION = new Uint8Array(16).fill(3);

interface ScriptedLink extends ReplicaLink {
  readonly events: LinkEvents;
  readonly sent: Uint8Array[];
  closedWith: number | undefined;
  opened: boolean;
}

/** A transport whose links the test drives: it records what the connection sends and closes. */
function scriptedTransport(): { transport: ReplicaTransport; links: ScriptedLink[] } {
  const links: ScriptedLink[] = [];
  const transport: ReplicaTransport = {
    connect(_endpoint, _options, events) {
      const link: ScriptedLink = {
        events,
        sent: [],
        closedWith: undefined,
        opened: false,
        get isOpen() {
          return this.opened && this.closedWith === undefined;
        },
        send(frame) {
          this.sent.push(frame);
        },
        ping() {},
        close(code) {
          this.closedWith = code;
        },
      };
      links.push(link);
      return link;
    },
  };
  return { transport, links };
}

function setup() {
  const clock = new ManualClock(1_000);
  const { transport, links } = scriptedTransport();
  const identity = identityFromSecretKey(new Uint8Array(32).fill(1));
  const faults: ReplicaFault[] = [];
  const options = resolveClientOptions({
    clock,
    random: () => 0.5,
    handshakeTimeoutMs: 300,
    reconnectBaseMs: 20,
    reconnectMaxMs: 100,
    pingIntervalMs: 0,
  });
  const connection = new ReplicaConnection(
    { index: 2, endpoint: 'sim://r2' },
    {
      clusterId: CLUSTER_ID,
      identity,
      session: SESSION,
      options,
      transport,
      onChange: () => undefined,
      onFault: (fault) => faults.push(fault),
    },
  );
  const say = (link: ScriptedLink, message: ServerMessage) => link.events.frame(encodeMessage(message));
  return { clock, links, identity, faults, connection, say };
}

describe('ReplicaConnection over an injected transport', () => {
  it('runs the real handshake (challenge, a hello that the server check verifies, welcome), then a request', async () => {
    const { links, identity, connection, say } = setup();
    connection.start();
    expect(links).toHaveLength(1);
    const link = links[0]!;
    link.opened = true;
    link.events.open();
    say(link, { type: 'challenge', nonce: NONCE, clusterId: CLUSTER_ID, replica: 2 });
    const hello = decodeClientMessage(link.sent[0]!);
    expect(hello.type).toBe('hello');
    if (hello.type !== 'hello') return;
    expect(hello.holder).toEqual(identity.publicKey);
    expect(hello.session).toEqual(SESSION);
    expect(helloVerifies(hello, NONCE, CLUSTER_ID, 2)).toBe(true);
    expect(helloVerifies(hello, new Uint8Array(32), CLUSTER_ID, 2)).toBe(false);
    say(link, { type: 'welcome', id: hello.id, replica: 2, floor: 40n });
    expect(connection.state).toMatchObject({ phase: 'ready', floor: 40n });

    const answer = connection.request<'status'>({ type: 'status', resource: 'r' }, 1_000);
    expect(connection.openRequests).toBe(1);
    const request = decodeClientMessage(link.sent[1]!);
    expect(request).toMatchObject({ type: 'status', resource: 'r' });
    say(link, { type: 'reply', id: request.id, outcome: { status: 'ok', epoch: 3n, leased: false, remainingMs: 0 } });
    expect(await answer).toMatchObject({ kind: 'reply', outcome: { status: 'ok', epoch: 3n } });
    expect(connection.openRequests).toBe(0);
  });

  it('a challenge for another cluster is a fault: the link closes with 1002, and the retry opens a new one on the clock', () => {
    const { clock, links, faults, connection, say } = setup();
    connection.start();
    const link = links[0]!;
    link.opened = true;
    link.events.open();
    say(link, { type: 'challenge', nonce: NONCE, clusterId: new Uint8Array(32).fill(8), replica: 2 });
    expect(faults).toEqual([expect.objectContaining({ replica: 2, kind: 'bad_challenge' })]);
    expect(link.closedWith).toBe(CloseCode.PROTOCOL_ERROR);
    expect(link.sent).toHaveLength(0);
    expect(connection.state.phase).toBe('backoff');
    // The first retry waits between half and all of reconnectBaseMs (20 ms; random 0.5: 15 ms), on the manual clock.
    clock.advance(14);
    expect(links).toHaveLength(1);
    clock.advance(1);
    expect(links).toHaveLength(2);
    expect(connection.state.phase).toBe('connecting');
  });

  it('the handshake deadline runs on the injected clock: no welcome in handshakeTimeoutMs fails the attempt', async () => {
    const { clock, links, connection } = setup();
    connection.start();
    links[0]!.opened = true;
    links[0]!.events.open();
    clock.advance(299);
    expect(connection.state.phase).toBe('awaiting_challenge');
    clock.advance(1);
    expect(connection.state).toMatchObject({ phase: 'backoff', lastFailure: { kind: 'handshake_timeout' } });
    expect(links[0]!.closedWith).toBe(CloseCode.NORMAL);
    expect(await connection.request<'status'>({ type: 'status', resource: 'r' }, 100)).toMatchObject({
      kind: 'unreachable',
    });
  });

  it('a text frame is a protocol fault; a close from the replica fails what is in flight as unreachable', async () => {
    const { links, faults, connection, say } = setup();
    connection.start();
    const link = links[0]!;
    link.opened = true;
    link.events.open();
    say(link, { type: 'challenge', nonce: NONCE, clusterId: CLUSTER_ID, replica: 2 });
    say(link, { type: 'welcome', id: 0, replica: 2 });
    const pending = connection.request<'status'>({ type: 'status', resource: 'r' }, 1_000);
    link.events.close(1006, '');
    expect(await pending).toMatchObject({ kind: 'unreachable' });
    expect(connection.state.lastFailure?.kind).toBe('closed');

    const second = setup();
    second.connection.start();
    const other = second.links[0]!;
    other.opened = true;
    other.events.open();
    other.events.frame('hello');
    expect(second.faults).toEqual([expect.objectContaining({ kind: 'protocol' })]);
    expect(faults).toHaveLength(0);
  });
});

describe('the server checks the simulator shares (src/replica/connections.ts)', () => {
  it('admitsRequest: the in-flight bound (a quiet release passes it) and the token bucket', () => {
    const connection = { inFlight: 2, requests: new TokenBucket(1, 2, 0), leasesRequests: new TokenBucket(1, 1, 0) };
    const limits = { maxInFlightPerConnection: 2 };
    const status = { type: 'status', id: 1, resource: 'r' } as const;
    expect(admitsRequest(connection, status, limits, 0)).toBe(false);
    const quiet = { type: 'release', id: 2, resource: 'r', epoch: 1n, quiet: true } as const;
    expect(admitsRequest(connection, quiet, limits, 0)).toBe(true);
    connection.inFlight = 0;
    expect(admitsRequest(connection, status, limits, 0)).toBe(true);
    expect(admitsRequest(connection, status, limits, 0)).toBe(false);
    expect(admitsRequest(connection, status, limits, 1_000)).toBe(true);
  });
});
