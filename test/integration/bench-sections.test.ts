/**
 * Every `quorumfence-dev bench` section runs, through the real command, at its smallest size (`--smoke`):
 * it exits 0, its JSON holds the section with the fields its table prints, and the table prints. It checks
 * completion and shape, never a figure (speed is the bench's business, not the tests'), so a change to the
 * store, the protocol or the CLI that breaks a section fails here.
 *
 * The guard section's PostgreSQL part runs against the real server test/support/postgres.ts gives every
 * PostgreSQL test, and the etcd section needs etcd on PATH: without them their tests are skipped (their names
 * say so), unless QUORUMFENCE_TEST_REQUIRE_SYSTEM=1 (CI sets it, after installing them), where they run and fail
 * (test/support/system-tools.ts). Missing servers and a failing section are
 * checked too: the first are skipped with their reason and the run exits 0; the second is reported, the
 * next section still runs, and the run exits 1. `--gray` runs each fault so on quorumfence, in one run (each
 * checked to have acted: the replica seen stopped, its answers delayed, its flushes slowed where a C compiler is
 * installed: CI installs gcc), and etcd's part with one fault, slow-link (the leader where MoveLeader put it, its
 * peer links found and slowed; the move itself is tested in bench-network.test.ts): each fault starts its
 * processes afresh, so one run per fault would make this file far longer.
 */
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { longTier } from '../support/tier.js';
import { runDevCli } from '../support/cli.js';
import { freePorts } from '../support/free-ports.js';
import { createTestDatabase } from '../support/postgres.js';
import { lacks, needs } from '../support/system-tools.js';

const root = mkdtempSync(join(tmpdir(), 'qf-bench-sections-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A smoke run takes seconds; the bound is for a CI machine busy with the other test files. */
const RUN_TIMEOUT_MS = 150_000;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the report's JSON, read field by field below
type Json = Record<string, any>;

let runs = 0;
/** Runs `bench ARGS --smoke` with the table on stdout and the JSON in a file of its own. */
async function bench(args: string[], env?: NodeJS.ProcessEnv) {
  const out = join(root, `report-${++runs}.json`);
  const result = await runDevCli(['bench', ...args, '--smoke', '--out', out], {
    timeoutMs: RUN_TIMEOUT_MS,
    ...(env ? { env } : {}),
  });
  const context = `exit ${result.code}\n${result.stdout}\n${result.stderr}`;
  let text: string;
  try {
    text = readFileSync(out, 'utf8');
  } catch {
    throw new Error(`bench ${args.join(' ')} wrote no JSON\n${context}`);
  }
  return { ...result, report: JSON.parse(text) as Json, context, out };
}

/** A run that completed: exit 0, no section failed, the table and where the JSON went printed. */
function expectCompleted(run: Awaited<ReturnType<typeof bench>>): void {
  expect(run.code, run.context).toBe(0);
  expect(run.report.failedSections, run.context).toEqual([]);
  expect(run.report.size).toBe('smoke');
  expect(run.stdout).toMatch(/^machine: \d+ cores/m);
  expect(run.stdout).toMatch(/^figures written to /m);
  expect(run.stdout).not.toContain('FAILED');
}

const isNumber = (value: unknown) => typeof value === 'number' && Number.isFinite(value);

function expectNumbers(figures: Json, fields: readonly string[]): void {
  for (const field of fields) expect(isNumber(figures[field]), `${field}: ${JSON.stringify(figures)}`).toBe(true);
}

/** A timing of `samples` samples: its figures are numbers whenever it has any. */
function expectTiming(timing: Json, samples?: number): void {
  expect(Number.isInteger(timing.samples), JSON.stringify(timing)).toBe(true);
  if (samples !== undefined) expect(timing.samples).toBe(samples);
  if (timing.samples > 0) expectNumbers(timing, ['median', 'p99', 'mean']);
}

/** A closed loop: its cycles counted, and each cycle's and acquire's timing over exactly those cycles. */
function expectLoop(loop: Json, clients: number): void {
  expect(loop.clients).toBe(clients);
  expect(Number.isInteger(loop.operations)).toBe(true);
  expectNumbers(loop, ['seconds', 'perSecond']);
  expectTiming(loop.cycleMs, loop.operations);
  expectTiming(loop.acquireMs, loop.operations);
}

function expectLoopKinds(loops: Json): void {
  for (const kind of ['lockRelease', 'fencedWrite']) {
    expectLoop(loops[kind].one, 1);
    expectLoop(loops[kind].distinct, 16);
    expectLoop(loops[kind].hot, 16);
  }
}

function expectLines(stdout: string, lines: readonly (string | RegExp)[]): void {
  for (const line of lines)
    expect(stdout).toMatch(typeof line === 'string' ? new RegExp(`^${literal(line)}`, 'm') : line);
}

/** `text` as a regular expression that matches it literally. */
const literal = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

const LOOPS = ['one', 'distinct', 'hot'] as const;

/** A gray run's JSON: the network, the faults asked for in order, the chart beside the JSON. */
function expectGray(report: Json, faults: readonly string[]): Json {
  expect(report.network).toBeUndefined();
  expect(report.system).toBeUndefined();
  const gray = report.gray as Json;
  expect(gray.rttMs).toBe(2);
  expect(gray.settleMs).toBe(200);
  expectTiming(gray.measuredRttMs, 10);
  // Every ping crossed the proxies: none came back sooner than the round trip set.
  expect(gray.measuredRttMs.median).toBeGreaterThanOrEqual(2);
  expect(gray.faults.map((f: Json) => f.fault)).toEqual(faults);
  for (const fault of gray.faults as Json[]) expect(fault.emulates).toMatch(/\w/);
  return gray;
}

/** A loop under a condition: its counted cycles' timings, and the cycles done while it settled. */
function expectConditionLoop(rate: Json, clients: number): void {
  expectLoop(rate, clients);
  expect(Number.isInteger(rate.settlingOperations), JSON.stringify(rate)).toBe(true);
}

/** quorumfence's side: each loop healthy and faulted, the partials per cycle read from the replicas. */
function expectQuorumfenceGray(q: Json, grayReplica: number): void {
  expect(q.failed, JSON.stringify(q)).toBeUndefined();
  expect(q).toMatchObject({ replicas: 4, grayReplica });
  for (const loop of LOOPS)
    for (const state of ['healthy', 'faulted']) {
      const run = q.loops[loop][state] as Json;
      expectConditionLoop(run.rate, loop === 'one' ? 1 : 4);
      expect(isNumber(run.partialsPerCycle.all)).toBe(true);
      expect(run.cpuMsPerCycle.replicas).toHaveLength(4);
      expect(isNumber(run.cpuMsPerCycle.clients) && run.cpuMsPerCycle.clients > 0).toBe(true);
    }
}

/** etcd's side: the fault on its leader (etcd-1, moved there) and on a follower (etcd-2), clients on the others. */
function expectEtcdGray(etcd: Json): Json[] {
  expect(etcd.skipped, 'etcd must run here (QUORUMFENCE_TEST_REQUIRE_SYSTEM=1)').toBeUndefined();
  expect(etcd.members).toBe(3);
  expect(etcd.leader).toMatchObject({ faulted: 'etcd-1', leader: 'etcd-1', clientsOn: ['etcd-2', 'etcd-3'] });
  expect(etcd.follower).toMatchObject({ faulted: 'etcd-2', leader: 'etcd-1', clientsOn: ['etcd-1', 'etcd-3'] });
  // A smoke run gives each variant one client: the gateway under the leader's fault, gRPC under the follower's.
  expect(Object.keys(etcd.leader.drivers)).toEqual(['gateway']);
  expect(Object.keys(etcd.follower.drivers)).toEqual(['grpc']);
  for (const variant of [etcd.leader, etcd.follower] as Json[]) {
    expect(Number.isInteger(variant.leaderMoves)).toBe(true);
    for (const loops of Object.values(variant.drivers) as Json[])
      for (const loop of LOOPS)
        for (const state of ['healthy', 'faulted']) {
          const run = loops[loop][state] as Json;
          expectConditionLoop(run.rate, loop === 'one' ? 1 : 4);
          expect(Number.isInteger(run.retried)).toBe(true);
          for (const leader of [run.leaderWhenCounting, run.leaderAtEnd])
            expect([null, 'etcd-1', 'etcd-2', 'etcd-3']).toContain(leader);
        }
  }
  return [etcd.leader, etcd.follower];
}

function faultedRuns(variant: Json): Json[] {
  return (Object.values(variant.drivers) as Json[]).flatMap((loops) =>
    LOOPS.map((loop) => loops[loop].faulted as Json),
  );
}

/**
 * The text: the heading, each fault's table, the summary, and the chart written beside the JSON (a PNG drawn by
 * chromium; the SVG where chromium is missing, which the command says).
 */
function expectGrayLines(run: Awaited<ReturnType<typeof bench>>, faults: readonly string[]): void {
  const chart = run.out.replace(/\.json$/, lacks('chromium') ? '.svg' : '.png');
  expect(run.report.gray.chart).toBe(basename(chart));
  const drawn = readFileSync(chart);
  if (lacks('chromium')) expect(drawn.toString('utf8', 0, 4)).toBe('<svg');
  else expect(drawn.subarray(1, 4).toString()).toBe('PNG');
  expectLines(run.stdout, [
    /^gray faults, round trip 2 ms on every link \(measured through the proxies: p50 /m,
    ...faults.flatMap((fault) => [
      `gray fault ${fault}: `,
      new RegExp(`^\\| ${literal(fault)} \\| 4 clients, one hot resource \\| `, 'm'),
    ]),
    /^\| 4 clients, one hot resource \| p99 wait, ms \| /m,
    /^\| gray fault \(one node\) \| loop \| /m,
    `chart written to ${chart}`,
  ]);
}

describe('bench sections (--smoke, through the real command)', { timeout: RUN_TIMEOUT_MS + 10_000 }, () => {
  test('crypto: both backends, each operation, combine and batches', async () => {
    const run = await bench(['crypto']);
    expectCompleted(run);
    expect(run.report.crypto.map((c: Json) => c.backend)).toEqual(['blst', 'noble']);
    for (const backend of run.report.crypto as Json[]) {
      for (const op of ['signMs', 'verifyPartialMs', 'verifyTokenMs']) expectTiming(backend[op], 2);
      expectTiming(backend.combineMs['3'], 2);
      expectTiming(backend.verifyTokenBatchMs['1'], 2);
      expectTiming(backend.verifyTokenBatchMs['2'], 2);
      // The floor counts CPU per call; a call takes some, on every backend.
      for (const op of ['signMs', 'verifyTokenMs']) expect(backend[op].cpuMean).toBeGreaterThan(0);
      expect(backend.combineMs['3'].cpuMean).toBeGreaterThan(0);
    }
    expectLines(run.stdout, [
      /^crypto \(median ms\) +blst +noble$/m,
      'sign ',
      'verify partial ',
      'verify token (decode + pairing) ',
      'combine t = 3 ',
      'verify token, batches of 2 (per token) ',
      'sign, CPU per call (all threads, mean) ',
      'verify token, CPU per call (all threads, mean) ',
    ]);
  });

  test('replica: grants with 1 and 2 signing threads, the signer, the store, a handshake storm', async () => {
    const run = await bench(['replica']);
    expectCompleted(run);
    const replica = run.report.replica as Json;
    expect(replica.grants.map((g: Json) => g.signingWorkers)).toEqual([1, 2]);
    for (const grants of replica.grants as Json[]) {
      expectNumbers(grants, ['medianPerSecond', 'bestPerSecond']);
      expect(grants.runs).toHaveLength(1);
    }
    expectNumbers(replica.signing, ['medianScaling', 'bestScaling']);
    expectNumbers(replica.store, ['recordsPerSecond']);
    expectTiming(replica.store.oneWriteMs, 10);
    expect(replica.storesTogether.stores).toBe(3);
    expectTiming(replica.storesTogether.eachMs, 15);
    expectTiming(replica.storesTogether.allMs, 5);
    expect(replica.handshakes).toHaveLength(1);
    expect(replica.handshakes[0].connections).toBe(20);
    expectNumbers(replica.handshakes[0], ['wallMs', 'replicaCpuMsEach']);
    expectLines(run.stdout, [
      'one replica, durable grants ',
      '1 signing thread(s) ',
      '2 signing thread(s) ',
      'signer alone, 2 threads / 1 thread ',
      'signing record alone (records/s) ',
      'signing record, one write at a time, to flushed (p50 ms) ',
      '3 signing records in 3 processes, one write each at once',
      '20 connections authenticating at once',
    ]);
  });

  test.skipIf(lacks('postgresql'))(
    `guard: LMDB, first use, and the PostgreSQL forms against a real server ${needs('postgresql')}`,
    async () => {
      const db = createTestDatabase('bench');
      try {
        const { user, password, host, port, database } = db.config;
        const url = `postgres://${user}:${String(password)}@${host}:${port}/${database}`;
        const run = await bench(['guard', '--postgres', url]);
        expectCompleted(run);
        const guard = run.report.guard as Json;
        expectNumbers(guard.lmdbCachedToken, ['perSecond', 'writes']);
        expectTiming(guard.firstUse.verifyMs, 5);
        expectTiming(guard.firstUse.writeMs, 5);
        for (const form of ['plainUpdate', 'statement', 'transaction', 'plainUpdatePostgresDriver'])
          expectNumbers(guard.postgres[form], ['perSecond', 'writes', 'concurrency']);
        expectNumbers(guard.postgres, ['statementRatio', 'transactionRatio', 'statementShare']);
        expect(run.report.command).toContain(`postgres://${user}:***@`);
        expectLines(run.stdout, [
          'LMDB, cached token, durable writes/s ',
          'first use of a new token: verify ',
          'first use of a new token: whole durable write ',
          'PostgreSQL plain UPDATE (pg) ',
          'PostgreSQL fenced, single statement ',
          'PostgreSQL fenced, transaction ',
          'single-statement writes that held in one statement ',
          /^PostgreSQL plain UPDATE \(postgres driver\) +\d+ writes\/s/m,
        ]);
      } finally {
        await db.drop();
      }
    },
  );

  test('system with --profile: latency, the loops, CPU per grant, the bare wire, the targets, the profile', async () => {
    const run = await bench(['system', '--profile']);
    expectCompleted(run);
    const system = run.report.system as Json;
    expect(system.replicas).toBe(4);
    expectTiming(system.acquireMs, 10);
    expectNumbers(system.acquireReplicaMs, ['flush', 'sign']);
    expectLoopKinds(system.loops);
    for (const size of ['one', 'distinct', 'hot'])
      expectNumbers(system.loops.fencedWrite[size], [
        'signaturesPerGrant',
        'clientChecksPerBatch',
        'guardChecksPerBatch',
      ]);
    expectNumbers(system, ['cpuPerGrantMs']);
    expectNumbers(system.cpuBreakdownMs, [
      'replicas',
      'replicasMainThread',
      'resource',
      'resourceMainThread',
      'client',
      'clientMainThread',
    ]);
    expectNumbers(system.cpuOneBreakdownMs, ['replicas', 'resource', 'client']);
    for (const loop of ['one', 'distinct']) {
      for (const kind of ['replicas', 'resource', 'client']) {
        expectNumbers(system.profile[loop].kinds[kind], ['totalMsPerGrant', 'sampledMsPerGrant']);
        expect(system.profile[loop].kinds[kind].top.length).toBeGreaterThan(0);
      }
    }
    expect(run.report.transport.map((t: Json) => t.connections)).toEqual([1, 16]);
    for (const wire of run.report.transport as Json[]) expect(Number.isInteger(wire.roundTrips)).toBe(true);
    expectNumbers(run.report.targets, ['floorMs', 'wallClockFloorMs']);
    expect(run.report.targets.rows).toHaveLength(6);
    expect(run.report.etcd).toBeUndefined();
    expectLines(run.stdout, [
      /^quorumfence: acquire \[\+ guarded write\] \+ release \| etcd: lock .* +quorumfence N=4/m,
      'uncontended acquire p50 (ms) ',
      '  16 clients, one hot resource (handoffs/s) ',
      "  guard's token checks per pairing batch ",
      'CPU per grant (all processes, 16 distinct clients, fenced write) ',
      'bare wire, one request + reply, 16 connection(s)',
      'target (issue 13; ',
      /^CPU per grant, all processes, vs the crypto floor .* (pass|MISS)$/m,
      'profile, 1 client, fenced write ',
      'profile, 16 clients, distinct resources, fenced write ',
      '  top self time, replicas (1 client) ',
    ]);
  });

  test.skipIf(lacks('etcd'))(`etcd ${needs('etcd')}: a 3-member cluster, both drivers, fencing checked`, async () => {
    const run = await bench(['etcd']);
    expectCompleted(run);
    const etcd = run.report.etcd as Json;
    expect(etcd.skipped, 'etcd must run here (QUORUMFENCE_TEST_REQUIRE_SYSTEM=1)').toBeUndefined();
    expect(etcd.members).toBe(3);
    for (const driver of ['gateway', 'grpc']) {
      const figures = etcd.drivers[driver] as Json;
      expect(figures.fencing).toMatchObject({ staleRefused: true, currentAccepted: true });
      expectTiming(figures.acquireMs, 10);
      expectLoopKinds(figures.loops);
      expectNumbers(figures.cpuPerCycleMs, ['etcd', 'client']);
    }
    expectLines(run.stdout, [
      /^quorumfence: acquire .* +etcd x3 gateway +etcd x3 etcd3\/gRPC/m,
      '  16 clients, one hot resource (handoffs/s) ',
      /^etcd gateway: .*fencing checked before timing/m,
      /^etcd grpc: .*fencing checked before timing/m,
    ]);
  });

  test('--rtt with a section other than system and etcd, or with --profile, is refused (INVALID_OPTION, exit 2)', async () => {
    for (const args of [
      ['bench', 'crypto', '--rtt', '2ms'],
      ['bench', '--rtt', '2ms', '--profile'],
      ['bench', '--rtt', '2ms,2ms'],
    ]) {
      const result = await runDevCli(args);
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr).toMatch(/\(INVALID_OPTION\)/);
    }
  });

  test('--gray with a section other than system and etcd, with --profile, with a round trip of 0 or several, a bad fault, or --gray-replica out of place, is refused (INVALID_OPTION, exit 2)', async () => {
    for (const args of [
      ['bench', 'crypto', '--gray', 'hung'],
      ['bench', '--gray', 'hung', '--profile'],
      ['bench', '--gray', 'hung', '--rtt', '0'],
      ['bench', '--gray', 'hung', '--rtt', '2ms,20ms'],
      ['bench', '--gray', 'hung:50ms'],
      ['bench', '--gray', 'slow-disk'],
      ['bench', '--gray', 'hung,hung'],
      ['bench', '--rtt', '2ms', '--gray-replica', '2'],
      ['bench', '--gray', 'hung', '--gray-replica', '5'],
      ['bench', '--gray', 'hung', '--gray-replica', '0'],
    ]) {
      const result = await runDevCli(args);
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr, args.join(' ')).toMatch(/\(INVALID_OPTION\)/);
    }
  });

  test('ceremony: N = 4 and 7 on loopback', async () => {
    const run = await bench(['ceremony']);
    expectCompleted(run);
    const sizes = run.report.ceremony.sizes as Json[];
    expect(sizes.map((s) => [s.n, s.targetMs])).toEqual([
      [4, 2000],
      [7, 5000],
    ]);
    for (const size of sizes) expectTiming(size.durationMs, 1);
    expectLines(run.stdout, ['key ceremony on loopback (all members in one process) ', 'N = 4 ', 'N = 7 ']);
  });

  test('missing servers: no --postgres URL and no etcd on PATH are skipped, say why, and the run exits 0', async () => {
    // A PATH with a shell and nothing else: the bench looks for etcd through it.
    const bin = mkdtempSync(join(root, 'bin-'));
    symlinkSync('/bin/sh', join(bin, 'sh'));
    const run = await bench(['guard', 'etcd'], { PATH: bin });
    expectCompleted(run);
    expect(run.report.guard.postgres).toEqual({ skipped: expect.stringContaining('--postgres') });
    expect(run.report.etcd).toEqual({ skipped: expect.stringContaining('etcd is not on PATH') });
    expectLines(run.stdout, [
      /^PostgreSQL fenced writes +skipped: no database given \(--postgres /m,
      /^etcd: skipped, etcd is not on PATH \(Debian: apt-get install etcd-server\)$/m,
    ]);
  });

  test('a section that fails is reported with its code, the next one still runs, and the run exits 1', async () => {
    // Nothing listens on a port the OS just handed out and took back: the connection is refused.
    const [closed] = await freePorts(1);
    const run = await bench(['guard', 'ceremony', '--postgres', `postgres://bench:hunter2@127.0.0.1:${closed}/none`]);
    expect(run.code, run.context).toBe(1);
    expect(run.report.failedSections).toEqual(['guard']);
    expect(run.report.guard.failed).toEqual({
      code: 'CONNECTION_FAILED',
      message: expect.stringContaining('ECONNREFUSED'),
    });
    expect(run.report.ceremony.sizes).toHaveLength(2);
    expect(run.report.command).toContain('postgres://bench:***@');
    expect(run.report.command).not.toContain('hunter2');
    expectLines(run.stdout, [/^guard: FAILED \(CONNECTION_FAILED\): /m, 'key ceremony on loopback ']);
  });

  test('--quick and --smoke together are refused as contradictory (INVALID_OPTION, exit 2)', async () => {
    const result = await runDevCli(['bench', 'ceremony', '--quick', '--smoke']);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/--quick and --smoke: pick one\b.*\(INVALID_OPTION\)$/m);
  });

  // The network sections at two round trips, the gray faults, and the growth section run in the long tier
  // (test/support/tier.ts): minutes of CPU on a loaded two-core machine. npm test's system and etcd smokes, the
  // delay proxies (bench-network.test.ts) and the --gray refusals above cover the same code paths.
  if (longTier)
    describe('long tier', () => {
      // Every fault on quorumfence in one run (one delay network, one chart); etcd's part with one fault in a run of its
      // own: each system's processes start afresh per fault, the largest part of a smoke run's time.
      test(`--gray, every fault on quorumfence replica 3 in one run: the replica seen stopped, its answers delayed, its flushes slowed (slow-flush ${needs('cc')})`, async () => {
        // In this order the gray replica is started as the Byzantine replica process, restarted as the others are,
        // restarted with the slow-flush library preloaded, and restarted as the others again.
        const faults = ['byzantine-slow:50ms', 'slow-link:50ms', 'slow-flush:50ms', 'hung'];
        const run = await bench(['system', '--gray', faults.join(','), '--gray-replica', '3']);
        expectCompleted(run);
        const gray = expectGray(run.report, faults);
        const [byzantine, slowLink, slowFlush, hung] = gray.faults as Json[];
        // The system section alone: etcd was not asked for.
        for (const fault of gray.faults as Json[]) expect(fault.etcd).toBeUndefined();
        for (const fault of [slowLink!, hung!, byzantine!]) expectQuorumfenceGray(fault.quorumfence, 3);
        for (const loop of LOOPS) {
          // hung: seen stopped while faulted, and a stopped replica's /metrics cannot be read: its share is unknown.
          expect(hung!.quorumfence.loops[loop].faulted.stopped).toBe(true);
          expect(hung!.quorumfence.loops[loop].faulted.partialsPerCycle.gray).toBeNull();
          expect(hung!.quorumfence.loops[loop].healthy.stopped).toBeUndefined();
          // byzantine-slow: the Byzantine replica process, honest while healthy, its answers delayed while faulted.
          expect(byzantine!.quorumfence.loops[loop].healthy.slowedAnswers).toBe(0);
          expect(byzantine!.quorumfence.loops[loop].faulted.slowedAnswers).toBeGreaterThan(0);
        }
        if (lacks('cc')) {
          expect(slowFlush!.quorumfence).toEqual({ skipped: expect.stringContaining('no C compiler') });
        } else {
          expectQuorumfenceGray(slowFlush!.quorumfence, 3);
          // Each of the replica's real flushes waited 50 ms before the disk's own: the mean cannot be below it. A loop
          // in which the replica flushed nothing has no mean: clients that saw it slow left it out of their first
          // signers (docs/protocol.md, "Slow replicas"), which a loaded machine's short smoke loop can make complete.
          // At least one loop must have made it flush.
          const means = LOOPS.map(
            (loop) => slowFlush!.quorumfence.loops[loop].faulted.grayFlushMs as number | undefined,
          );
          expect(means.filter((mean) => mean !== undefined).length, JSON.stringify(means)).toBeGreaterThan(0);
          for (const mean of means) if (mean !== undefined) expect(mean).toBeGreaterThanOrEqual(50);
        }
        expectGrayLines(
          run,
          faults.filter((f) => !lacks('cc') || !f.startsWith('slow-flush')),
        );
        expectLines(run.stdout, [
          /^\| loop \| figure \| quorumfence, replica 3 faulty: healthy → faulted \(issue 42: cycles\/s >= 0\.9x, cycle p99 <= 1\.5x\) \|$/m,
          /^\| 1 client \| cycles\/s \| [\d.]+ → [\d.]+ = [\d.]+x (pass|MISS) \|$/m,
          /^quorumfence replica 3's partials per cycle, healthy → faulted: one [\d.]+ → not read .*, seen stopped;/m,
          /, \d+ answers delayed/,
        ]);
      });

      test.skipIf(lacks('etcd'))(
        `--rtt 0,2ms ${needs('etcd')}: both sides per round trip, every link through the delay proxies, the targets, the summary, the chart`,
        async () => {
          const run = await bench(['system', 'etcd', '--rtt', '0,2ms']);
          expectCompleted(run);
          expect(run.report.system).toBeUndefined();
          expect(run.report.etcd).toBeUndefined();
          const network = run.report.network as Json;
          expect(network.rtts).toEqual([0, 2]);
          expect(network.points.map((p: Json) => p.rttMs)).toEqual([0, 2]);
          for (const point of network.points as Json[]) {
            expectNumbers(point.loadAverage, ['start', 'end']);
            expectTiming(point.measuredRttMs, 10);
            expectTiming(point.system.acquireMs, 10);
            expectLoopKinds(point.system.loops);
            for (const driver of ['gateway', 'grpc']) {
              expect(point.etcd.drivers[driver].fencing).toMatchObject({ staleRefused: true, currentAccepted: true });
              expectLoopKinds(point.etcd.drivers[driver].loops);
            }
          }
          const [loopback, delayed] = network.points as Json[];
          expect(loopback!.proxy).toBeUndefined();
          // Every ping crossed the proxies: none came back sooner than the round trip set.
          expect(delayed!.measuredRttMs.median).toBeGreaterThanOrEqual(2);
          // The clients' links to 4 replicas and the resource, etcd's clients' and the members' peer links.
          expect(delayed!.proxy.stats.connections).toBeGreaterThan(5);
          for (const side of ['quorumfence', 'etcd'])
            expectNumbers(delayed!.proxy[side], ['cpuMs', 'wallMs', 'coreShare']);
          // The chart's name in the JSON, the file next to it.
          const chart = run.out.replace(/\.json$/, '.png');
          expect(network.chart).toBe(basename(chart));
          expect(readFileSync(chart).subarray(1, 4).toString()).toBe('PNG');
          expectLines(run.stdout, [
            /^network, loopback, no proxy \(a direct round trip: p50 /m,
            /^network, round trip 2 ms on every link \(measured through the proxies: p50 /m,
            /^ {2}the proxies' process \(on the same cores\) used \d+ % of a core during quorumfence's runs/m,
            /^targets \(issue 31\) at 2 ms, etcd = its stronger client per row/m,
            /^acquire \+ release: 1 client, cycles\/s .* >= 2\.0x +(pass|MISS)$/m,
            /^\| acquire \+ release, round trip per link \(measured p50\) \|/m,
            /^\| 2 ms \(\d/m,
            `chart written to ${chart}`,
          ]);
        },
      );

      test.skipIf(lacks('etcd'))(
        `--gray slow-link on etcd ${needs('etcd')}: leadership on etcd-1 when counting began, it and its peer links slowed; then a follower`,
        async () => {
          const run = await bench(['etcd', '--gray', 'slow-link:50ms']);
          expectCompleted(run);
          const gray = expectGray(run.report, ['slow-link:50ms']);
          const [fault] = gray.faults as Json[];
          expect(fault!.quorumfence).toBeUndefined();
          const [leader, follower] = expectEtcdGray(fault!.etcd);
          for (const variant of [leader!, follower!])
            for (const faulted of faultedRuns(variant)) {
              // The slowed member's own peer connections were found in /proc and slowed too.
              expect(faulted.dialedByFaulted).toBeGreaterThan(0);
              // The leader was where the variant moved it (MoveLeader, checked with every member) as counting began.
              expect(faulted.leaderWhenCounting).toBe('etcd-1');
            }
          expectGrayLines(run, ['slow-link:50ms']);
          expectLines(run.stdout, [
            /^\| loop \| figure \| etcd, fault on its leader \(etcd-1\) \| etcd, fault on a follower \(etcd-2\) \|$/m,
            /^\| 1 client \| cycles\/s \| [\d.]+ → [\d.]+ = [\d.]+x \(gateway\) \| [\d.]+ → [\d.]+ = [\d.]+x \(grpc\) \|$/m,
            /^etcd, fault on etcd-1 \(leadership moved to etcd-1 before each run, \d+ move\(s\) needed; clients on etcd-2, etcd-3\)/m,
            /^etcd, fault on etcd-2 \(leadership moved to etcd-1 before each run, \d+ move\(s\) needed; clients on etcd-1, etcd-3\)/m,
          ]);
          expect(run.stdout).not.toContain('quorumfence');
        },
      );

      test('growth: grants past compactions land above the floor; the retention window is left; a replica restarts on it', async () => {
        const run = await bench(['growth']);
        expectCompleted(run);
        const growth = run.report.growth as Json;
        expect(growth.liveResources).toBe(100);
        expect(growth.points.map((p: Json) => p.resourcesEverGranted)).toEqual([100, 1000]);
        for (const point of growth.points as Json[]) {
          // Exactly the grants of the last retention window stay; the rest are folded into the floor.
          expect(point.recordsLeft).toBe(100);
          expectNumbers(point, ['storeBytes', 'replicaRssBytes', 'restartMs', 'writesPerSecond']);
        }
        // Nine hundred resources were compacted away, and every later grant went above the floor they raised.
        expect(BigInt(growth.points[1].floor)).toBeGreaterThan(0n);
        expect(growth.ratios).toHaveLength(2);
        expectLines(run.stdout, [
          /^growth \(100 live, retention 100 grants\) +records left +store +replica RSS +restart +writes\/s$/m,
          /^1,000 ever granted +100 /m,
          'target ',
        ]);
      });
    });
});
