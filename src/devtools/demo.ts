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
import { writeFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { clusterToJson, withEndpoints } from '../cluster/description.js';
import { dealLocalCluster, startLocalCluster, startLocalResource, type LocalCluster } from '../cluster/launcher.js';
import type { LocalProcess } from '../cluster/local-process.js';
import { QuorumFenceClient } from '../client/client.js';
import { createIdentityFile, generateIdentity, type Identity } from '../client/identity.js';
import { byzantineEntryPoint, controlByzantine } from '../testing/byzantine/control.js';
import { checkHistory, formatViolation } from '../testing/history-checker.js';
import { parseDuration, parseFlags, type Command } from '../command/args.js';
import { keptDemoCommands, takeDemoDir } from './demo-keep.js';
import {
  guardLog,
  heading,
  LEDGER,
  maliciousReplicaScene,
  RESOURCE,
  say,
  staleWriteScene,
  type Context,
} from './demo-scenes.js';

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
