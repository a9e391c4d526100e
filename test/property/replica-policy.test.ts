/**
 * The pure grant policy over random request sequences: a small model replica
 * (durable record + volatile lease, applied exactly as the service applies
 * decisions) driven by random acquires, renews, releases, statuses and clock
 * advances from a few holders on a few resources.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { bytesEqual, toHex } from '../../src/common/bytes.js';
import { MAX_EPOCH } from '../../src/common/limits.js';
import { loadBackend } from '../../src/crypto/load.js';
import { grantMessage } from '../../src/token/grant.js';
import type { Request } from '../../src/protocol/messages.js';
import { OPEN_ACCESS } from '../../src/replica/access.js';
import {
  decide,
  type Decision,
  type PolicyConfig,
  type PolicyRecord,
  type SignedRecord,
} from '../../src/replica/policy.js';

const clusterId = new Uint8Array(32).fill(7);
const config: PolicyConfig = {
  clusterId,
  minTtlMs: 10,
  maxTtlMs: 1_000,
  freeEpochStep: 8n,
  maxEpochStep: 8n,
  faultTolerance: 1,
  access: OPEN_ACCESS,
};
const holders = [1, 2, 3].map((k) => new Uint8Array(32).fill(k));
const resources = ['a', 'b', 'ü/✓'];

/** `repeat` sends again the n-th earlier request (with its holder): the retries a real client makes. */
type Step =
  | { kind: 'request'; holder: number; session: string; request: Request }
  | { kind: 'advance'; ms: number }
  | { kind: 'repeat'; back: number };

const epochArb = fc.oneof(
  { weight: 6, arbitrary: fc.bigInt({ min: 0n, max: 12n }) },
  { weight: 1, arbitrary: fc.constantFrom(MAX_EPOCH, MAX_EPOCH + 1n, -1n) },
);
const ttlArb = fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 10, max: 1_000 }) },
  { weight: 1, arbitrary: fc.constantFrom(0, 9, 1_001) },
);
const requestArb: fc.Arbitrary<Request> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      type: fc.constant('acquire' as const),
      id: fc.constant(1),
      resource: fc.constantFrom(...resources),
      epoch: epochArb,
      ttlMs: ttlArb,
    }),
  },
  fc.record({
    type: fc.constant('renew' as const),
    id: fc.constant(1),
    resource: fc.constantFrom(...resources),
    epoch: epochArb,
    ttlMs: ttlArb,
  }),
  fc.record({
    type: fc.constant('release' as const),
    id: fc.constant(1),
    resource: fc.constantFrom(...resources),
    epoch: epochArb,
  }),
  fc.record({
    type: fc.constant('status' as const),
    id: fc.constant(1),
    resource: fc.constantFrom(...resources, '', 'x'.repeat(257)),
  }),
);
const stepArb: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('request' as const),
      holder: fc.integer({ min: 0, max: 2 }),
      // Two processes of one identity: the sessions of docs/protocol.md, "Sessions".
      session: fc.constantFrom('s0', 's1'),
      request: fc
        .tuple(requestArb, fc.integer({ min: 0, max: 3 }))
        .map(([request, pick]) => (request.type === 'acquire' && pick === 0 ? { ...request, resume: true } : request)),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 1_500 }) }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('repeat' as const), back: fc.integer({ min: 1, max: 8 }) }) },
);

/** Runs a sequence through the policy the way ReplicaService applies decisions; calls `observe` with each decision. */
function run(
  steps: Step[],
  observe: (
    decision: Decision,
    request: Request,
    holder: Uint8Array,
    before: PolicyRecord | undefined,
    session: string,
    now: number,
  ) => void,
): void {
  const durable = new Map<string, SignedRecord>();
  const leases = new Map<string, number>();
  /** Resource → the session holding its lease (volatile beside the lease, as in the service). */
  const sessions = new Map<string, string>();
  /** Resource → the epoch released (volatile beside the lease, as in the service). */
  const released = new Map<string, bigint>();
  /** Resource → the lease joined below the record, when it is the lease now (volatile, as in the service). */
  const joined = new Map<string, { epoch: bigint; holder: Uint8Array; session: string; released: boolean }>();
  const sent: { holder: number; session: string; request: Request }[] = [];
  let now = 1_000;
  for (const original of steps) {
    if (original.kind === 'advance') {
      now += original.ms;
      continue;
    }
    const step = original.kind === 'repeat' ? sent[sent.length - original.back] : original;
    if (!step) continue;
    sent.push(step);
    const { request } = step;
    const holder = holders[step.holder]!;
    const current = durable.get(request.resource);
    const before = current && {
      ...current,
      joined: joined.get(request.resource),
      leaseEndsAt: leases.get(request.resource) ?? 0,
      released: released.get(request.resource) === current.epoch,
      session: sessions.get(request.resource),
    };
    const decision = decide(before, request, holder, now, config, 0n, [], step.session);
    observe(decision, request, holder, before, step.session, now);
    switch (decision.action) {
      case 'grant':
      case 'resend':
        if (decision.action === 'grant') durable.set(request.resource, decision.record);
        leases.set(request.resource, decision.leaseEndsAt);
        sessions.set(request.resource, step.session);
        joined.delete(request.resource);
        break;
      case 'join':
      case 'renew':
        if (decision.action === 'join' && decision.record) durable.set(request.resource, decision.record);
        leases.set(request.resource, decision.leaseEndsAt);
        if (decision.joined)
          joined.set(request.resource, { ...decision.joined, session: step.session, released: false });
        else {
          joined.delete(request.resource);
          sessions.set(request.resource, step.session);
        }
        break;
      case 'release': {
        const lease = joined.get(request.resource);
        if (lease) joined.set(request.resource, { ...lease, released: true });
        else released.set(request.resource, current!.epoch);
        leases.set(request.resource, 0);
        break;
      }
      case 'reply':
        break;
    }
  }
}

describe('S2 monotonic signing (policy)', () => {
  it('signs a resource only at an epoch above every epoch it signed before, except the identical re-request', () => {
    let grants = 0;
    let resends = 0;
    fc.assert(
      fc.property(fc.array(stepArb, { minLength: 10, maxLength: 60 }), (steps) => {
        const signed = new Map<string, { epoch: bigint; holder: Uint8Array }>();
        run(steps, (decision, request, holder) => {
          const highest = signed.get(request.resource);
          if (decision.action === 'grant') {
            expect(request.type).toBe('acquire');
            if (highest) expect(decision.record.epoch > highest.epoch).toBe(true);
            expect(decision.record.epoch).toBe((request as Request & { epoch: bigint }).epoch);
            expect(bytesEqual(decision.record.holder, holder)).toBe(true);
            signed.set(request.resource, { epoch: decision.record.epoch, holder });
            grants++;
          }
          if (decision.action === 'join' && decision.record) {
            // A join above the record records the grant (it signs nothing): never at or below what was recorded.
            expect(request.type).toBe('renew');
            if (highest) expect(decision.record.epoch > highest.epoch).toBe(true);
            expect(bytesEqual(decision.record.holder, holder)).toBe(true);
            signed.set(request.resource, { epoch: decision.record.epoch, holder });
          }
          if (decision.action === 'resend') {
            resends++;
            expect(highest).toBeDefined();
            expect(highest!.epoch).toBe((request as Request & { epoch: bigint }).epoch);
            expect(bytesEqual(highest!.holder, holder)).toBe(true);
          }
        });
      }),
    );
    // The generators must actually reach grants and resends, or the property says nothing.
    expect(grants).toBeGreaterThan(100);
    expect(resends).toBeGreaterThan(10);
  });

  it('always refuses another holder at the recorded epoch, and everyone below it', () => {
    fc.assert(
      fc.property(fc.array(stepArb, { minLength: 10, maxLength: 60 }), (steps) => {
        run(steps, (decision, request, holder, before) => {
          if (request.type !== 'acquire' || !before) return;
          const lower = request.epoch < before.epoch;
          const otherAtEqual = request.epoch === before.epoch && !bytesEqual(holder, before.holder);
          if (lower || otherAtEqual) expect(['grant', 'resend']).not.toContain(decision.action);
        });
      }),
    );
  });

  it('answers an identical re-request with a resend whatever happened since (expiry, other holders refused), and stale once the holder released it', () => {
    fc.assert(
      fc.property(fc.array(stepArb, { minLength: 10, maxLength: 60 }), (steps) => {
        run(steps, (decision, request, holder, before, session, now) => {
          if (
            request.type !== 'acquire' ||
            !before ||
            (decision.action === 'reply' && ['invalid', 'forbidden'].includes(decision.outcome.status))
          )
            return;
          if (request.epoch === before.epoch && bytesEqual(holder, before.holder) && before.session === session) {
            // Released, or another grant's lease joined here since and still running: its history.
            const joinedRunning = before.joined && !before.joined.released && before.leaseEndsAt > now;
            if (before.released || joinedRunning)
              expect(decision).toMatchObject({ outcome: { status: 'stale', epoch: before.epoch } });
            else expect(decision.action).toBe('resend');
          }
        });
      }),
    );
  });

  it('Sessions: a running lease goes to no other session of its holder (no resend, no grant) unless it resumes', () => {
    let refused = 0;
    let resumed = 0;
    // Two processes of one identity on one resource, so they meet each other's leases often.
    const sameIdentityArb: fc.Arbitrary<Step> = fc.oneof(
      {
        weight: 6,
        arbitrary: fc.record({
          kind: fc.constant('request' as const),
          holder: fc.constant(0),
          session: fc.constantFrom('s0', 's1'),
          request: fc.record({
            type: fc.constant('acquire' as const),
            id: fc.constant(1),
            resource: fc.constant('a'),
            epoch: fc.bigInt({ min: 1n, max: 12n }),
            ttlMs: fc.integer({ min: 10, max: 1_000 }),
            resume: fc.constantFrom(true, undefined),
          }),
        }),
      },
      {
        weight: 1,
        arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 600 }) }),
      },
      {
        weight: 2,
        arbitrary: fc.record({ kind: fc.constant('repeat' as const), back: fc.integer({ min: 1, max: 4 }) }),
      },
    );
    fc.assert(
      fc.property(
        fc.array(fc.oneof(stepArb, sameIdentityArb, sameIdentityArb), { minLength: 10, maxLength: 60 }),
        (steps) => {
          run(steps, (decision, request, holder, before, session, now) => {
            if (request.type !== 'acquire' || !before || !bytesEqual(holder, before.holder)) return;
            const othersRunning = before.session !== session && !before.released && before.leaseEndsAt > now;
            if (decision.action === 'resend') expect(before.session).toBe(session);
            if (othersRunning && decision.action === 'grant') {
              expect(request.resume).toBe(true);
              resumed++;
            }
            if (othersRunning && decision.action === 'reply' && decision.outcome.status === 'busy') refused++;
          });
        },
      ),
    );
    // The generators must reach another session's running lease, both with and without resume.
    expect(refused).toBeGreaterThan(20);
    expect(resumed).toBeGreaterThan(20);
  });

  it("Leases that outlive f signers: a lease starts or is extended only when no other holder's lease runs", () => {
    let joinsAbove = 0;
    let joinsBelow = 0;
    let kept = 0;
    fc.assert(
      fc.property(fc.array(stepArb, { minLength: 10, maxLength: 60 }), (steps) => {
        run(steps, (decision, request, holder, before, session, now) => {
          if (decision.action === 'join') {
            if (decision.record) joinsAbove++;
            else joinsBelow++;
          }
          const lease = before && (before.joined ?? before);
          if (!before || !lease || lease.released || before.leaseEndsAt <= now) return;
          const leaseHolder = lease.holder;
          const others = !bytesEqual(leaseHolder, holder) || lease.session !== session;
          if (!others) return;
          kept++;
          // Another holder's running lease (or the same holder's under another session): nothing starts or extends a
          // lease for the caller but an acquire that resumes its own identity's lease.
          if (decision.action === 'grant') {
            expect(bytesEqual(leaseHolder, holder) && request.type === 'acquire' && request.resume).toBe(true);
          } else expect(['join', 'renew', 'resend']).not.toContain(decision.action);
        });
      }),
      // 800 runs: at 400, joins below the record numbered 15 in one CI run (about 30 typical), failing the reach
      // check below by chance.
      { numRuns: 800 },
    );
    // The generators must reach joins of both kinds and running leases of others, or the property says nothing.
    expect(joinsAbove).toBeGreaterThan(15);
    expect(joinsBelow).toBeGreaterThan(15);
    expect(kept).toBeGreaterThan(100);
  });

  it('checks in docs/protocol.md order: invalid before everything, stale before busy, busy before too_far', () => {
    const record: PolicyRecord = {
      epoch: 5n,
      holder: holders[0]!,
      grantDigest: new Uint8Array(32),
      released: false,
      leaseEndsAt: 2_000,
    };
    const acquire = (epoch: bigint, ttlMs = 100): Request => ({ type: 'acquire', id: 1, resource: 'a', epoch, ttlMs });
    expect(decide(record, acquire(5n, 1), holders[1]!, 1_000, config)).toMatchObject({
      outcome: { status: 'invalid' },
    });
    expect(decide(record, acquire(4n), holders[1]!, 1_000, config)).toMatchObject({
      outcome: { status: 'stale', epoch: 5n },
    });
    expect(decide(record, acquire(100n), holders[1]!, 1_000, config)).toMatchObject({
      outcome: { status: 'busy', epoch: 5n, remainingMs: 1_000 },
    });
    expect(decide(record, acquire(100n), holders[1]!, 2_000, config)).toMatchObject({
      outcome: { status: 'too_far', epoch: 5n },
    });
    expect(decide(record, acquire(13n), holders[1]!, 2_000, config)).toMatchObject({ action: 'grant' });
    expect(decide(undefined, { type: 'status', id: 1, resource: 'a' }, holders[1]!, 0, config)).toEqual({
      action: 'reply',
      outcome: { status: 'ok', epoch: 0n, leased: false, remainingMs: 0 },
    });
  });
});

describe('S2 monotonic signing: identical re-requests return identical partials', () => {
  const backend = loadBackend();
  const secretKey = backend.secretKeyFromBytes(new Uint8Array(32).fill(3));

  it('signs every grant and resend of one (resource, epoch, holder) to the same bytes', () => {
    fc.assert(
      fc.property(fc.array(stepArb, { maxLength: 40 }), (steps) => {
        const partials = new Map<string, string>();
        run(steps, (decision, request, holder) => {
          if (decision.action !== 'grant' && decision.action !== 'resend') return;
          const epoch = (request as Request & { epoch: bigint }).epoch;
          const partial = toHex(
            backend.sign(secretKey, grantMessage({ clusterId, resource: request.resource, epoch, holder })).bytes,
          );
          const key = `${request.resource}|${epoch}`;
          const previous = partials.get(key);
          // One partial per (resource, epoch): never two holders, and the same bytes every time.
          if (previous !== undefined) expect(partial).toBe(previous);
          partials.set(key, partial);
        });
      }),
    );
  });
});
