/**
 * A time-bounded chaos soak: a local deployment (ScenarioCluster: f Byzantine
 * replicas, fault proxies per client group, the reference resource), a
 * workload of fenced read-modify-write increments from several clients and a
 * pausable holder process, and a seeded schedule of faults (chaos-faults.ts):
 * partitions (one replica, a minority, a ring of majorities), noisy links,
 * SIGKILL and restart, SIGSTOP/SIGCONT of replicas and of the holder, clock
 * jumps, changing Byzantine behaviours, and Byzantine clients (replayed and
 * tampered tokens, huge epochs). With `reshare`, one replica is replaced by a
 * reshare at a seeded point in the middle (chaos-reshare.ts), and the clients
 * and the holder follow the endorsed membership. At the end the history
 * checker reads everything; any violation fails the run. The seed replays the
 * schedule (timing on a real machine still varies).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { QuorumFenceClient, followMembership, generateIdentity } from '../client/index.js';
import { clusterToJson, withEndpoints, type Cluster } from '../cluster/description.js';
import { QuorumFenceError } from '../common/errors.js';
import { byzantineState } from './byzantine/control.js';
import { FAULT_KINDS, FaultTally, changeBehaviours, injectFault, sleep, type FaultContext } from './chaos-faults.js';
import { replaceOneReplica, type ReshareSummary } from './chaos-reshare.js';
import { checkHistory, formatViolation, type HistoryCheck } from './history-checker.js';
import { HolderProcess } from './holder-process.js';
import { ScenarioCluster } from './scenario-cluster.js';
import { seededRandom, type SeededRandom } from './seeded-random.js';
import { reshareReport, type ChaosReport } from './chaos-report.js';
import { ResourceHttpClient, WorkloadRecorder, counterCheck, incrementCounter } from './workload.js';

export { chaosReportClean, formatChaosReport, type ChaosReport, type ChaosReshareReport } from './chaos-report.js';
export type { ReshareSummary } from './chaos-reshare.js';

export interface ChaosOptions {
  readonly durationMs: number;
  readonly seed: number;
  /** 4 (f = 1) or 7 (f = 2). */
  readonly replicas: 4 | 7;
  /** In-process clients running increments, each with its own proxies (default 3). */
  readonly workers?: number;
  /** Counters the workload increments (default 3: enough contention, few enough keys to check). */
  readonly counters?: number;
  /**
   * Replace one replica by a reshare at a seeded point between 30 % and 50 % of the run. The run then lasts
   * until the reshare has finished and the workload has run RUN_AFTER_RESHARE_MS and made
   * INCREMENTS_AFTER_RESHARE increments on the new membership, past durationMs if need be (bounded by
   * RESHARE_OVERRUN_LIMIT_MS).
   */
  readonly reshare?: boolean;
  /**
   * Only for the history checker's own test: the reshare's new replicas inherit no record, so the new set
   * re-grants old epochs; the run must report violations.
   */
  readonly plantSkipInheritance?: boolean;
  /** Working directory (default a fresh temporary one, removed afterwards). */
  readonly dir?: string;
  /** Called about once a second with the running totals. */
  readonly onProgress?: (progress: ChaosProgress) => void;
  /** Called with each step of the reshare as it happens. */
  readonly onReshareStep?: (line: string) => void;
}

export interface ChaosProgress {
  readonly elapsedMs: number;
  readonly durationMs: number;
  readonly operations: number;
  readonly incremented: number;
  readonly faults: number;
  readonly kills: number;
  readonly activeFault: string;
  /** The membership clients use now (goes up by one when a reshare switched them). */
  readonly membershipVersion: number;
}

/** What ResourceHttpClient answers when a request got no answer at all: not a refusal by the guard. */
const UNDELIVERED: ReadonlySet<string> = new Set(['unreachable', 'timeout']);
/** The holder's lease: long enough to write under, short enough that a pause outlives it. */
const HOLDER_TTL_MS = 600;
/** Workload on the new membership before a run with a reshare may end: this long, and this many increments. */
const RUN_AFTER_RESHARE_MS = 5_000;
const INCREMENTS_AFTER_RESHARE = 10;
/** How far past its duration a run waits for its reshare: the ceremony's own limits are below this. */
const RESHARE_OVERRUN_LIMIT_MS = 180_000;

/** The flags of Byzantine replica `index` whose generation's keys are in `keysDir`. */
function byzantineFlags(seed: number, index: number, keysDir: string): string[] {
  return [
    '--behaviour',
    'no-record',
    '--seed',
    String(seed + index),
    // Replica 1 is never Byzantine (they are the last f).
    '--other-key',
    join(keysDir, 'replica-1.key'),
    '--slow',
    '300ms',
    '--flood',
    '20',
  ];
}

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
  const byzantine = Array.from({ length: f }, (_, k) => n - f + 1 + k);
  const workers = options.workers ?? 3;
  const counters = options.counters ?? 3;
  const random = seededRandom(options.seed);
  // The reshare draws from its own stream, so runs without one keep their fault schedule.
  const reshareRandom = seededRandom(options.seed * 31 + 997);
  const reshareAtMs = options.reshare ? options.durationMs * (0.3 + 0.2 * reshareRandom.next()) : Infinity;
  const ownDir = options.dir === undefined;
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), 'quorumfence-chaos-'));
  const deployment = await ScenarioCluster.start({
    dir,
    n,
    byzantine,
    groups: workers + 1,
    seed: options.seed,
    replicaArgs: ['--signing-workers', '0', '--min-ttl', '50ms', '--max-ttl', '5s'],
    byzantineArgs: (index) => byzantineFlags(options.seed, index, join(dir, 'keys')),
  });
  /** The description the guard was configured with: it never changes, a reshare or not. */
  const guardCluster: Cluster = deployment.direct;
  const guard = new ResourceHttpClient(deployment.resource.url);
  const recorder = new WorkloadRecorder();
  const tally = new FaultTally();
  const stale = { attempted: 0, refused: 0, undelivered: 0 };
  const counter = (k: number) => `chaos/${options.seed}/counter-${k}`;
  const clientOptions = { handshakeTimeoutMs: 1000, requestTimeoutMs: 1000, reconnectMaxMs: 500 };
  /** The client each worker uses now; a reshare replaces them. Every client made, to close at the end. */
  let clients: QuorumFenceClient[];
  const allClients = new Set<QuorumFenceClient>();
  let holder: HolderProcess;
  let holderGeneration = 0;
  try {
    clients = await Promise.all(
      Array.from({ length: workers }, (_, g) =>
        QuorumFenceClient.connect(deployment.clusterFor(g), generateIdentity(), clientOptions),
      ),
    );
    for (const client of clients) allClients.add(client);
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

  const worker = async (g: number, local: SeededRandom) => {
    while (!stop.signal.aborted) {
      const client = clients[g]!;
      const outcome = await incrementCounter(client, guard, counter(local.int(0, counters - 1)), 'n', recorder, {
        ttlMs: 1_000,
        waitMs: 2_000,
        timeoutMs: 5_000,
      });
      // A client of an older membership is closed once its last operation is done.
      if (clients[g] !== client) await client.close().catch(() => undefined);
      if (outcome.kind === 'not_acquired') await sleep(local.int(20, 100), stop.signal);
    }
  };

  /** The holder process: increments under its own lease; a pause-holder fault stops it mid-lease. One round at a time. */
  let holderQueue: Promise<unknown> = Promise.resolve();
  const holderTurn = <T>(round: () => Promise<T>): Promise<T> => {
    const turn = holderQueue.then(round);
    holderQueue = turn.catch(() => undefined);
    return turn;
  };
  const holderRound = async (local: SeededRandom, paused: boolean) => {
    const resource = counter(local.int(0, counters - 1));
    recorder.operations++;
    const acquired = await holder.request({ cmd: 'acquire', resource, ttlMs: HOLDER_TTL_MS, waitMs: 2_000 });
    if (acquired.ok !== true) {
      recorder.outcome(`not_acquired:${String(acquired.reason)}`);
      return;
    }
    recorder.token(acquired.token as string, holderGeneration);
    if (paused) {
      // Stopped after its check and before its write, past its lease; a worker takes the counter over meanwhile.
      holder.pause();
      tally.count('pause-holder');
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
      await holderTurn(() => holderRound(local, false)).catch(() => undefined);
      await sleep(local.int(50, 300), stop.signal);
    }
  };

  const faultContext: FaultContext = {
    deployment,
    random,
    signal: stop.signal,
    guard,
    recorder,
    counter,
    counters,
    tally,
    pauseHolder: () => holderTurn(() => holderRound(random, true)).catch(() => undefined),
  };

  /**
   * The reshare (chaos-reshare.ts), then the switch: proxies to the new replicas, every worker's client and
   * the holder to the endorsed membership (followMembership, as a holder of the old cluster.json does), the
   * old generation stopped. Failures are reported, not thrown: the run then fails.
   */
  let reshare: { summary?: ReshareSummary; error?: string; after?: Cluster } = {};
  let reshareSettledAt: number | undefined;
  let incrementsAtReshare = 0;
  const runReshare = async () => {
    const step = (line: string) => {
      tally.activeFault = `reshare: ${line.trim().slice(0, 60)}`;
      options.onReshareStep?.(line);
    };
    const began = performance.now();
    try {
      const result = await replaceOneReplica({
        deployment,
        dir,
        random: reshareRandom,
        atMs: began - started,
        byzantineArgs: (index, keysDir) => byzantineFlags(options.seed + 100, index, keysDir),
        beforeKill: (index) => tally.keepActs(deployment.replica(index).url),
        onStep: step,
        skipInheritance: options.plantSkipInheritance === true,
      });
      const previous = deployment.switchTo(result.generation, result.endorsed);
      const candidate = clusterToJson(result.endorsed);
      clients = await Promise.all(
        clients.map(async (client, g) => {
          const followed = followMembership(client.cluster, candidate);
          if (!followed.ok) throw new QuorumFenceError(followed.code, `worker ${g}: ${followed.message}`);
          const next = await QuorumFenceClient.connect(
            withEndpoints(followed.cluster, deployment.proxyUrls(g)),
            client.identity,
            clientOptions,
          );
          allClients.add(next);
          return next;
        }),
      );
      const followed = await holderTurn(() =>
        holder.request({ cmd: 'follow', candidate: result.endorsedFile, endpoints: deployment.proxyUrls(workers) }),
      );
      if (followed.ok !== true)
        throw new QuorumFenceError('INTERNAL', `the holder did not follow: ${String(followed.code)}`);
      holderGeneration = result.endorsed.membershipVersion;
      step(`clients and the holder follow membership ${result.endorsed.membershipVersion}; old replicas stopped`);
      for (const index of byzantine) await tally.keepActs(previous.replica(index).url);
      await previous.close();
      await changeBehaviours(faultContext);
      reshare = {
        summary: { ...result.summary, tookMs: Math.round(performance.now() - began), lostDataDirUnused: false },
        after: result.endorsed,
      };
    } catch (error) {
      reshare = { error: (error as Error).message };
      step(`FAILED: ${(error as Error).message}`);
    } finally {
      reshareSettledAt = performance.now();
      incrementsAtReshare = recorder.outcomes.incremented ?? 0;
    }
  };

  const scheduler = async () => {
    let reshared = false;
    while (!stop.signal.aborted) {
      await sleep(random.int(200, 1_200), stop.signal);
      if (stop.signal.aborted) break;
      if (!reshared && performance.now() - started >= reshareAtMs) {
        reshared = true;
        await runReshare();
        continue;
      }
      await injectFault(faultContext, random.pick(FAULT_KINDS)).catch(() => undefined);
    }
  };

  const progress = setInterval(() => {
    options.onProgress?.({
      elapsedMs: performance.now() - started,
      durationMs: options.durationMs,
      operations: recorder.operations,
      incremented: recorder.outcomes.incremented ?? 0,
      faults: Object.values(tally.faults).reduce((a, b) => a + b, 0),
      kills: tally.kills,
      activeFault: tally.activeFault,
      membershipVersion: deployment.direct.membershipVersion,
    });
  }, 1_000);
  // The run ends at its duration; with a reshare, not before the new membership has carried the workload a while.
  const timer = setInterval(() => {
    const elapsed = performance.now() - started;
    if (elapsed < options.durationMs) return;
    const newMembershipBusyEnough =
      reshareSettledAt !== undefined &&
      (reshare.summary === undefined ||
        (performance.now() - reshareSettledAt >= RUN_AFTER_RESHARE_MS &&
          (recorder.outcomes.incremented ?? 0) - incrementsAtReshare >= INCREMENTS_AFTER_RESHARE));
    const waitForReshare =
      options.reshare === true && !newMembershipBusyEnough && elapsed < options.durationMs + RESHARE_OVERRUN_LIMIT_MS;
    if (!waitForReshare) stop.abort();
  }, 100);

  let report: ChaosReport;
  try {
    await changeBehaviours(faultContext);
    await Promise.all([
      ...clients.map((_, g) => worker(g, seededRandom(options.seed * 31 + g))),
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
    const byzantineActs: Record<string, number> = { ...tally.actsBefore };
    for (const state of states)
      for (const [name, acts] of Object.entries(state?.acts ?? {}))
        byzantineActs[name] = (byzantineActs[name] ?? 0) + (acts ?? 0);
    // Every read first, in the quiet: the check below keeps this event loop busy for seconds (a token
    // verification per log entry), and nothing read after it may depend on sockets idle that long.
    const finalReads = await recorder.finalReads(guard);
    const history = {
      ...(await recorder.history(guard, finalReads)),
      ...(reshare.after ? { reshares: [{ before: guardCluster, after: reshare.after }] } : {}),
    };
    // Tokens are checked against the description the guard was configured with: the key a reshare kept.
    const check: HistoryCheck = checkHistory(history, guardCluster);
    const counterResult = counterCheck(history.guardLogs[0]!, finalReads);
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
      faults: tally.faults,
      kills: tally.kills,
      staleHolderWrites: stale,
      byzantineActs,
      byzantineClients: tally.byzantineClients,
      ...(options.reshare ? { reshare: reshareReport(reshare, recorder.tokenGenerations, history.guardLogs[0]!) } : {}),
      violations: check.ok ? [] : check.violations.map(formatViolation),
      counterMismatches: counterResult.mismatches.map(
        (m) => `${m.slot.replace('\u0000', '/')}: value ${m.value}, ${m.accepted} accepted writes`,
      ),
      unreadCounters: counterResult.unread.map(
        (u) =>
          `${u.slot.replace('\u0000', '/')}: could not read (${u.code}: ${u.message}), ${u.accepted} accepted writes`,
      ),
    };
  } finally {
    clearInterval(progress);
    clearInterval(timer);
    stop.abort();
    holder.resume();
    await holder.stop().catch(() => undefined);
    await Promise.allSettled([...allClients].map((c) => c.close()));
    await deployment.close();
    if (ownDir) rmSync(dir, { recursive: true, force: true });
  }
  return report;
}
