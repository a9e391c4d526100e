/**
 * `quorumfence-dev demo` (what `npm start` runs): a whole cluster on this machine
 * and the story the project exists for, told as a timeline.
 *
 *  1. Worker A takes the lease and writes. A stalls past its lease (a stand-in
 *     for a GC pause). Worker B gets a larger epoch and writes. A wakes and
 *     writes with its old token: the resource refuses it.
 *  2. Replica 4 turns malicious (equivocates, sends garbage partials). Both
 *     workers keep taking turns: every acquire succeeds, no two tokens share
 *     an epoch (the history checker reads the resource's guard log and every
 *     token), and the liar is named.
 *
 * Every child process stops when this one exits or gets Ctrl-C. With --keep
 * the cluster stays up and the demo prints commands to use against it.
 */
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { isAbsolute, join, relative, resolve } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { localOperatorSecret } from '../common/operator-secret.js';
import { clusterToJson, withEndpoints, type Cluster } from '../cluster/description.js';
import { dealLocalCluster, startLocalCluster, startLocalResource, type LocalCluster } from '../cluster/launcher.js';
import type { LocalProcess } from '../cluster/local-process.js';
import { QuorumFenceClient } from '../client/client.js';
import { createIdentityFile, generateIdentity, type Identity } from '../client/identity.js';
import type { Lease } from '../client/lease.js';
import type { ReplicaFault } from '../client/evidence.js';
import { parseGuardLogEntry, type GuardLogEntry } from '../guard/log.js';
import { byzantineEntryPoint, byzantineState, controlByzantine } from '../testing/byzantine/control.js';
import { checkHistory, formatViolation } from '../testing/history-checker.js';
import { parseDuration, parseFlags, type Command } from '../command/args.js';
import { directoryLockHolder, LOCK_FILES, takeDirectoryLock } from '../command/directory-lock.js';

const usage = `usage: quorumfence-dev demo [--keep] [--dir DIR] [--ttl DURATION] [--pause DURATION] [--rounds N]

Starts 4 replicas (f = 1) and the reference guarded resource as separate
processes on 127.0.0.1, then plays two scenes:
  1. on demo/orders, a worker stalls past its lease and writes with its old
     token: refused;
  2. replica 4 turns malicious (equivocates, sends garbage) while the workers
     take turns on demo/ledger: acquires still succeed, tokens stay unique,
     and the liar is named.
An epoch that is not the last one plus one is explained where it appears.
Prints a timeline and a summary; exits 0 when every expectation held.

options:
  --keep            leave the cluster running afterwards (Ctrl-C stops it) and
                    print quorumfence commands to use against it
  --dir DIR         where keys and data go (default .quorumfence/demo; emptied first,
                    unless a demo still runs there: then it is refused, STORE_LOCKED)
  --ttl DURATION    lease length in scene 1   (default 2s)
  --pause DURATION  worker A's stall          (default 3.5s; longer than --ttl)
  --rounds N        turns per worker in scene 2 (default 6)
`;

const MARKER = '.quorumfence-demo';
const RESOURCE = 'demo/orders';
const LEDGER = 'demo/ledger';

interface Context {
  readonly startedAt: number;
  readonly cluster: Cluster;
  readonly resourceUrl: string;
  readonly capturedTokens: string[];
  readonly faults: ReplicaFault[];
  /** Per resource, the epoch of the last token the demo got: a larger next one than last + 1 is explained. */
  readonly lastEpochs: Map<string, bigint>;
}

function say(ctx: { startedAt: number }, who: string, text: string): void {
  const seconds = ((performance.now() - ctx.startedAt) / 1000).toFixed(2).padStart(6);
  process.stdout.write(`[${seconds}s] ${who.padEnd(9)} ${text}\n`);
}

function heading(text: string): void {
  process.stdout.write(`\n${text}\n${'-'.repeat(text.length)}\n`);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function put(ctx: Context, resource: string, key: string, token: string, value: string) {
  const response = await fetch(`${ctx.resourceUrl}/kv/${encodeURIComponent(resource)}/${encodeURIComponent(key)}`, {
    method: 'PUT',
    headers: { authorization: `QuorumFence ${token}` },
    body: value,
    signal: AbortSignal.timeout(10_000),
  });
  const body = (await response.json()) as {
    ok: boolean;
    code?: string;
    barrier?: string | number;
    epoch?: string | number;
  };
  return { status: response.status, ...body };
}

async function read(ctx: Context, resource: string, key: string): Promise<string> {
  const response = await fetch(`${ctx.resourceUrl}/kv/${encodeURIComponent(resource)}/${encodeURIComponent(key)}`, {
    signal: AbortSignal.timeout(10_000),
  });
  return response.ok ? await response.text() : `(${response.status})`;
}

async function guardLog(ctx: Context): Promise<GuardLogEntry[]> {
  const entries: GuardLogEntry[] = [];
  for (let after = 0; ;) {
    const response = await fetch(`${ctx.resourceUrl}/log?after=${after}&limit=500`, {
      // The launcher gave the resource this process's operator secret; the checker needs the tokens.
      headers: { authorization: `Bearer ${localOperatorSecret()}` },
      signal: AbortSignal.timeout(10_000),
    });
    const page = ((await response.json()) as { entries: unknown[] }).entries.map(parseGuardLogEntry);
    if (page.length === 0) return entries;
    entries.push(...page);
    after = page[page.length - 1]!.seq;
  }
}

async function acquire(
  ctx: Context,
  who: string,
  client: QuorumFenceClient,
  resource: string,
  options: { ttlMs: number; waitMs: number; autoRenew?: boolean },
): Promise<Lease> {
  const result = await client.acquire(resource, options);
  ctx.faults.push(...result.faults);
  if (!result.ok)
    throw new QuorumFenceError(
      'INTERNAL',
      `${who} could not acquire ${resource}: ${result.reason} (${result.message})`,
    );
  ctx.capturedTokens.push(result.lease.tokenText);
  const last = ctx.lastEpochs.get(resource);
  ctx.lastEpochs.set(resource, result.lease.epoch);
  if (last !== undefined && result.lease.epoch > last + 1n)
    say(ctx, 'replicas', skippedEpochs(resource, last, result.lease.epoch));
  return result.lease;
}

/**
 * Why a token's epoch is not the last one plus one. An epoch is spent once any replica signed it: an attempt
 * that got some replicas' signatures but not the 3 a token needs (it came while another holder's lease ran,
 * or at the same moment as another worker's, or a lying replica spoiled it) releases them, and no replica
 * signs a released epoch again (docs/protocol.md); a compacted record's floor skips epochs the same way. A
 * token only has to be above the last one.
 */
function skippedEpochs(resource: string, last: bigint, epoch: bigint): string {
  const skipped = epoch - last === 2n ? `epoch ${last + 1n} was` : `epochs ${last + 1n}..${epoch - 1n} were`;
  return `${resource}: ${skipped} skipped, not lost: an attempt that some replicas signed but not 3 gave it up, and no replica signs a given-up epoch again; a token needs only a larger epoch than the last`;
}

/** Scene 1. Returns whether the stale write was refused. */
async function staleWriteScene(
  ctx: Context,
  a: QuorumFenceClient,
  b: QuorumFenceClient,
  ttlMs: number,
  pauseMs: number,
): Promise<boolean> {
  heading('Scene 1: a paused worker writes with an expired lease');
  const leaseA = await acquire(ctx, 'A', a, RESOURCE, { ttlMs, waitMs: 0, autoRenew: false });
  say(
    ctx,
    'worker A',
    `acquired ${RESOURCE} at epoch ${leaseA.epoch} (lease ${ttlMs} ms, token ${leaseA.tokenText.slice(0, 12)}…)`,
  );
  const first = await put(ctx, RESOURCE, 'total', leaseA.tokenText, '100');
  say(
    ctx,
    'worker A',
    `PUT ${RESOURCE} total=100 with epoch ${leaseA.epoch} → ${first.status} ${first.ok ? 'accepted' : first.code} (barrier ${first.barrier})`,
  );
  say(ctx, 'worker A', `stalls for ${pauseMs} ms (a stand-in for a GC pause): it cannot renew, and its lease runs out`);
  const waking = sleep(pauseMs);

  say(ctx, 'worker B', `asks for ${RESOURCE}; the replicas say it is busy until A's lease ends`);
  const leaseB = await acquire(ctx, 'B', b, RESOURCE, { ttlMs: 10_000, waitMs: ttlMs + 10_000 });
  say(ctx, 'worker B', `acquired ${RESOURCE} at epoch ${leaseB.epoch} once A's lease had run out`);
  const second = await put(ctx, RESOURCE, 'total', leaseB.tokenText, '250');
  say(
    ctx,
    'worker B',
    `PUT ${RESOURCE} total=250 with epoch ${leaseB.epoch} → ${second.status} ${second.ok ? 'accepted' : second.code} (barrier ${second.barrier})`,
  );
  await leaseB.release();
  say(ctx, 'worker B', `released ${RESOURCE}`);

  await waking;
  say(ctx, 'worker A', `wakes up, still believing it holds the lease, and writes with its epoch-${leaseA.epoch} token`);
  const stale = await put(ctx, RESOURCE, 'total', leaseA.tokenText, '101');
  const refused = stale.status === 409 && stale.code === 'stale';
  say(
    ctx,
    'resource',
    `PUT ${RESOURCE} total=101 with epoch ${leaseA.epoch} → ${stale.status} ${stale.code ?? 'accepted'}: barrier is ${stale.barrier}, ${refused ? 'REFUSED' : 'ACCEPTED (this must not happen)'}`,
  );
  say(
    ctx,
    'resource',
    `${RESOURCE} total = ${await read(ctx, RESOURCE, 'total')} (B's write survived; without the fence A would have overwritten it)`,
  );
  return refused;
}

/** Scene 2. Returns the malicious replica's index as named by clients, and whether the history is clean. */
async function maliciousReplicaScene(
  ctx: Context,
  clients: [QuorumFenceClient, QuorumFenceClient],
  liarUrl: string,
  rounds: number,
) {
  heading('Scene 2: replica 4 turns malicious');
  await controlByzantine(liarUrl, { behaviours: ['equivocate', 'garbage'], rate: 1 });
  say(ctx, 'replica 4', 'now equivocates (signs any holder at any epoch) and sends garbage partials');
  say(
    ctx,
    'replica 4',
    'a token needs 3 signatures and each honest replica signs one holder per epoch, so its extra votes never make a second token',
  );
  say(
    ctx,
    'workers',
    `take turns on ${LEDGER}, another resource: its epochs and its barrier are its own, apart from those of ${RESOURCE}`,
  );
  const faultsBefore = ctx.faults.length;
  let granted = 0;
  const turn = async (client: QuorumFenceClient, who: string, round: number) => {
    const lease = await acquire(ctx, who, client, LEDGER, { ttlMs: 5_000, waitMs: 15_000 });
    granted++;
    const write = await put(ctx, LEDGER, 'last-writer', lease.tokenText, `${who} round ${round}`);
    say(
      ctx,
      who,
      `${LEDGER} epoch ${String(lease.epoch).padStart(2)} → PUT ${write.status} ${write.ok ? 'accepted' : write.code}`,
    );
    await lease.release();
  };
  await Promise.all(
    clients.map(async (client, k) => {
      for (let round = 1; round <= rounds; round++) {
        await turn(client, k === 0 ? 'worker A' : 'worker B', round);
        // A moment between turns, so the other worker gets in and the turns interleave.
        await sleep(10 + Math.random() * 30);
      }
    }),
  );
  // A client stops listening once t partials verify, so a liar that answers last goes unseen; on a busy
  // machine that can last a while. A few more turns (bounded) let it show itself.
  for (let extra = 1; extra <= 30 && !ctx.faults.slice(faultsBefore).some((fault) => fault.replica === 4); extra++) {
    if (extra === 1) say(ctx, 'clients', 'replica 4 has answered after the honest replicas so far; a few more turns');
    await turn(clients[extra % 2]!, extra % 2 === 0 ? 'worker A' : 'worker B', rounds + extra);
    await sleep(5);
  }
  const state = await byzantineState(liarUrl);
  const acts = Object.entries(state.acts);
  const lies = acts.reduce((sum, [, count]) => sum + (count ?? 0), 0);
  say(
    ctx,
    'replica 4',
    `lied in ${lies} of ${state.requests} requests (${acts.map(([behaviour, count]) => `${behaviour} ${count}`).join(', ') || 'none'})`,
  );
  const blamed = new Map<number, Set<string>>();
  for (const fault of ctx.faults.slice(faultsBefore)) {
    if (!blamed.has(fault.replica)) blamed.set(fault.replica, new Set());
    blamed.get(fault.replica)!.add(fault.kind);
  }
  for (const [replica, kinds] of blamed)
    say(ctx, 'clients', `caught replica ${replica} lying: ${[...kinds].join(', ')}`);
  return { granted, blamed };
}

/**
 * Takes `dir` for this run and empties it; returns the function that gives it back. A demo kept running
 * (--keep) holds `dir/demo.lock`, and its replicas and resource hold their stores' locks: while any of them
 * runs, this refuses (STORE_LOCKED) and deletes nothing, since the running demo would go on over deleted keys
 * and stores and the commands it printed would point at a cluster about to die.
 * @throws QuorumFenceError FILE_EXISTS (a directory the demo did not make), STORE_LOCKED, IO_ERROR
 */
function takeDemoDir(dir: string): () => void {
  if (existsSync(dir) && readdirSync(dir).length > 0 && !existsSync(join(dir, MARKER)))
    throw new QuorumFenceError('FILE_EXISTS', `${dir} exists and was not made by the demo; choose another --dir`);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const elsewhere = `stop it first (Ctrl-C in its terminal), or run this one beside it with --dir OTHER (npm start -- --dir ${relative(process.cwd(), dir) || dir}-2)`;
  let release: () => void;
  try {
    release = takeDirectoryLock(dir, LOCK_FILES.demo, 'demo');
  } catch (error) {
    if (!(error instanceof QuorumFenceError) || error.code !== 'STORE_LOCKED') throw error;
    throw new QuorumFenceError(
      'STORE_LOCKED',
      `a demo is running in ${dir} (process ${String(error.details?.pid)}) and would lose its keys and stores; ${elsewhere}`,
      { dir },
    );
  }
  try {
    const data = join(dir, 'data');
    for (const store of existsSync(data) ? readdirSync(data) : []) {
      const pid =
        directoryLockHolder(join(data, store), LOCK_FILES.replica) ??
        directoryLockHolder(join(data, store), LOCK_FILES.resource);
      if (pid !== undefined)
        throw new QuorumFenceError(
          'STORE_LOCKED',
          `process ${pid} of an earlier demo still runs on ${join(data, store)}; ${elsewhere}`,
          { dir, pid },
        );
    }
    for (const entry of readdirSync(dir))
      if (entry !== LOCK_FILES.demo) rmSync(join(dir, entry), { recursive: true, force: true });
    writeFileSync(join(dir, MARKER), 'made by quorumfence-dev demo; emptied by the next run unless a demo runs here\n');
  } catch (error) {
    release();
    throw error;
  }
  return release;
}

/** A word for a POSIX shell: as is when it needs no quoting, else in single quotes. Pure. */
function shellWord(text: string): string {
  return /^[\w./:@%+=,-]+$/.test(text) ? text : `'${text.replace(/'/g, `'\\''`)}'`;
}

/**
 * The commands printed for a kept demo, one per line, each runnable as printed in a POSIX shell from the
 * folder the demo ran in, one after the other: the lease acquire takes is released before lock takes the next.
 * Pure.
 */
export function keptDemoCommands(options: {
  readonly cwd: string;
  readonly clusterFile: string;
  readonly identityFile: string;
  readonly leaseFile: string;
  readonly resource: string;
  readonly resourceUrl: string;
  readonly replicaUrl: string;
}): string[] {
  const rel = (path: string) => relative(options.cwd, path) || path;
  // What node's require() takes: a path that starts with "./" or "../" (or is absolute), else it looks in node_modules.
  const requirable = (path: string) => {
    const r = rel(path);
    return isAbsolute(r) || r.startsWith('../') ? r : `./${r}`;
  };
  const field = (name: string) =>
    `"$(node -p ${shellWord(`require(${JSON.stringify(requirable(options.leaseFile))}).${name}`)})"`;
  // In this repository the command is an npm script (npx would look for the package elsewhere).
  const q = 'npm run -s quorumfence --';
  const r = shellWord(options.resource);
  const put = `curl -fsS -X PUT -H "Authorization: QuorumFence $QUORUMFENCE_TOKEN" --data 42 ${options.resourceUrl}/kv/${encodeURIComponent(options.resource)}/total`;
  return [
    `export QUORUMFENCE_CLUSTER=${shellWord(rel(options.clusterFile))} QUORUMFENCE_IDENTITY=${shellWord(rel(options.identityFile))}`,
    `${q} health`,
    `${q} status ${r}`,
    `${q} acquire ${r} --ttl 30s --json > ${shellWord(rel(options.leaseFile))}`,
    `${q} verify ${field('token')}`,
    `${q} release ${r} ${field('epoch')} --session ${field('session')}`,
    `${q} lock ${r} -- sh -c ${shellWord(put)}`,
    `curl -fsS ${options.resourceUrl}/log`,
    `curl -fsS ${options.resourceUrl}/metrics`,
    `curl -fsS ${options.replicaUrl}/metrics`,
  ];
}

export const command: Command = {
  summary: 'run a local cluster and show a stale write refused and a lying replica outvoted',
  usage,
  async run(argv) {
    const { values } = parseFlags(argv, {
      keep: { type: 'boolean' },
      dir: { type: 'string' },
      ttl: { type: 'string' },
      pause: { type: 'string' },
      rounds: { type: 'string' },
    });
    const ttlMs = parseDuration(values.ttl, 'ttl', 2_000);
    const pauseMs = parseDuration(values.pause, 'pause', 3_500);
    if (pauseMs <= ttlMs)
      throw new QuorumFenceError(
        'INVALID_OPTION',
        `--pause (${pauseMs} ms) must be longer than --ttl (${ttlMs} ms) for the lease to run out`,
      );
    const rounds = Number(values.rounds ?? 6);
    if (!Number.isInteger(rounds) || rounds < 1 || rounds > 100)
      throw new QuorumFenceError('INVALID_OPTION', `--rounds expects 1..100, got "${values.rounds}"`);
    const dir = resolve(values.dir ?? join('.quorumfence', 'demo'));
    const startedAt = performance.now();
    const stops: (() => Promise<unknown>)[] = [];
    let releaseDir: () => void = () => undefined;
    const stopAll = async () => {
      for (const stop of stops.splice(0).reverse()) await stop().catch(() => undefined);
    };
    const onSignal = () => {
      process.stdout.write('\nstopping the demo cluster...\n');
      void stopAll().then(() => {
        releaseDir();
        process.exit(130);
      });
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);

    try {
      releaseDir = takeDemoDir(dir);
      process.stdout.write(
        'quorumfence-dev demo: 4 replicas (f = 1, any 3 sign) and a guarded key-value resource, as processes on this machine\n',
      );
      const keys = join(dir, 'keys');
      dealLocalCluster(keys, 4);
      const honest = await startLocalCluster({
        newStores: true,
        dir: keys,
        dataRoot: join(dir, 'data'),
        indices: [1, 2, 3],
      });
      stops.push(() => honest.close());
      // Replica 4 is the real replica behind a front that can lie; it starts honest.
      const wrapped: LocalCluster = await startLocalCluster({
        newStores: true,
        dir: keys,
        dataRoot: join(dir, 'data'),
        indices: [4],
        entry: byzantineEntryPoint(),
      });
      stops.push(() => wrapped.close());
      const cluster = withEndpoints(honest.cluster, [...honest.replicas.map((r) => r.url), wrapped.replica(4).url]);
      const clusterFile = join(dir, 'cluster.json');
      writeFileSync(clusterFile, JSON.stringify(clusterToJson(cluster), null, 2) + '\n');
      const resource: LocalProcess = await startLocalResource({ clusterFile, dataDir: join(dir, 'data', 'resource') });
      stops.push(() => resource.stop());
      const ctx: Context = {
        startedAt,
        cluster,
        resourceUrl: resource.url,
        capturedTokens: [],
        faults: [],
        // Both resources are new in this cluster: their first token could be epoch 1.
        lastEpochs: new Map([
          [RESOURCE, 0n],
          [LEDGER, 0n],
        ]),
      };
      say(ctx, 'setup', `cluster ${cluster.idHex.slice(0, 16)}… keys in ${relative(process.cwd(), keys) || keys}`);
      say(ctx, 'setup', `replicas ${cluster.replicas.map((r) => r.endpoint).join(' ')}`);
      say(ctx, 'setup', `resource ${resource.url}`);

      const identities: Identity[] = [generateIdentity(), generateIdentity()];
      const [a, b] = await Promise.all(identities.map((identity) => QuorumFenceClient.connect(cluster, identity)));
      stops.push(
        () => a!.close(),
        () => b!.close(),
      );

      const refused = await staleWriteScene(ctx, a!, b!, ttlMs, pauseMs);
      const scene2 = await maliciousReplicaScene(ctx, [a!, b!], wrapped.replica(4).url, rounds);

      heading('Summary');
      const log = await guardLog(ctx);
      const check = checkHistory({ guardLogs: [log], capturedTokens: ctx.capturedTokens }, cluster);
      const accepted = log.filter((e) => e.accepted).length;
      const liarNamed = scene2.blamed.has(4) && [...scene2.blamed.keys()].every((replica) => replica === 4);
      const lines = [
        `stale write refused by the resource: ${refused ? 'yes' : 'NO'}`,
        `acquires with a malicious replica: ${scene2.granted} of ${scene2.granted} succeeded`,
        `tokens issued: ${ctx.capturedTokens.length}; resource log: ${log.length} attempts, ${accepted} accepted`,
        `history check (epochs never down, one token per epoch, every accepted token valid): ${check.ok ? 'clean' : 'VIOLATED'}`,
        `liar named: ${liarNamed ? 'replica 4' : `NO (blamed: ${[...scene2.blamed.keys()].join(', ') || 'nobody'})`}`,
      ];
      process.stdout.write(lines.map((l) => `  ${l}\n`).join(''));
      if (!check.ok) for (const violation of check.violations) process.stdout.write(formatViolation(violation) + '\n');
      const ok = refused && scene2.granted >= 2 * rounds && check.ok && liarNamed;

      if (values.keep) {
        const me = join(dir, 'me.key');
        createIdentityFile(me);
        await controlByzantine(wrapped.replica(4).url, { behaviours: [], rate: 1 });
        const commands = keptDemoCommands({
          cwd: process.cwd(),
          clusterFile,
          identityFile: me,
          leaseFile: join(dir, 'lease.json'),
          resource: RESOURCE,
          resourceUrl: resource.url,
          replicaUrl: cluster.replicas[0]!.endpoint.replace(/^ws/, 'http'),
        });
        process.stdout.write(
          `\nThe cluster keeps running (replica 4 honest again). In another terminal, in this folder, these run\n` +
            `one after the other (acquire takes a lease for 30 s, release ends it, lock takes the next):\n` +
            commands.map((line) => `  ${line}\n`).join('') +
            `A second demo refuses to start in ${relative(process.cwd(), dir) || dir} while this one runs.\n` +
            `Press Ctrl-C to stop it.\n`,
        );
        await new Promise(() => undefined); // Until Ctrl-C.
      }
      process.stdout.write(ok ? '\nEvery expectation held.\n' : '\nSome expectation failed (see above).\n');
      return ok ? 0 : 1;
    } finally {
      await stopAll();
      releaseDir();
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    }
  },
};
