/**
 * A time-bounded chaos soak: a local deployment (ScenarioCluster: f Byzantine
 * replicas, fault proxies per client group, the reference resource), a
 * workload of fenced read-modify-write increments from several clients and a
 * pausable holder process, and a seeded schedule of faults: partitions (one
 * replica, a minority, a ring of majorities), noisy links, SIGKILL and
 * restart, SIGSTOP/SIGCONT of replicas and of the holder, clock jumps,
 * changing Byzantine behaviours, and Byzantine clients (replayed and tampered
 * tokens, huge epochs). At the end the history checker reads everything; any
 * violation fails the run. The seed replays the schedule (timing on a real
 * machine still varies).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { QuorumFenceClient, generateIdentity } from '../client/index.js';
import { QuorumFenceError } from '../common/errors.js';
import { askAll, openSessions, tamperedTokens } from './byzantine-clients.js';
import { BYZANTINE_BEHAVIOURS, PROCESS_BEHAVIOURS, type ByzantineBehaviour } from './byzantine/behaviours.js';
import { byzantineState, controlByzantine } from './byzantine/control.js';
import { checkHistory, formatViolation, type HistoryCheck } from './history-checker.js';
import { HolderProcess } from './holder-process.js';
import { ScenarioCluster } from './scenario-cluster.js';
import { seededRandom, type SeededRandom } from './seeded-random.js';
import type { ChaosReport } from './chaos-report.js';
import { ResourceHttpClient, WorkloadRecorder, counterCheck, incrementCounter } from './workload.js';
import { decodeTokenText } from '../token/admission-token.js';

export { formatChaosReport, type ChaosReport } from './chaos-report.js';

export interface ChaosOptions {
  readonly durationMs: number;
  readonly seed: number;
  /** 4 (f = 1) or 7 (f = 2). */
  readonly replicas: 4 | 7;
  /** In-process clients running increments, each with its own proxies (default 3). */
  readonly workers?: number;
  /** Counters the workload increments (default 3: enough contention, few enough keys to check). */
  readonly counters?: number;
  /** Working directory (default a fresh temporary one, removed afterwards). */
  readonly dir?: string;
  /** Called about once a second with the running totals. */
  readonly onProgress?: (progress: ChaosProgress) => void;
}

export interface ChaosProgress {
  readonly elapsedMs: number;
  readonly durationMs: number;
  readonly operations: number;
  readonly incremented: number;
  readonly faults: number;
  readonly kills: number;
  readonly activeFault: string;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });

/** What ResourceHttpClient answers when a request got no answer at all: not a refusal by the guard. */
const UNDELIVERED: ReadonlySet<string> = new Set(['unreachable', 'timeout']);
/** The holder's lease: long enough to write under, short enough that a pause outlives it. */
const HOLDER_TTL_MS = 600;
const FAULT_KINDS = [
  'partition-one',
  'partition-minority',
  'partition-ring',
  'noisy-links',
  'kill-restart',
  'pause-replica',
  'pause-holder',
  'clock-jump',
  'behaviour',
  'replayed-token',
  'tampered-token',
  'huge-epoch',
] as const;
type FaultKind = (typeof FAULT_KINDS)[number];

/**
 * Runs the soak and returns its report (also when it found violations).
 * @throws QuorumFenceError INVALID_ARGUMENT for bad options, and start-up failures of the deployment
 */
export async function runChaos(options: ChaosOptions): Promise<ChaosReport> {
  if (options.replicas !== 4 && options.replicas !== 7)
    throw new QuorumFenceError('INVALID_ARGUMENT', `"replicas" expected 4 or 7, got ${options.replicas}`, {
      field: 'replicas',
    });
  if (!(options.durationMs >= 1_000))
    throw new QuorumFenceError('INVALID_ARGUMENT', '"durationMs" expected at least 1000', { field: 'durationMs' });
  const n = options.replicas;
  const f = (n - 1) / 3;
  const t = 2 * f + 1;
  const byzantine = Array.from({ length: f }, (_, k) => n - f + 1 + k);
  const workers = options.workers ?? 3;
  const counters = options.counters ?? 3;
  const random = seededRandom(options.seed);
  const ownDir = options.dir === undefined;
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), 'quorumfence-chaos-'));
  const deployment = await ScenarioCluster.start({
    dir,
    n,
    byzantine,
    groups: workers + 1,
    seed: options.seed,
    replicaArgs: ['--signing-workers', '0', '--min-ttl', '50ms', '--max-ttl', '5s'],
    byzantineArgs: (index) => [
      '--behaviour',
      'no-record',
      '--seed',
      String(options.seed + index),
      '--other-key',
      join(dir, 'keys', 'replica-1.key'),
      '--slow',
      '300ms',
      '--flood',
      '20',
    ],
  });
  const guard = new ResourceHttpClient(deployment.resource.url);
  const recorder = new WorkloadRecorder();
  const faults: Record<string, number> = {};
  const byzantineClients: Record<string, number> = {};
  let kills = 0;
  let activeFault = 'none';
  /** Acts of Byzantine processes that were killed since (a restart starts counting from zero). */
  const actsBefore: Record<string, number> = {};
  const addActs = (acts: Readonly<Partial<Record<string, number>>>) => {
    for (const [name, value] of Object.entries(acts)) actsBefore[name] = (actsBefore[name] ?? 0) + (value ?? 0);
  };
  const stale = { attempted: 0, refused: 0, undelivered: 0 };
  const counter = (k: number) => `chaos/${options.seed}/counter-${k}`;
  const clientOptions = { handshakeTimeoutMs: 1000, requestTimeoutMs: 1000, reconnectMaxMs: 500 };
  let clients: QuorumFenceClient[];
  let holder: HolderProcess;
  try {
    clients = await Promise.all(
      Array.from({ length: workers }, (_, g) =>
        QuorumFenceClient.connect(deployment.clusterFor(g), generateIdentity(), clientOptions),
      ),
    );
    holder = await HolderProcess.start({
      clusterFile: deployment.writeClusterFile(workers),
      resourceUrl: deployment.resource.url,
    });
  } catch (error) {
    await deployment.close();
    if (ownDir) rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  const stop = new AbortController();
  const started = performance.now();

  const worker = async (client: QuorumFenceClient, local: SeededRandom) => {
    while (!stop.signal.aborted) {
      const outcome = await incrementCounter(client, guard, counter(local.int(0, counters - 1)), 'n', recorder, {
        ttlMs: 1_000,
        waitMs: 2_000,
        timeoutMs: 5_000,
      });
      if (outcome.kind === 'not_acquired') await sleep(local.int(20, 100), stop.signal);
    }
  };

  /** The holder process: increments under its own lease; a pause-holder fault stops it mid-lease. One round at a time. */
  let holderQueue: Promise<void> = Promise.resolve();
  const holderTurn = (round: () => Promise<void>): Promise<void> =>
    (holderQueue = holderQueue.then(round).catch(() => undefined));
  const holderRound = async (local: SeededRandom, paused: boolean) => {
    const resource = counter(local.int(0, counters - 1));
    recorder.operations++;
    const acquired = await holder.request({ cmd: 'acquire', resource, ttlMs: HOLDER_TTL_MS, waitMs: 2_000 });
    if (acquired.ok !== true) {
      recorder.outcome(`not_acquired:${String(acquired.reason)}`);
      return;
    }
    recorder.token(acquired.token as string);
    if (paused) {
      // Stopped after its check and before its write, past its lease; a worker takes the counter over meanwhile.
      holder.pause();
      faults['pause-holder'] = (faults['pause-holder'] ?? 0) + 1;
      try {
        await sleep(HOLDER_TTL_MS + local.int(100, 500));
        // Retried (bounded): a replica killed a moment ago may still be reconnecting.
        for (let attempt = 0; attempt < 10; attempt++) {
          const takeover = await incrementCounter(clients[0]!, guard, resource, 'n', recorder, {
            ttlMs: 1_000,
            waitMs: 3_000,
            timeoutMs: 5_000,
          });
          if (takeover.kind !== 'not_acquired') break;
          await sleep(200);
        }
      } finally {
        holder.resume();
      }
    }
    const answer = await holder.request({ cmd: 'increment', resource, key: 'n', checkLease: !paused });
    recorder.keys.add(`${resource}\u0000n`);
    const kind = answer.kind === 'refused' ? `${String(answer.at)}:${String(answer.code)}` : String(answer.kind);
    recorder.outcome(kind);
    if (paused) {
      // Refused when a newer holder reached the guard during the pause; accepted (rightly) when none did.
      stale.attempted++;
      if (answer.kind === 'refused') {
        if (UNDELIVERED.has(String(answer.code))) stale.undelivered++;
        else stale.refused++;
      }
    }
    if (answer.kind === 'incremented') {
      recorder.acknowledged.push({
        guard: 0,
        resource,
        key: 'n',
        tokenDigest: answer.tokenDigest as string,
        version: answer.version as number,
      });
    }
    await holder.request({ cmd: 'release', resource });
  };
  const holderLoop = async (local: SeededRandom) => {
    while (!stop.signal.aborted) {
      await holderTurn(() => holderRound(local, false));
      await sleep(local.int(50, 300), stop.signal);
    }
  };

  /** New behaviours (one to three, at some rate) on every Byzantine replica. */
  const changeBehaviours = async () => {
    const perRequest = BYZANTINE_BEHAVIOURS.filter((b) => !PROCESS_BEHAVIOURS.has(b));
    const chosen: ByzantineBehaviour[] = random.shuffle(perRequest).slice(0, random.int(1, 3));
    const rate = random.pick([0.3, 0.7, 1]);
    await Promise.all(
      byzantine.map((i) =>
        controlByzantine(deployment.replica(i).url, { behaviours: chosen, rate }).catch(() => undefined),
      ),
    );
  };
  const count = (kind: string) => (faults[kind] = (faults[kind] ?? 0) + 1);
  const replicaIndex = () => random.int(1, n);
  const injectFault = async (kind: FaultKind) => {
    const hold = random.int(300, 2_000);
    activeFault = kind;
    switch (kind) {
      case 'partition-one': {
        const index = replicaIndex();
        count(kind);
        deployment.partition(index, true);
        await sleep(hold, stop.signal);
        deployment.partition(index, false);
        break;
      }
      case 'partition-minority': {
        const cut = random.shuffle(Array.from({ length: n }, (_, k) => k + 1)).slice(0, f);
        count(kind);
        for (const index of cut) deployment.partition(index, true);
        await sleep(hold, stop.signal);
        for (const index of cut) deployment.partition(index, false);
        break;
      }
      case 'partition-ring': {
        // Client group g sees only the majority g+1 .. g+t (mod n): every group a different quorum.
        count(kind);
        deployment.proxies.forEach((set, g) => {
          set.forEach((proxy, k) => proxy.partition(!Array.from({ length: t }, (_, j) => (g + j) % n).includes(k)));
        });
        await sleep(hold, stop.signal);
        deployment.heal();
        break;
      }
      case 'noisy-links': {
        count(kind);
        for (const set of deployment.proxies) {
          for (const proxy of set) {
            if (random.chance(0.5))
              proxy.setFaults({
                delayMs: [0, random.int(5, 60)],
                dropRate: 0.03,
                duplicateRate: 0.05,
                reorderRate: 0.05,
                resetRate: 0.005,
              });
          }
        }
        await sleep(hold, stop.signal);
        deployment.heal();
        break;
      }
      case 'kill-restart': {
        const index = replicaIndex();
        const replica = deployment.replica(index);
        count(kind);
        kills++;
        if (byzantine.includes(index)) addActs((await byzantineState(replica.url).catch(() => undefined))?.acts ?? {});
        await replica.kill('SIGKILL');
        await sleep(random.int(100, 800), stop.signal);
        await replica.restart();
        break;
      }
      case 'pause-replica': {
        const replica = deployment.replica(replicaIndex());
        count(kind);
        process.kill(replica.pid, 'SIGSTOP');
        try {
          await sleep(hold, stop.signal);
        } finally {
          process.kill(replica.pid, 'SIGCONT');
        }
        break;
      }
      case 'pause-holder': {
        await holderTurn(() => holderRound(random, true));
        break;
      }
      case 'clock-jump': {
        const index = byzantine[random.int(0, byzantine.length - 1)]!;
        count(kind);
        await controlByzantine(deployment.replica(index).url, { jumpClockMs: random.int(500, 5_000) }).catch(
          () => undefined,
        );
        break;
      }
      case 'behaviour': {
        count(kind);
        await changeBehaviours();
        break;
      }
      case 'replayed-token':
      case 'tampered-token': {
        if (recorder.tokens.length === 0) break;
        count(kind);
        const old = recorder.tokens[random.int(0, recorder.tokens.length - 1)]!;
        const resource = decodeTokenText(old, deployment.direct.backend).grant.resource;
        const token = kind === 'replayed-token' ? old : random.pick(tamperedTokens(old)).token;
        // Written to a key of its own: a replay of the current token is legitimately accepted, and must not touch the counters.
        const answer = await guard.put(resource, 'byzantine-client', 'x', token);
        const label = `${kind} ${answer.ok ? 'accepted' : answer.code}`;
        byzantineClients[label] = (byzantineClients[label] ?? 0) + 1;
        break;
      }
      case 'huge-epoch': {
        count(kind);
        const sessions = await openSessions(deployment.clusterFor(0), generateIdentity());
        try {
          const answers = await askAll(sessions, {
            type: 'acquire',
            resource: counter(random.int(0, counters - 1)),
            epoch: 1n << 62n,
            ttlMs: 1_000,
          });
          for (const [index, status] of answers) {
            const label = `huge-epoch ${status.startsWith('error') ? 'error' : status}${byzantine.includes(index) ? ' (Byzantine replica)' : ''}`;
            byzantineClients[label] = (byzantineClients[label] ?? 0) + 1;
          }
        } finally {
          for (const session of sessions.values()) session.close();
        }
        break;
      }
    }
    activeFault = 'none';
  };

  const scheduler = async () => {
    while (!stop.signal.aborted) {
      await sleep(random.int(200, 1_200), stop.signal);
      if (stop.signal.aborted) break;
      await injectFault(random.pick(FAULT_KINDS)).catch(() => undefined);
    }
  };

  const progress = setInterval(() => {
    options.onProgress?.({
      elapsedMs: performance.now() - started,
      durationMs: options.durationMs,
      operations: recorder.operations,
      incremented: recorder.outcomes.incremented ?? 0,
      faults: Object.values(faults).reduce((a, b) => a + b, 0),
      kills,
      activeFault,
    });
  }, 1_000);
  const timer = setTimeout(() => stop.abort(), options.durationMs);

  let report: ChaosReport;
  try {
    await changeBehaviours();
    await Promise.all([
      ...clients.map((client, g) => worker(client, seededRandom(options.seed * 31 + g))),
      holderLoop(seededRandom(options.seed * 31 + workers)),
      scheduler(),
    ]);
    clearInterval(progress);
    // Quiet the system before reading the history: every process running, no partition, honest behaviour.
    deployment.heal();
    holder.resume();
    for (const index of Array.from({ length: n }, (_, k) => k + 1)) {
      const replica = deployment.replica(index);
      if (replica.running) process.kill(replica.pid, 'SIGCONT');
      else await replica.restart().catch(() => undefined);
    }
    const states = await Promise.all(
      byzantine.map((i) => byzantineState(deployment.replica(i).url).catch(() => undefined)),
    );
    const byzantineActs: Record<string, number> = { ...actsBefore };
    for (const state of states)
      for (const [name, acts] of Object.entries(state?.acts ?? {}))
        byzantineActs[name] = (byzantineActs[name] ?? 0) + (acts ?? 0);
    // Every read first, in the quiet: the check below keeps this event loop busy for seconds (a token
    // verification per log entry), and nothing read after it may depend on sockets idle that long.
    const finalReads = await recorder.finalReads(guard);
    const history = await recorder.history(guard, finalReads);
    const check: HistoryCheck = checkHistory(history, deployment.direct);
    const counters = counterCheck(history.guardLogs[0]!, finalReads);
    report = {
      seed: options.seed,
      replicas: n,
      f,
      byzantine,
      durationMs: Math.round(performance.now() - started),
      operations: recorder.operations,
      outcomes: { ...recorder.outcomes },
      guardEntries: check.stats.entries,
      accepted: check.stats.accepted,
      refusedByReason: check.stats.refusedByReason,
      tokens: recorder.tokens.length,
      faults,
      kills,
      staleHolderWrites: stale,
      byzantineActs,
      byzantineClients,
      violations: check.ok ? [] : check.violations.map(formatViolation),
      counterMismatches: counters.mismatches.map(
        (m) => `${m.slot.replace('\u0000', '/')}: value ${m.value}, ${m.accepted} accepted writes`,
      ),
      unreadCounters: counters.unread.map(
        (u) =>
          `${u.slot.replace('\u0000', '/')}: could not read (${u.code}: ${u.message}), ${u.accepted} accepted writes`,
      ),
    };
  } finally {
    clearInterval(progress);
    clearTimeout(timer);
    stop.abort();
    holder.resume();
    await holder.stop().catch(() => undefined);
    await Promise.allSettled(clients.map((c) => c.close()));
    await deployment.close();
    if (ownDir) rmSync(dir, { recursive: true, force: true });
  }
  return report;
}
