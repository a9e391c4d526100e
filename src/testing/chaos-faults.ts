/**
 * The faults of a chaos run (chaos.ts): which kinds there are, and how each
 * is injected into the deployment and held for a while. The scheduler in
 * chaos.ts picks them; the seeded random makes the choice replayable.
 */
import { generateIdentity } from '../client/index.js';
import { decodeTokenText } from '../token/admission-token.js';
import { askAll, openSessions, tamperedTokens } from './byzantine-clients.js';
import { BYZANTINE_BEHAVIOURS, PROCESS_BEHAVIOURS, type ByzantineBehaviour } from './byzantine/behaviours.js';
import { byzantineState, controlByzantine } from './byzantine/control.js';
import type { ScenarioCluster } from './scenario-cluster.js';
import type { SeededRandom } from './seeded-random.js';
import type { ResourceHttpClient, WorkloadRecorder } from './workload.js';

export const FAULT_KINDS = [
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
export type FaultKind = (typeof FAULT_KINDS)[number];

/** What the faults counted, for the report. */
export class FaultTally {
  readonly faults: Record<string, number> = {};
  readonly byzantineClients: Record<string, number> = {};
  kills = 0;
  /** Acts of Byzantine processes that were killed or stopped since (a restart starts counting from zero). */
  readonly actsBefore: Record<string, number> = {};
  activeFault = 'none';

  count(kind: string): void {
    this.faults[kind] = (this.faults[kind] ?? 0) + 1;
  }

  addActs(acts: Readonly<Partial<Record<string, number>>>): void {
    for (const [name, value] of Object.entries(acts))
      this.actsBefore[name] = (this.actsBefore[name] ?? 0) + (value ?? 0);
  }

  /** Reads a Byzantine replica's counters before it is killed or stopped. */
  async keepActs(url: string): Promise<void> {
    this.addActs((await byzantineState(url).catch(() => undefined))?.acts ?? {});
  }
}

export interface FaultContext {
  readonly deployment: ScenarioCluster;
  readonly random: SeededRandom;
  readonly signal: AbortSignal;
  readonly guard: ResourceHttpClient;
  readonly recorder: WorkloadRecorder;
  /** The name of counter k, and how many there are. */
  readonly counter: (k: number) => string;
  readonly counters: number;
  readonly tally: FaultTally;
  /** One holder round that pauses the holder mid-lease (chaos.ts). */
  readonly pauseHolder: () => Promise<void>;
}

export const sleep = (ms: number, signal?: AbortSignal) =>
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

/** New behaviours (one to three, at some rate) on every Byzantine replica of the current generation. */
export async function changeBehaviours(context: Pick<FaultContext, 'deployment' | 'random'>): Promise<void> {
  const { deployment, random } = context;
  const perRequest = BYZANTINE_BEHAVIOURS.filter((b) => !PROCESS_BEHAVIOURS.has(b));
  const chosen: ByzantineBehaviour[] = random.shuffle(perRequest).slice(0, random.int(1, 3));
  const rate = random.pick([0.3, 0.7, 1]);
  await Promise.all(
    deployment.byzantine.map((i) =>
      controlByzantine(deployment.replica(i).url, { behaviours: chosen, rate }).catch(() => undefined),
    ),
  );
}

/** Injects one fault, holds it a while (bounded), and lifts it. */
export async function injectFault(context: FaultContext, kind: FaultKind): Promise<void> {
  const { deployment, random, guard, recorder, counter, counters, tally } = context;
  const { n, f, byzantine } = deployment;
  const t = 2 * f + 1;
  const stopSignal = context.signal;
  const count = (name: string) => tally.count(name);
  const replicaIndex = () => random.int(1, n);
  const byzantineClients = tally.byzantineClients;
  const hold = random.int(300, 2_000);
  tally.activeFault = kind;
  switch (kind) {
    case 'partition-one': {
      const index = replicaIndex();
      count(kind);
      deployment.partition(index, true);
      await sleep(hold, stopSignal);
      deployment.partition(index, false);
      break;
    }
    case 'partition-minority': {
      const cut = random.shuffle(Array.from({ length: n }, (_, k) => k + 1)).slice(0, f);
      count(kind);
      for (const index of cut) deployment.partition(index, true);
      await sleep(hold, stopSignal);
      for (const index of cut) deployment.partition(index, false);
      break;
    }
    case 'partition-ring': {
      // Client group g sees only the majority g+1 .. g+t (mod n): every group a different quorum.
      count(kind);
      deployment.proxies.forEach((set, g) => {
        set.forEach((proxy, k) => proxy.partition(!Array.from({ length: t }, (_, j) => (g + j) % n).includes(k)));
      });
      await sleep(hold, stopSignal);
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
      await sleep(hold, stopSignal);
      deployment.heal();
      break;
    }
    case 'kill-restart': {
      const index = replicaIndex();
      const replica = deployment.replica(index);
      count(kind);
      tally.kills++;
      if (byzantine.includes(index)) await tally.keepActs(replica.url);
      await replica.kill('SIGKILL');
      await sleep(random.int(100, 800), stopSignal);
      await replica.restart();
      break;
    }
    case 'pause-replica': {
      const replica = deployment.replica(replicaIndex());
      count(kind);
      process.kill(replica.pid, 'SIGSTOP');
      try {
        await sleep(hold, stopSignal);
      } finally {
        process.kill(replica.pid, 'SIGCONT');
      }
      break;
    }
    case 'pause-holder': {
      await context.pauseHolder();
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
      await changeBehaviours(context);
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
  tally.activeFault = 'none';
}
