/**
 * The dispatch both the server and the simulator run (src/replica/dispatch.ts): a real ReplicaService over a real
 * LMDB signing record in a temporary directory, and a host that records every frame it is asked to send. Replies,
 * none to a quiet release, `released` notices to the connections told a resource is held, REPLICA_FROZEN as
 * itself, any other failure INTERNAL (and the dispatch still serving), an answer no longer wanted never sent.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { QuorumFenceError } from '../../src/common/errors.js';
import { ManualClock } from '../../src/common/clock.js';
import { loadBackend } from '../../src/crypto/load.js';
import type { LeasesOutcome, Outcome, ServerMessage, WireRequest } from '../../src/protocol/messages.js';
import {
  afterFailure,
  afterOutcome,
  RequestDispatch,
  type DispatchedConnection,
  type DispatchHost,
  type RequestWatch,
} from '../../src/replica/dispatch.js';
import { ReleaseWatchers } from '../../src/replica/release-notices.js';
import { ReplicaService } from '../../src/replica/service.js';
import { inThreadSigner, type PartialSigner } from '../../src/replica/signer.js';
import { SigningRecord } from '../../src/replica/signing-record.js';
import { dealCluster, testPolicy } from '../support/dealt-cluster.js';

const backend = loadBackend();
const dealt = dealCluster(4, backend);
const config = testPolicy(dealt.cluster);
const alice = new Uint8Array(32).fill(1);
const bob = new Uint8Array(32).fill(2);
const R = 'orders/1';

interface TestConnection extends DispatchedConnection {
  readonly name: string;
  /** Every frame sent to it, answers and pushes alike, in order. */
  readonly frames: ServerMessage[];
}

function connection(name: string): TestConnection {
  return { name, session: `${name}-session`, closed: new AbortController(), frames: [] };
}

/** What the host heard through a request's watch. */
interface Heard {
  readonly answered: (Outcome | LeasesOutcome)[];
  readonly failed: unknown[];
  settled: number;
}

/** A host that records: frames go to the connection's list; `wanted` is the test's switch. */
class RecordingHost implements DispatchHost<TestConnection> {
  readonly #watchers = new ReleaseWatchers<TestConnection>(16, 16);
  readonly heard: Heard = { answered: [], failed: [], settled: 0 };
  wanted = true;
  /** Resolves `settle()`'s promises as requests settle. */
  #onSettled: (() => void)[] = [];

  constructor(readonly svc: ReplicaService) {}

  service(): ReplicaService {
    return this.svc;
  }
  watchers(): ReleaseWatchers<TestConnection> {
    return this.#watchers;
  }
  push(connection: TestConnection, message: ServerMessage): void {
    connection.frames.push(message);
  }
  evidenceBudget(): () => boolean {
    return () => false;
  }
  begin(): RequestWatch {
    return {
      wanted: () => this.wanted,
      answered: (outcome) => this.heard.answered.push(outcome),
      failed: (error) => this.heard.failed.push(error),
      settled: () => {
        this.heard.settled++;
        for (const resolve of this.#onSettled.splice(0)) resolve();
      },
    };
  }
  /** Resolves once the next request settles. */
  settle(): Promise<void> {
    return new Promise((resolve) => this.#onSettled.push(resolve));
  }
  get watched(): number {
    return this.#watchers.size;
  }
}

const root = mkdtempSync(join(tmpdir(), 'qf-dispatch-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const opened: SigningRecord[] = [];
afterEach(async () => {
  for (const store of opened.splice(0)) await store.close();
});

let dirs = 0;
function setUp(signer: PartialSigner = inThreadSigner(backend, dealt.secretKeys[0]!)) {
  const store = SigningRecord.open(
    join(root, `r${++dirs}`),
    { clusterId: dealt.cluster.id, replicaIndex: 1 },
    { probe: false, create: true },
  );
  opened.push(store);
  const service = new ReplicaService({ store, signer, clock: new ManualClock(1_000), policy: config });
  const host = new RecordingHost(service);
  const dispatch = new RequestDispatch(host);
  /** Dispatches and waits until the request settled; its reply or error goes to the connection's frames. */
  const send = async (from: TestConnection, holder: Uint8Array, request: WireRequest): Promise<void> => {
    const settled = host.settle();
    dispatch.dispatch(from, request, holder, (message) => from.frames.push(message));
    await settled;
  };
  return { store, host, dispatch, send };
}

const acquire = (id: number, epoch: bigint): WireRequest => ({
  type: 'acquire',
  id,
  resource: R,
  epoch,
  ttlMs: 30_000,
});
const release = (id: number, epoch: bigint, quiet?: true): WireRequest => ({
  type: 'release',
  id,
  resource: R,
  epoch,
  ...(quiet ? { quiet } : {}),
});

describe('dispatch: replies and notices', () => {
  it('answers a request with a reply naming its id, and the host hears the outcome first', async () => {
    const { host, send } = setUp();
    const a = connection('a');
    await send(a, alice, acquire(7, 1n));
    expect(a.frames).toMatchObject([{ type: 'reply', id: 7, outcome: { status: 'granted' } }]);
    expect(host.heard.answered).toMatchObject([{ status: 'granted' }]);
    expect(host.heard.settled).toBe(1);
  });

  it('a quiet release gets no reply, yet is done: the lease ends and its watchers are told', async () => {
    const { host, send } = setUp();
    const a = connection('a');
    const b = connection('b');
    await send(a, alice, acquire(1, 1n));
    await send(b, bob, acquire(2, 2n));
    expect(b.frames).toMatchObject([{ type: 'reply', id: 2, outcome: { status: 'busy' } }]);
    a.frames.length = 0;
    b.frames.length = 0;
    await send(a, alice, release(3, 1n, true));
    expect(a.frames).toEqual([]);
    expect(host.heard.answered.at(-1)).toMatchObject({ status: 'released' });
    expect(b.frames).toEqual([{ type: 'released', resource: R }]);
    await send(b, bob, acquire(4, 2n));
    expect(b.frames.at(-1)).toMatchObject({ type: 'reply', id: 4, outcome: { status: 'granted' } });
  });

  it('a busy acquire makes its connection a watcher; a release answers and announces to it, once', async () => {
    const { host, send } = setUp();
    const a = connection('a');
    const b = connection('b');
    await send(a, alice, acquire(1, 1n));
    expect(host.watched).toBe(0);
    await send(b, bob, acquire(2, 2n));
    expect(host.watched).toBe(1);
    await send(a, alice, release(3, 1n));
    expect(a.frames.at(-1)).toMatchObject({ type: 'reply', id: 3, outcome: { status: 'released' } });
    expect(b.frames).toEqual([
      { type: 'reply', id: 2, outcome: expect.objectContaining({ status: 'busy' }) as unknown },
      { type: 'released', resource: R },
    ]);
    expect(host.watched).toBe(0);
    // The watchers were taken: a second release (of a new lease) tells nobody who was not told it is held.
    await send(a, alice, acquire(4, 3n));
    await send(a, alice, release(5, 3n));
    expect(b.frames).toHaveLength(2);
  });

  it('a status showing a running lease makes a watcher too', async () => {
    const { host, send } = setUp();
    const a = connection('a');
    const b = connection('b');
    await send(a, alice, acquire(1, 1n));
    await send(b, bob, { type: 'status', id: 2, resource: R });
    expect(b.frames).toMatchObject([{ type: 'reply', id: 2, outcome: { status: 'ok', leased: true } }]);
    expect(host.watched).toBe(1);
  });

  it('answers `leases` at once, from memory, and the host hears it', () => {
    const { host, dispatch } = setUp();
    const a = connection('a');
    dispatch.dispatch(a, { type: 'leases', id: 9, limit: 10 }, alice, (message) => a.frames.push(message));
    expect(a.frames).toMatchObject([{ type: 'reply', id: 9, outcome: { status: 'leases' } }]);
    expect(host.heard.answered).toHaveLength(1);
    expect(host.heard.settled).toBe(1);
  });
});

describe('dispatch: failures', () => {
  it('a frozen record answers REPLICA_FROZEN, not INTERNAL, and is no failure to report', async () => {
    const { store, host, send } = setUp();
    await store.freeze('test reshare');
    const a = connection('a');
    await send(a, alice, acquire(1, 1n));
    expect(a.frames).toEqual([
      { type: 'error', id: 1, code: 'REPLICA_FROZEN', message: expect.any(String) as unknown },
    ]);
    expect(host.heard.failed).toEqual([]);
    expect(host.heard.settled).toBe(1);
  });

  it('any other failure answers INTERNAL, is reported, and the dispatch goes on serving', async () => {
    let failing = true;
    const real = inThreadSigner(backend, dealt.secretKeys[0]!);
    const signer: PartialSigner = {
      workers: 0,
      sign: (message) => (failing ? Promise.reject(new Error('the signing thread died')) : real.sign(message)),
      close: () => real.close(),
    };
    const { host, send } = setUp(signer);
    const a = connection('a');
    await send(a, alice, acquire(1, 1n));
    // A plain error's text does not leave the replica.
    expect(a.frames).toEqual([{ type: 'error', id: 1, code: 'INTERNAL', message: 'internal error' }]);
    expect(host.heard.failed).toHaveLength(1);
    expect(host.heard.settled).toBe(1);
    failing = false;
    await send(a, alice, acquire(2, 2n));
    expect(a.frames.at(-1)).toMatchObject({ type: 'reply', id: 2, outcome: { status: 'granted' } });
  });

  it('an answer no longer wanted is not sent, nor are its notices, and the request still settles', async () => {
    const { host, dispatch, send } = setUp();
    const a = connection('a');
    const b = connection('b');
    await send(a, alice, acquire(1, 1n));
    const settled = host.settle();
    dispatch.dispatch(b, acquire(2, 2n), bob, (message) => b.frames.push(message));
    host.wanted = false; // the process that took it is gone before the service answers
    await settled;
    expect(b.frames).toEqual([]);
    expect(host.watched).toBe(0);
    expect(host.heard.answered).toHaveLength(1); // the first acquire's only
    expect(host.heard.settled).toBe(2);
  });
});

describe('dispatch: the frames an outcome or a failure makes (pure)', () => {
  it('afterOutcome: a reply unless quiet, and the notice duty', () => {
    const released: Outcome = { status: 'released' };
    expect(afterOutcome({ type: 'release', id: 1, resource: R, epoch: 1n, quiet: true }, released)).toEqual({
      reply: undefined,
      notice: 'announce',
    });
    expect(afterOutcome({ type: 'release', id: 1, resource: R, epoch: 1n }, released)).toEqual({
      reply: { type: 'reply', id: 1, outcome: released },
      notice: 'announce',
    });
  });

  it('afterFailure: REPLICA_FROZEN as itself; INTERNAL naming only a QuorumFenceError code', () => {
    const request = { type: 'status', id: 4, resource: R } as const;
    expect(afterFailure(request, new QuorumFenceError('REPLICA_FROZEN', 'frozen for a reshare'))).toEqual({
      frame: { type: 'error', id: 4, code: 'REPLICA_FROZEN', message: 'frozen for a reshare' },
      unexpected: false,
    });
    expect(afterFailure(request, new QuorumFenceError('IO_ERROR', 'disk /secret/path failed'))).toEqual({
      frame: { type: 'error', id: 4, code: 'INTERNAL', message: 'IO_ERROR' },
      unexpected: true,
    });
    expect(afterFailure(request, new Error('secret detail')).frame.message).toBe('internal error');
  });
});
