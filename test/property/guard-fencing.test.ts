/**
 * S4 fencing as a property: over random interleavings of writes from many
 * holders with random epochs, accepted epochs never go down per resource, one
 * token holds each (resource, epoch), and the store holds exactly the result
 * of the accepted writes in order. Checked against the pure decision and
 * against the real LMDB store (fresh directory per run, writes issued
 * concurrently so they share group commits).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sha256 } from '@noble/hashes/sha2.js';
import fc from 'fast-check';
import { afterAll, describe, expect, test } from 'vitest';
import { toHex } from '../../src/common/bytes.js';
import { decideFence, type Barrier } from '../../src/guard/fence.js';
import type { GuardLogEntry } from '../../src/guard/log.js';
import { LmdbGuard } from '../../src/guard/lmdb-guard.js';
import { makeHolder, makeTokenFactory } from '../support/token-factory.js';

const factory = makeTokenFactory();
const RESOURCES = ['alpha', 'beta', 'g/a m/ma'];
const KEYS = ['x', 'y'];
const holders = Array.from({ length: 4 }, (_, i) => makeHolder(new Uint8Array(32).fill(i + 1)));

interface Attempt {
  readonly resource: string;
  readonly epoch: number;
  readonly holder: number;
  readonly key: string;
  readonly remove: boolean;
}

const attempt = fc.record({
  resource: fc.constantFrom(...RESOURCES),
  // A small epoch range makes equal epochs (same token, or a conflict) common.
  epoch: fc.integer({ min: 1, max: 8 }),
  holder: fc.integer({ min: 0, max: holders.length - 1 }),
  key: fc.constantFrom(...KEYS),
  remove: fc.boolean(),
});
const history = fc.array(attempt, { minLength: 1, maxLength: 30 });

function tokenOf(a: Attempt) {
  return factory.issue({ resource: a.resource, epoch: a.epoch, holder: holders[a.holder]! });
}

type Expected = 'accepted' | 'stale' | 'conflict';

/** An independent model of the guard rules: highest epoch per resource and the token that first reached it. */
function model(attempts: readonly Attempt[]) {
  const barrier = new Map<string, { epoch: number; digest: string }>();
  const data = new Map<string, string>();
  const outcomes: Expected[] = [];
  attempts.forEach((a, i) => {
    const digest = toHex(sha256(tokenOf(a).bytes));
    const b = barrier.get(a.resource);
    let outcome: Expected;
    if (b === undefined || a.epoch > b.epoch) outcome = 'accepted';
    else if (a.epoch < b.epoch) outcome = 'stale';
    else outcome = b.digest === digest ? 'accepted' : 'conflict';
    outcomes.push(outcome);
    if (outcome !== 'accepted') return;
    if (b === undefined || a.epoch > b.epoch) barrier.set(a.resource, { epoch: a.epoch, digest });
    const cell = `${a.resource}\u0000${a.key}`;
    if (a.remove) data.delete(cell);
    else data.set(cell, `value-${i}`);
  });
  return { barrier, data, outcomes };
}

/** The log-level invariants a history checker relies on. */
function checkLog(log: readonly GuardLogEntry[], attempts: number): void {
  expect(log.map((e) => e.seq)).toEqual(Array.from({ length: attempts }, (_, i) => i + 1));
  const highest = new Map<string, bigint>();
  const tokenAt = new Map<string, string>();
  for (const entry of log.filter((e) => e.accepted)) {
    const epoch = BigInt(entry.epoch!);
    expect(epoch).toBeGreaterThanOrEqual(highest.get(entry.resource) ?? 0n);
    highest.set(entry.resource, epoch);
    const cell = `${entry.resource}\u0000${epoch}`;
    expect(tokenAt.get(cell) ?? entry.tokenDigest).toBe(entry.tokenDigest);
    tokenAt.set(cell, entry.tokenDigest!);
  }
}

describe('S4 fencing (pure decision)', () => {
  test('decideFence agrees with the model on every attempt', () => {
    fc.assert(
      fc.property(history, (attempts) => {
        const expected = model(attempts);
        const barriers = new Map<string, Barrier>();
        attempts.forEach((a, i) => {
          const token = tokenOf(a);
          const d = decideFence(barriers.get(a.resource), {
            epoch: BigInt(a.epoch),
            digest: sha256(token.bytes),
            bytes: token.bytes,
          });
          expect(d.ok ? 'accepted' : d.reason).toBe(expected.outcomes[i]);
          if (d.ok) {
            const before = barriers.get(a.resource)?.epoch ?? 0n;
            expect(d.barrier.epoch).toBeGreaterThanOrEqual(before);
            barriers.set(a.resource, d.barrier);
          }
        });
      }),
    );
  });
});

describe('S4 fencing (LMDB store)', () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  test('accepted epochs never go down and the store holds exactly the accepted writes in order', async () => {
    await fc.assert(
      fc.asyncProperty(history, async (attempts) => {
        const dir = mkdtempSync(join(tmpdir(), 'qf-fence-'));
        dirs.push(dir);
        const guard = await LmdbGuard.open(dir, factory.cluster);
        try {
          const expected = model(attempts);
          // Issued together: LMDB runs them in call order, batched into shared commits.
          const results = await Promise.all(
            attempts.map((a, i) =>
              guard.write(
                { token: tokenOf(a).bytes, resource: a.resource, key: a.key, op: a.remove ? 'delete' : 'put' },
                (tx) => {
                  if (a.remove) tx.remove(a.key);
                  else tx.put(a.key, new TextEncoder().encode(`value-${i}`));
                },
              ),
            ),
          );
          expect(results.map((r) => (r.ok ? 'accepted' : r.reason))).toEqual(expected.outcomes);

          const stored = new Map<string, string>();
          for (const resource of RESOURCES) {
            for (const { key, value } of guard.entries(resource))
              stored.set(`${resource}\u0000${key}`, new TextDecoder().decode(value));
          }
          expect(stored).toEqual(expected.data);
          for (const resource of RESOURCES) {
            expect(guard.barrier(resource)?.epoch).toBe(
              expected.barrier.has(resource) ? BigInt(expected.barrier.get(resource)!.epoch) : undefined,
            );
          }
          checkLog(guard.readLog({ limit: 1000 }), attempts.length);
        } finally {
          await guard.close();
          rmSync(dir, { recursive: true, force: true });
        }
      }),
    );
  });
});
