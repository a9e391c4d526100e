/**
 * S2 across compaction (issue 18): a real replica service on a real LMDB
 * signing record, driven by random interleavings of acquires (at raw epochs
 * and at the next epoch a replica reports), renews, releases, clock advances,
 * compactions, restarts, and export/import into a fresh data directory.
 * Whatever the order: no (resource, epoch) is ever signed for two holders,
 * and every new grant of a resource is above every epoch it had before, so a
 * compacted resource's next grant is above the epochs it lost with its record.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { toHex } from '../../src/common/bytes.js';
import { ManualClock } from '../../src/common/clock.js';
import { loadBackend } from '../../src/crypto/load.js';
import type { Outcome, Request } from '../../src/protocol/messages.js';
import { OPEN_ACCESS } from '../../src/replica/access.js';
import { exportInterchange, parseInterchange } from '../../src/replica/interchange.js';
import { decide, type PolicyConfig } from '../../src/replica/policy.js';
import { ReplicaService } from '../../src/replica/service.js';
import { inThreadSigner } from '../../src/replica/signer.js';
import { SigningRecord, type StoreIdentity } from '../../src/replica/signing-record.js';
import { chooseEpoch } from '../../src/client/epoch-choice.js';
import { dealCluster } from '../support/dealt-cluster.js';

const backend = loadBackend();
const dealt = dealCluster(4, backend);
const identity: StoreIdentity = { clusterId: dealt.cluster.id, replicaIndex: 1 };
const policy: PolicyConfig = {
  clusterId: dealt.cluster.id,
  minTtlMs: 10,
  maxTtlMs: 200,
  freeEpochStep: 6n,
  maxEpochStep: 6n,
  faultTolerance: 1,
  access: OPEN_ACCESS,
};
const RETENTION_MS = 100;
const holders = [1, 2, 3].map((k) => new Uint8Array(32).fill(k));
const resources = ['orders/1', 'orders/2', 'orders/3', 'ü/✓'];
const root = mkdtempSync(join(tmpdir(), 'qf-compaction-'));

afterAll(() => rmSync(root, { recursive: true, force: true }));

type Command =
  | { kind: 'acquire'; holder: number; resource: number; epoch: bigint; ttlMs: number }
  | { kind: 'acquireNext'; holder: number; resource: number; ahead: bigint; ttlMs: number }
  | { kind: 'renew' | 'release'; holder: number; resource: number; epoch: bigint }
  | { kind: 'advance'; ms: number }
  | { kind: 'compact' }
  | { kind: 'restart' }
  | { kind: 'moveByExport' };

const holderArb = fc.integer({ min: 0, max: holders.length - 1 });
const resourceArb = fc.integer({ min: 0, max: resources.length - 1 });
const commandArb: fc.Arbitrary<Command> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('acquire' as const),
      holder: holderArb,
      resource: resourceArb,
      epoch: fc.bigInt({ min: 1n, max: 20n }),
      ttlMs: fc.integer({ min: 10, max: 200 }),
    }),
  },
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('acquireNext' as const),
      holder: holderArb,
      resource: resourceArb,
      ahead: fc.bigInt({ min: 0n, max: 2n }),
      ttlMs: fc.integer({ min: 10, max: 200 }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constantFrom('renew' as const, 'release' as const),
      holder: holderArb,
      resource: resourceArb,
      epoch: fc.bigInt({ min: 1n, max: 20n }),
    }),
  },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 1, max: 300 }) }) },
  { weight: 2, arbitrary: fc.constant({ kind: 'compact' as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'restart' as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'moveByExport' as const }) },
);

let runs = 0;

/** One replica whose store can be restarted and moved, on fake monotonic and wall clocks. */
class Replica {
  dir: string;
  wall = 1_700_000_000_000;
  clock = new ManualClock(1_000);
  store: SigningRecord;
  service: ReplicaService;
  readonly #signer = inThreadSigner(backend, dealt.secretKeys[0]!);

  constructor() {
    this.dir = join(root, `run-${runs++}`);
    this.store = this.#open(this.dir);
    this.service = this.#serve();
  }

  #open(dir: string): SigningRecord {
    return SigningRecord.open(dir, identity, { probe: false, wallClock: () => this.wall, create: true });
  }

  #serve(): ReplicaService {
    return new ReplicaService({
      store: this.store,
      signer: this.#signer,
      clock: this.clock,
      policy,
      retentionMs: RETENTION_MS,
      compactionBatch: 2,
      wallClock: () => this.wall,
    });
  }

  async restart(): Promise<void> {
    await this.store.close();
    this.clock = new ManualClock(5_000);
    this.store = this.#open(this.dir);
    this.service = this.#serve();
  }

  /** Export, then import into an empty data directory and serve from there (moving a replica). */
  async moveByExport(): Promise<void> {
    const document = JSON.parse(JSON.stringify(exportInterchange(this.store))) as unknown;
    await this.store.close();
    const { entries, floor } = parseInterchange(document, identity.clusterId);
    this.dir = join(root, `run-${runs++}`);
    this.clock = new ManualClock(9_000);
    this.store = this.#open(this.dir);
    await this.store.raiseFrom(entries, floor);
    this.service = this.#serve();
  }
}

/** Every grant observed: `${resource} ${epoch}` → holder hex; and per resource the highest epoch granted. */
class Ledger {
  readonly #signed = new Map<string, string>();
  readonly #highest = new Map<string, bigint>();

  granted(resource: string, epoch: bigint, holder: Uint8Array): void {
    const key = `${resource} ${epoch}`;
    const previous = this.#signed.get(key);
    if (previous !== undefined) {
      expect(previous, `(${resource}, ${epoch}) signed for two holders`).toBe(toHex(holder));
      return;
    }
    const highest = this.#highest.get(resource) ?? 0n;
    expect(epoch > highest, `${resource}: new grant at ${epoch} not above earlier ${highest}`).toBe(true);
    this.#signed.set(key, toHex(holder));
    this.#highest.set(resource, epoch);
  }
}

async function apply(replica: Replica, ledger: Ledger, command: Command): Promise<void> {
  switch (command.kind) {
    case 'advance':
      replica.clock.advance(command.ms);
      replica.wall += command.ms;
      return;
    case 'compact':
      await replica.service.compact();
      return;
    case 'restart':
      await replica.restart();
      return;
    case 'moveByExport':
      await replica.moveByExport();
      return;
    case 'acquire':
    case 'acquireNext':
    case 'renew':
    case 'release': {
      const resource = resources[command.resource]!;
      const holder = holders[command.holder]!;
      let request: Request;
      if (command.kind === 'acquireNext') {
        const status = await replica.service.handle({ type: 'status', id: 1, resource }, holder);
        if (status.status !== 'ok') throw new Error(`status answered ${status.status}`);
        request = { type: 'acquire', id: 2, resource, epoch: status.epoch + 1n + command.ahead, ttlMs: command.ttlMs };
      } else if (command.kind === 'acquire') {
        request = { type: 'acquire', id: 2, resource, epoch: command.epoch, ttlMs: command.ttlMs };
      } else if (command.kind === 'renew') {
        request = { type: 'renew', id: 3, resource, epoch: command.epoch, ttlMs: 100 };
      } else {
        request = { type: 'release', id: 4, resource, epoch: command.epoch };
      }
      const outcome: Outcome = await replica.service.handle(request, holder);
      if (outcome.status === 'granted' && request.type === 'acquire') ledger.granted(resource, request.epoch, holder);
      return;
    }
  }
}

describe('S2 across compaction: one holder per (resource, epoch), epochs only rise', () => {
  it('holds over random grants, releases, lease ends, compactions, restarts and export/import', async () => {
    let compactedSomething = false;
    await fc.assert(
      fc.asyncProperty(fc.array(commandArb, { minLength: 10, maxLength: 60 }), async (commands) => {
        const replica = new Replica();
        const ledger = new Ledger();
        try {
          for (const command of commands) await apply(replica, ledger, command);
          if (replica.store.floor > 0n) compactedSomething = true;
        } finally {
          await replica.store.close();
          rmSync(replica.dir, { recursive: true, force: true });
        }
      }),
      { numRuns: 40 },
    );
    // The property above must have exercised the floor, not only stores that never compacted.
    expect(compactedSomething).toBe(true);
  }, 120_000);

  it('compacts only records whose lease ended and whose retention passed, and the floor stands for them', async () => {
    const replica = new Replica();
    try {
      const [alice, bob] = holders as [Uint8Array, Uint8Array];
      const grant = (resource: string, epoch: bigint, holder: Uint8Array) =>
        replica.service.handle({ type: 'acquire', id: 1, resource, epoch, ttlMs: 150 }, holder);
      expect((await grant('a', 5n, alice)).status).toBe('granted');
      expect((await grant('b', 2n, alice)).status).toBe('granted');
      replica.clock.advance(160);
      replica.wall += 160;
      expect((await grant('b', 3n, bob)).status).toBe('granted'); // b's lease runs again
      const first = await replica.service.compact();
      expect(first).toMatchObject({ compacted: 1, floor: 5n, records: 1 }); // only a
      expect(await replica.service.handle({ type: 'status', id: 2, resource: 'a' }, bob)).toEqual({
        status: 'ok',
        epoch: 5n,
        leased: false,
        remainingMs: 0,
      });
      // Never signed before, but the floor covers it: stale with the floor, so the next try succeeds at once. Every
      // acquire answer names the floor too (docs/protocol.md, "Epoch choice").
      expect(await grant('new', 3n, bob)).toEqual({ status: 'stale', epoch: 5n, floor: 5n });
      expect((await grant('new', 6n, bob)).status).toBe('granted');
      // The same for a: a resend of its compacted grant is refused, not signed again.
      expect(await grant('a', 5n, alice)).toEqual({ status: 'stale', epoch: 5n, floor: 5n });
      expect(await grant('a', 5n + policy.maxEpochStep + 1n, alice)).toEqual({
        status: 'too_far',
        epoch: 5n,
        floor: 5n,
      });
      await replica.restart();
      expect(replica.store.floor).toBe(5n);
      expect(replica.store.openedWith.resources).toBe(2);
      // After a restart every record's lease runs for maxTtl: nothing is compacted before it ends.
      replica.wall += 10 * RETENTION_MS;
      expect((await replica.service.compact()).compacted).toBe(0);
      replica.clock.advance(policy.maxTtlMs);
      expect(await replica.service.compact()).toMatchObject({ compacted: 2, floor: 6n, records: 0 });
      expect(replica.service.leases.size).toBe(0);
    } finally {
      await replica.store.close();
    }
  });
});

describe('false floors from Byzantine replicas', () => {
  it('f answers at 0 or 2^63-1 cannot move the client outside what every honest replica grants', () => {
    const f = 1;
    fc.assert(
      fc.property(
        fc.bigInt({ min: 0n, max: 1n << 40n }),
        fc.array(fc.constantFrom(0n, (1n << 63n) - 1n, 1n), { minLength: f, maxLength: f }),
        (honestFloor, lies) => {
          // Three honest replicas with the same floor and no record of the resource; one liar.
          const answers = [honestFloor, honestFloor, honestFloor, ...lies];
          const epoch = chooseEpoch(answers, f);
          const request: Request = { type: 'acquire', id: 1, resource: 'r', epoch, ttlMs: 100 };
          const decision = decide(undefined, request, holders[0]!, 0, policy, honestFloor);
          expect(decision.action).toBe('grant');
        },
      ),
    );
  });

  it('an honest replica never signs at or below its own floor, whatever epoch it is asked for', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: 1n << 40n }), fc.bigInt({ min: 1n, max: 1n << 41n }), (floor, epoch) => {
        const request: Request = { type: 'acquire', id: 1, resource: 'r', epoch, ttlMs: 100 };
        const decision = decide(undefined, request, holders[0]!, 0, policy, floor);
        if (decision.action === 'grant') {
          expect(epoch > floor && epoch <= floor + policy.maxEpochStep).toBe(true);
        } else {
          expect(decision).toMatchObject({ action: 'reply', outcome: { epoch: floor } });
        }
      }),
    );
  });
});
