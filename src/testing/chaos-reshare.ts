/**
 * The reshare of a chaos run (`quorumfence-dev chaos --reshare`): one replica
 * is replaced while the workload keeps acquiring and writing through the guard
 * and the Byzantine replicas keep acting, by the steps of docs/resharing.md:
 *
 *  1. lose     replica k is killed; its data directory and key file are deleted (its disk is gone);
 *  2. freeze   every survivor is frozen while running (POST /admin/freeze with the operator secret);
 *  3. export   each survivor's frozen record is read beside it (read-only), signed with its share and
 *              checked as inherit checks it; a Byzantine survivor's report is a seeded lie (nothing, an
 *              absurdly high epoch, another holder at the top), which it can sign with its own share;
 *  4. ceremony every member of the new set gets a node key; the survivors deal (a reshare proposal
 *              with their indices); `quorumfence reshare run` runs per member, as processes over loopback;
 *  5. inherit  each new replica's record is raised from a seeded 2f_old+1 of the reports
 *              (inheritRecords, the signing record's raiseFrom) before it starts;
 *  6. start    the new replicas start, honest and Byzantine at the same indices as before;
 *  7. endorse  every new member signs the new membership with its new share; the Byzantine ones sign
 *              another membership, so combineEndorsement leaves them out; t_new valid partials combine.
 *
 * The caller then points the proxies at the new replicas and moves its clients and the holder over by
 * following the endorsed description (followMembership); the guard keeps its configuration.
 */
import { spawn } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { dirname, join } from 'node:path';
import { toHex } from '../common/bytes.js';
import { QuorumFenceError } from '../common/errors.js';
import { localOperatorSecret } from '../common/operator-secret.js';
import { createNodeKeyFile } from '../ceremony/node-key.js';
import { makeProposal } from '../ceremony/proposal.js';
import {
  clusterToJson,
  loadClusterFile,
  localEndpoints,
  parseCluster,
  withEndpoints,
  type Cluster,
} from '../cluster/description.js';
import { replicaEntryPoint } from '../cluster/launcher.js';
import { combineEndorsement, followMembership, signMembership } from '../cluster/membership.js';
import { loadReplicaKeyFile } from '../cluster/replica-key.js';
import { inheritRecords, type OldRecordReport } from '../replica/inherit.js';
import { readFrozenExport, signFrozenExport } from '../replica/frozen-export.js';
import { SigningRecord } from '../replica/signing-record.js';
import type { ReplicaGeneration, ScenarioCluster } from './scenario-cluster.js';
import type { SeededRandom } from './seeded-random.js';

/** What a Byzantine survivor's frozen record says (the inherit rule must hold against each). */
export const BYZANTINE_REPORTS = ['as-recorded', 'nothing', 'absurdly-high', 'other-holder'] as const;
export type ByzantineReport = (typeof BYZANTINE_REPORTS)[number];

/** What the reshare did, for the chaos report. */
export interface ReshareSummary {
  /** The replica replaced (its share, record and key treated as lost). */
  readonly replaced: number;
  readonly replacedByzantine: boolean;
  /** Milliseconds into the run when it began, and how long it took until the clients could switch. */
  readonly atMs: number;
  readonly tookMs: number;
  readonly membershipVersion: { readonly before: number; readonly after: number };
  readonly clusterIdUnchanged: boolean;
  readonly groupKeyUnchanged: boolean;
  readonly dealers: readonly number[];
  /** New replica → the old replicas whose frozen records it inherited. */
  readonly inheritedFrom: Readonly<Record<string, readonly number[]>>;
  /** Resources the new records were raised to, and top epochs blocked because reports disagreed. */
  readonly inheritedResources: number;
  readonly contested: number;
  /** What the Byzantine survivors reported as their frozen records. */
  readonly byzantineReport: ByzantineReport;
  /** New members whose partials signed another membership (the Byzantine ones); the endorsement is made without them. */
  readonly forgedPartials: readonly number[];
  /** The replaced replica's old data directory (deleted at step 1; nothing recreated it) and its new one. */
  readonly lostDataDir: string;
  readonly lostDataDirUnused: boolean;
  readonly newDataDir: string;
  /** Each step and the milliseconds it took. */
  readonly steps: Readonly<Record<string, number>>;
}

export interface ReshareResult {
  readonly generation: ReplicaGeneration;
  /** The new membership, endorsed by the group key, with the new replicas' own endpoints. */
  readonly endorsed: Cluster;
  /** The same as a cluster.json (what holders are handed). */
  readonly endorsedFile: string;
  readonly summary: Omit<ReshareSummary, 'tookMs' | 'lostDataDirUnused'>;
}

export interface ReshareOptions {
  readonly deployment: ScenarioCluster;
  /** Where the new generation's files go. */
  readonly dir: string;
  readonly random: SeededRandom;
  readonly atMs: number;
  /** Byzantine flags of new replica i, given the new generation's keys folder. */
  readonly byzantineArgs: (index: number, keysDir: string) => readonly string[];
  /** Called with a Byzantine replica just before it is killed (to read its counters). */
  readonly beforeKill?: (index: number) => Promise<void>;
  /** One line per step, for the progress output. */
  readonly onStep?: (line: string) => void;
  /**
   * Only for the history checker's own test: the new replicas start with empty signing records (step 5
   * skipped), so the new set grants epochs the old one already gave out, and the check must say so.
   */
  readonly skipInheritance?: boolean;
}

/** A reshare among processes on one loaded machine: phases of seconds; the whole ceremony bounded. */
const CEREMONY_ACCEPT_TIMEOUT_MS = 30_000;
const CEREMONY_PHASE_TIMEOUT_MS = 10_000;
const CEREMONY_PROCESS_TIMEOUT_MS = 120_000;
const FREEZE_TIMEOUT_MS = 30_000;

/** The compiled `quorumfence` command of this package. */
function cliEntryPoint(): string {
  return join(dirname(replicaEntryPoint()), 'quorumfence.js');
}

/** Ports free on loopback right now, for the members' ceremony endpoints. */
async function freePorts(count: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from(
      { length: count },
      () =>
        new Promise<Server>((resolve, reject) => {
          const server = createServer();
          server.once('error', reject);
          server.listen(0, '127.0.0.1', () => resolve(server));
        }),
    ),
  );
  const ports = servers.map((s) => (s.address() as { port: number }).port);
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  return ports;
}

/** Runs `quorumfence ARGS` as a process; every stderr line goes to `onLine`. Bounded by `timeoutMs`. */
function runCommand(
  args: readonly string[],
  timeoutMs: number,
  onLine: (line: string) => void,
): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cliEntryPoint(), ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    let partial = '';
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr = (stderr + chunk).slice(-8192);
      const lines = (partial + chunk).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) if (line.trim() !== '') onLine(line);
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr });
    });
  });
}

/** Freezes a running replica through its admin endpoint; resolves once its marker is flushed. */
async function freezeLive(healthUrl: string, reason: string): Promise<void> {
  const url = healthUrl.replace(/\/healthz$/, '/admin/freeze');
  const response = await fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${localOperatorSecret()}`, 'content-type': 'application/json' },
    body: JSON.stringify({ reason }),
    signal: AbortSignal.timeout(FREEZE_TIMEOUT_MS),
  });
  const body = (await response.json().catch(() => ({}))) as Record<string, unknown>;
  if (response.status !== 200 || body.frozen !== true)
    throw new QuorumFenceError(
      'INTERNAL',
      `${url} refused the freeze (HTTP ${response.status}): ${String(body.message)}`,
    );
}

/** The record a replica process keeps (a Byzantine one under no-record keeps it in DIR/no-record). */
function recordDir(dataDir: string): string {
  const noRecord = join(dataDir, 'no-record');
  return existsSync(noRecord) ? noRecord : dataDir;
}

/**
 * A Byzantine survivor's lie about its frozen record. A low report (nothing) is outweighed by an honest
 * signer among the 2f_old+1 reports; a high one or another holder costs that resource epochs, never safety.
 */
function lie(report: OldRecordReport, kind: ByzantineReport, random: SeededRandom): OldRecordReport {
  if (kind === 'nothing') return { ...report, floor: 0n, entries: [] };
  if (kind === 'as-recorded' || report.entries.length === 0) return report;
  const victim = random.int(0, report.entries.length - 1);
  const entries = report.entries.map((entry, k) => {
    if (k !== victim) return entry;
    const holder = kind === 'other-holder' ? new Uint8Array(32).fill(0xbb) : entry.record.holder;
    const epoch = kind === 'absurdly-high' ? entry.record.epoch + (1n << 40n) : entry.record.epoch;
    return { ...entry, record: { ...entry.record, holder, epoch } };
  });
  return { ...report, entries };
}

/**
 * Replaces one replica of the deployment's current generation by a reshare, up to an endorsed new
 * membership with its replicas running (steps 1-7 above). Nothing is switched yet.
 * @throws QuorumFenceError when a step fails (the run then reports it): the old replicas stay frozen
 */
export async function replaceOneReplica(options: ReshareOptions): Promise<ReshareResult> {
  const { deployment, random } = options;
  const step = (line: string) => options.onStep?.(line);
  const steps: Record<string, number> = {};
  const timed = async <T>(name: string, work: () => Promise<T> | T): Promise<T> => {
    const began = performance.now();
    const result = await work();
    steps[name] = Math.round(performance.now() - began);
    return result;
  };
  const n = deployment.n;
  const old = deployment.current;
  const oldCluster = loadClusterFile(join(old.keysDir, 'cluster.json'));
  const oldF = (oldCluster.n - 1) / 3;
  const replaced = random.int(1, n);
  const survivors = Array.from({ length: n }, (_, k) => k + 1).filter((i) => i !== replaced);
  const byzantineReport = random.pick(BYZANTINE_REPORTS);
  const lostDataDir = old.replica(replaced).dataDir;
  const generationDir = join(options.dir, `generation-${oldCluster.membershipVersion + 1}`);

  step(`replace replica ${replaced}${deployment.byzantine.includes(replaced) ? ' (Byzantine)' : ''}: its disk is lost`);
  await timed('lose', async () => {
    if (deployment.byzantine.includes(replaced)) await options.beforeKill?.(replaced);
    await old.replica(replaced).kill('SIGKILL');
    rmSync(lostDataDir, { recursive: true, force: true });
    rmSync(join(old.keysDir, `replica-${replaced}.key`), { force: true });
  });

  step(`freeze replicas ${survivors.join(', ')} while running (POST /admin/freeze)`);
  await timed('freeze', () =>
    Promise.all(survivors.map((i) => freezeLive(old.replica(i).healthUrl, `chaos: replace replica ${replaced}`))),
  );

  const reports = await timed('export', async () => {
    const out: OldRecordReport[] = [];
    for (const i of survivors) {
      // Read-only, beside the running (frozen) replica, signed with its share and checked as inherit checks
      // it, as `quorumfence replica export --data DIR --key KEY --cluster OLD` and `reshare inherit` do.
      const reader = SigningRecord.open(recordDir(old.replica(i).dataDir), undefined, { readOnly: true });
      let signed;
      try {
        signed = signFrozenExport(
          reader,
          oldCluster,
          loadReplicaKeyFile(join(old.keysDir, `replica-${i}.key`), oldCluster),
        );
      } finally {
        await reader.close();
      }
      const report = readFrozenExport(JSON.parse(JSON.stringify(signed)), oldCluster, `replica ${i}'s export`);
      // A Byzantine survivor holds its share, so it can sign any lie: its signed lie verifies like this report.
      out.push(deployment.byzantine.includes(i) ? lie(report, byzantineReport, random) : report);
    }
    return out;
  });
  step(
    `exported the frozen records of ${survivors.join(', ')}` +
      (survivors.some((i) => deployment.byzantine.includes(i))
        ? `; Byzantine ${survivors.filter((i) => deployment.byzantine.includes(i)).join(', ')} reports ${byzantineReport}`
        : ''),
  );

  // Step 4: node keys, the proposal (survivors deal: at least t_old), one `reshare run` per member.
  const memberDir = (i: number) => join(generationDir, `member-${i}`);
  const dealers = survivors;
  const ports = await freePorts(n);
  const cards = Array.from({ length: n }, (_, k) => {
    mkdirSync(memberDir(k + 1), { recursive: true, mode: 0o700 });
    const key = createNodeKeyFile(memberDir(k + 1));
    return { ...key, endpoint: localEndpoints(n)[k]!, ceremonyEndpoint: `ws://127.0.0.1:${ports[k]}` };
  });
  const proposal = makeProposal(cards, (n - 1) / 3, {
    acceptTimeoutMs: CEREMONY_ACCEPT_TIMEOUT_MS,
    phaseTimeoutMs: CEREMONY_PHASE_TIMEOUT_MS,
    reshare: { oldClusterId: oldCluster.idHex, oldMembershipVersion: oldCluster.membershipVersion, dealers },
  });
  const proposalFile = join(generationDir, 'proposal.json');
  writeFileSync(proposalFile, JSON.stringify(proposal.json, null, 2) + '\n');
  step(`reshare ceremony: ${n} members, dealers ${dealers.join(', ')} (quorumfence reshare run per member)`);
  const runs = await timed('ceremony', () =>
    Promise.all(
      Array.from({ length: n }, (_, k) => k + 1).map((i) =>
        runCommand(
          [
            'reshare',
            'run',
            '--data',
            memberDir(i),
            '--proposal',
            proposalFile,
            '--old-cluster',
            join(old.keysDir, 'cluster.json'),
            '--json',
            ...(dealers.includes(i) ? ['--old-key', join(old.keysDir, `replica-${i}.key`)] : []),
          ],
          CEREMONY_PROCESS_TIMEOUT_MS,
          // Member 1's phases show the ceremony's progress; any member's exclusions and aborts are shown.
          (line) => {
            if (i === 1 || /exclud|abort|against/i.test(line)) step(`  ${line}`);
          },
        ),
      ),
    ),
  );
  const failed = runs.findIndex((r) => r.code !== 0);
  if (failed >= 0)
    throw new QuorumFenceError(
      'CEREMONY_ABORTED',
      `reshare run of member ${failed + 1} exited ${runs[failed]!.code}: ${runs[failed]!.stderr.trim()}`,
    );
  const newCluster = loadClusterFile(join(memberDir(1), 'cluster.json'));
  const oldKey = clusterToJson(oldCluster).groupPublicKey;

  // Step 5: each new replica inherits from its own seeded 2f_old+1 of the frozen records before it starts.
  const keysDir = join(generationDir, 'keys');
  const dataRoot = join(generationDir, 'data');
  mkdirSync(keysDir, { recursive: true, mode: 0o700 });
  copyFileSync(join(memberDir(1), 'cluster.json'), join(keysDir, 'cluster.json'));
  const inheritedFrom: Record<string, number[]> = {};
  let inheritedResources = 0;
  let contested = 0;
  await timed('inherit', async () => {
    for (let i = 1; i <= n; i++) {
      copyFileSync(join(memberDir(i), 'replica.key'), join(keysDir, `replica-${i}.key`));
      const chosen = random.shuffle([...reports]).slice(0, 2 * oldF + 1);
      // The planted fault: the new member's record is made empty (told it is new), not raised from the old set's.
      const inherited = options.skipInheritance ? undefined : inheritRecords(chosen, oldF, newCluster.id);
      const store = SigningRecord.open(
        join(dataRoot, `replica-${i}`),
        { clusterId: newCluster.id, replicaIndex: i },
        { create: true },
      );
      try {
        if (inherited) await store.raiseFrom(inherited.entries, inherited.floor);
      } finally {
        await store.close();
      }
      if (!inherited) continue;
      inheritedFrom[String(i)] = inherited.from;
      inheritedResources = Math.max(inheritedResources, inherited.entries.length);
      contested = Math.max(contested, inherited.contested.length);
    }
  });
  step(
    options.skipInheritance
      ? 'PLANTED FAULT: the new replicas inherit nothing'
      : `every new replica inherited 2f_old+1 = ${2 * oldF + 1} frozen records (${inheritedResources} resources` +
          (contested > 0 ? `, ${contested} top epoch(s) blocked` : '') +
          ')',
  );

  const generation = await timed('start', () =>
    deployment.startGeneration({
      keysDir,
      dataRoot,
      byzantineArgs: (index) => options.byzantineArgs(index, keysDir),
    }),
  );
  step(`started membership ${newCluster.membershipVersion}: replicas ${generation.cluster.replicas.length}`);

  // Step 7: every member signs the description with its replica's actual endpoint; Byzantine members sign
  // another membership (a changed endpoint), which combineEndorsement finds and leaves out.
  const endorsed = await timed('endorse', () => {
    const direct = withEndpoints(
      newCluster,
      generation.cluster.replicas.map((r) => r.endpoint),
    );
    const forged = withEndpoints(direct, ['ws://127.0.0.1:1', ...direct.replicas.slice(1).map((r) => r.endpoint)]);
    const partials = direct.replicas.map((r) => {
      const key = loadReplicaKeyFile(join(keysDir, `replica-${r.index}.key`), direct);
      return signMembership(deployment.byzantine.includes(r.index) ? forged : direct, r.index, key.secretKey);
    });
    const message = combineEndorsement(direct, partials);
    return parseCluster({ ...clusterToJson(direct), endorsement: toHex(message.bytes) }, { backend: direct.backend });
  });
  const endorsedFile = join(generationDir, 'cluster-endorsed.json');
  writeFileSync(endorsedFile, JSON.stringify(clusterToJson(endorsed), null, 2) + '\n');
  const followed = followMembership(oldCluster, clusterToJson(endorsed));
  if (!followed.ok)
    throw new QuorumFenceError(followed.code, `the new membership cannot be followed: ${followed.message}`);
  step(
    `membership ${endorsed.membershipVersion} endorsed by the group key` +
      (deployment.byzantine.length > 0 ? ` (the forged partials of ${deployment.byzantine.join(', ')} left out)` : ''),
  );
  return {
    generation,
    endorsed,
    endorsedFile,
    summary: {
      replaced,
      replacedByzantine: deployment.byzantine.includes(replaced),
      atMs: Math.round(options.atMs),
      membershipVersion: { before: oldCluster.membershipVersion, after: endorsed.membershipVersion },
      clusterIdUnchanged: endorsed.idHex === oldCluster.idHex,
      groupKeyUnchanged: clusterToJson(endorsed).groupPublicKey === oldKey,
      dealers,
      inheritedFrom,
      inheritedResources,
      contested,
      byzantineReport,
      forgedPartials: [...deployment.byzantine],
      lostDataDir,
      newDataDir: generation.replica(replaced).dataDir,
      steps,
    },
  };
}
