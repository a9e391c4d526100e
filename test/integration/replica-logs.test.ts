/**
 * The replica's log lines the runbooks read (docs/operations.md, "Logs"), from real replica processes over
 * real sockets: a refusal names its reason, request type, resource, epochs and the holder key the client
 * authenticated with (what QuorumFenceRefusalSpike's runbook looks for); a flood of refusals, or of admin
 * requests without the operator secret, writes a burst of lines and then one `suppressed` line counting
 * exactly what it held back; grants are counted at info and logged one by one at debug; a freeze and a
 * compaction write their lines with the documented fields.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toHex } from '../../src/common/bytes.js';
import { DEFAULT_LOG_LIMIT } from '../../src/common/log-limiter.js';
import { dealLocalCluster, startLocalCluster, type LocalCluster } from '../../src/cluster/launcher.js';
import { newHolder, outcomeOf, RawClient } from '../support/raw-client.js';

type Line = Record<string, unknown>;

let dir: string;
const started: LocalCluster[] = [];
const secret = randomBytes(32).toString('base64url');
let secretFile: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'qf-replica-logs-'));
  secretFile = join(dir, 'operator-secret');
  writeFileSync(secretFile, secret + '\n', { mode: 0o600 });
  dealLocalCluster(join(dir, 'keys'), 4);
});

afterAll(async () => {
  await Promise.allSettled(started.map((local) => local.close()));
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

/** Replica 1 alone, at `level`, with the operator secret; its own data directory. */
async function startReplica(name: string, level: string, extraArgs: string[] = []): Promise<LocalCluster> {
  const local = await startLocalCluster({
    newStores: true,
    dir: join(dir, 'keys'),
    indices: [1],
    dataRoot: join(dir, name),
    env: { QUORUMFENCE_LOG_LEVEL: level },
    extraArgs: ['--operator-secret-file', secretFile, ...extraArgs],
  });
  started.push(local);
  return local;
}

/** Waits (bounded) until `find` matches a line the replica wrote, and returns it. */
async function lineWhere(local: LocalCluster, find: (line: Line) => boolean, timeoutMs = 10_000): Promise<Line> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const line = local.replica(1).logLines().find(find);
    if (line) return line;
    if (Date.now() > deadline) throw new Error(`no such line in ${JSON.stringify(local.replica(1).logLines())}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const linesOf = (local: LocalCluster, event: string): Line[] =>
  local
    .replica(1)
    .logLines()
    .filter((line) => line.event === event);

describe('the replica logs (docs/operations.md, "Logs")', () => {
  it('a refusal line names the reason, request type, resource, both epochs and the holder key', async () => {
    const local = await startReplica('refusals', 'info');
    const alice = await RawClient.open(local.replica(1).url);
    const bob = newHolder();
    const bobClient = await RawClient.open(local.replica(1).url, bob);
    try {
      expect(outcomeOf(await alice.acquire('logs/orders', 1n, 10_000)).status).toBe('granted');
      expect(outcomeOf(await bobClient.acquire('logs/orders', 2n)).status).toBe('busy');
      expect(outcomeOf(await bobClient.release('logs/orders', 1n)).status).toBe('not_holder');
      expect(outcomeOf(await bobClient.acquire('logs/orders', 1n)).status).toBe('stale');
      const busy = await lineWhere(local, (l) => l.event === 'refusal' && l.reason === 'busy');
      expect(busy).toMatchObject({
        level: 30,
        name: 'replica',
        msg: 'refused',
        type: 'acquire',
        resource: 'logs/orders',
        epoch: '2',
        recordEpoch: '1',
        holder: toHex(bob.publicKey),
      });
      expect(typeof busy.time).toBe('number');
      expect(typeof busy.pid).toBe('number');
      expect(await lineWhere(local, (l) => l.event === 'refusal' && l.reason === 'not_holder')).toMatchObject({
        type: 'release',
        epoch: '1',
        recordEpoch: '1',
        holder: toHex(bob.publicKey),
      });
      expect(await lineWhere(local, (l) => l.event === 'refusal' && l.reason === 'stale')).toMatchObject({
        type: 'acquire',
        holder: toHex(bob.publicKey),
      });
      // An invalid request says what was wrong; a leases request names no resource.
      expect(outcomeOf(await bobClient.leases(0)).status).toBe('invalid');
      const invalid = await lineWhere(local, (l) => l.event === 'refusal' && l.reason === 'invalid');
      expect(invalid).toMatchObject({ type: 'leases', holder: toHex(bob.publicKey) });
      expect(invalid.detail).toMatch(/limit/);
      expect(invalid).not.toHaveProperty('resource');
      // At info, the grant is counted, not logged one by one.
      expect(linesOf(local, 'grant')).toEqual([]);
    } finally {
      alice.socket.terminate();
      bobClient.socket.terminate();
    }
    expect(await local.replica(1).stop()).toBe(0);
    expect(linesOf(local, 'grants')).toEqual([expect.objectContaining({ count: 1, windowMs: 10_000 })]);
  }, 60_000);

  it('a flood of refusals writes a burst, then one suppressed line with the exact count held back', async () => {
    const local = await startReplica('flood', 'info');
    const client = await RawClient.open(local.replica(1).url);
    const flood = 40;
    try {
      // ttlMs 1 is below --min-ttl (100 ms): invalid, every time.
      const answers = await Promise.all(Array.from({ length: flood }, (_, k) => client.acquire(`flood/${k}`, 1n, 1)));
      expect(answers.map((a) => outcomeOf(a).status)).toEqual(Array(flood).fill('invalid'));
    } finally {
      client.socket.terminate();
    }
    expect(await local.replica(1).stop()).toBe(0);
    const written = linesOf(local, 'refusal').filter((l) => l.reason === 'invalid').length;
    // The burst, plus at most a line or two the rate refilled while the flood was answered.
    expect(written).toBeGreaterThanOrEqual(DEFAULT_LOG_LIMIT.burst);
    expect(written).toBeLessThan(DEFAULT_LOG_LIMIT.burst + 3);
    const suppressed = linesOf(local, 'suppressed');
    expect(suppressed).toEqual([
      expect.objectContaining({ of: 'refusal', reason: 'invalid', count: flood - written, level: 30 }),
    ]);
  }, 60_000);

  it('admin requests without the secret: a burst of warn lines, then a count; a freeze logs its line', async () => {
    const local = await startReplica('admin', 'info');
    const url = local.replica(1).healthUrl.replace('/healthz', '/admin/freeze');
    const tries = 30;
    for (let k = 0; k < tries; k++) {
      const refused = await fetch(url, { method: 'POST', headers: { authorization: 'Bearer wrong' } });
      expect(refused.status).toBe(401);
    }
    const frozen = await fetch(url, {
      method: 'POST',
      headers: { authorization: `Bearer ${secret}` },
      body: JSON.stringify({ reason: 'logs test' }),
    });
    expect(frozen.status).toBe(200);
    const freeze = await lineWhere(local, (l) => l.event === 'freeze');
    expect(freeze).toMatchObject({ level: 30, replica: 1, reason: 'logs test' });
    expect(typeof freeze.at).toBe('string');
    expect(await local.replica(1).stop()).toBe(0);
    const refusedLines = linesOf(local, 'admin_refused');
    expect(refusedLines.length).toBeGreaterThanOrEqual(DEFAULT_LOG_LIMIT.burst);
    expect(refusedLines[0]).toMatchObject({ level: 40, path: '/admin/freeze' });
    expect(typeof refusedLines[0]!.address).toBe('string');
    expect(linesOf(local, 'suppressed')).toEqual([
      expect.objectContaining({ of: 'admin_refused', count: tries - refusedLines.length }),
    ]);
  }, 60_000);

  it('at debug, each grant is a line with resource, epoch, holder and ttl; a compaction logs its counts', async () => {
    const local = await startReplica('debug', 'debug', ['--retention', '1ms', '--compaction-interval', '200ms']);
    const holder = newHolder();
    const client = await RawClient.open(local.replica(1).url, holder);
    try {
      expect(outcomeOf(await client.acquire('logs/debug', 7n, 150)).status).toBe('granted');
      expect(await lineWhere(local, (l) => l.event === 'grant')).toMatchObject({
        level: 20,
        msg: 'granted',
        resource: 'logs/debug',
        epoch: '7',
        holder: toHex(holder.publicKey),
        ttlMs: 150,
      });
      // Once the lease has ended and retention (1 ms) passed, compaction folds the record into the floor.
      const compaction = await lineWhere(local, (l) => l.event === 'compaction' && l.compacted === 1);
      expect(compaction).toMatchObject({ level: 30, floor: '7', records: 0 });
      expect(compaction.scanned).toBeGreaterThanOrEqual(1);
      expect(typeof compaction.ms).toBe('number');
    } finally {
      client.socket.terminate();
    }
  }, 60_000);
});
