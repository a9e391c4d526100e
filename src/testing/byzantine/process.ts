/**
 * The Byzantine replica process (`node dist/nodes/byzantine-replica.js`): the
 * real replica (ReplicaServer with its signing record, leases, signer and
 * access rules) on a private loopback port, behind a `ByzantineFront` that
 * listens where `--listen` says. Takes the replica's own run flags (except
 * TLS) plus the behaviour flags. Logs JSON lines like the replica; the
 * `"msg":"listening"` line carries the front's url, so the local launcher
 * starts it like any replica (`startLocalCluster({ entry: byzantineEntryPoint() })`).
 *
 * SIGUSR2 jumps the replica's clock forward by --clock-jump. SIGTERM/SIGINT
 * stop it gracefully; with QUORUMFENCE_EXIT_WITH_STDIN=1 it also stops when
 * stdin closes, as the replica does.
 */
import { randomInt } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { QuorumFenceError } from '../../common/errors.js';
import { createLogger } from '../../common/log.js';
import { loadReplicaKeyFile } from '../../cluster/replica-key.js';
import { DEFAULT_REPLICA_LIMITS } from '../../replica/options.js';
import { probeSigningRecord } from '../../replica/signing-record.js';
import { integerFlag, parseDuration, parseFlags, required } from '../../command/args.js';
import { watchForStop } from '../../command/lifecycle.js';
import { loadReplicaRunSettings, REPLICA_RUN_FLAGS } from '../../command/replica-settings.js';
import {
  BEHAVIOUR_DESCRIPTIONS,
  BYZANTINE_BEHAVIOURS,
  DEFAULT_BYZANTINE_PARAMS,
  byzantineParams,
  parseBehaviours,
} from './behaviours.js';
import { PartialForger } from './forge.js';
import { ByzantineFront } from './front.js';
import { JumpClock } from './jump-clock.js';

const d = DEFAULT_REPLICA_LIMITS;
const p = DEFAULT_BYZANTINE_PARAMS;

export const BYZANTINE_REPLICA_USAGE = `usage: node dist/nodes/byzantine-replica.js --cluster FILE --key FILE --data DIR [replica options]
                                           [--behaviour NAME[,NAME...]] [behaviour options]

A real replica behind a front that lies on purpose: for tests, the demo and
chaos runs only. Never give it a production key.

replica options (as "quorumfence replica"; TLS is not offered here):
  --cluster FILE  --key FILE  --data DIR  --listen HOST:PORT (default 127.0.0.1:0)
  --config FILE  --signing-workers N (default ${d.signingWorkers})  --min-ttl DURATION  --max-ttl DURATION
  --max-in-flight N  --rate-limit N  --max-connections N

behaviour options:
  --behaviour LIST     comma-separated behaviours (default none: honest); with several,
                       each request gets one, picked by the seeded PRNG
  --rate P             chance (0..1) that a request gets a behaviour at all   (default ${p.rate})
  --seed N             seed of that PRNG                                      (default random)
  --slow DURATION      delay of every answer under slow                       (default ${p.slowMs}ms)
  --flood N            extra frames per answer under flood                    (default ${p.floodCount})
  --other-key FILE     another replica's key file, for other-replica
  --clock-jump DURATION  how far SIGUSR2 jumps the replica's clock            (default ${p.clockJumpMs}ms)

behaviours:
${BYZANTINE_BEHAVIOURS.map((b) => `  ${b.padEnd(15)} ${BEHAVIOUR_DESCRIPTIONS[b]}`).join('\n')}

HTTP on the same port: GET /byzantine (state, how often each behaviour
acted), PUT /byzantine {"behaviours":[...],"rate":1,"slowMs":500,"floodCount":100,
"jumpClockMs":1000} to change them while running; /healthz and /metrics are
the real replica's.
`;

function rateFlag(value: string | undefined): number {
  if (value === undefined) return p.rate;
  const rate = Number(value);
  if (!/^\d*\.?\d+$/.test(value) || !(rate >= 0 && rate <= 1))
    throw new QuorumFenceError('INVALID_OPTION', `--rate expects a number in 0..1, got "${value}"`);
  return rate;
}

/**
 * Runs until a signal (or stdin closing, under a launcher); resolves to the exit code.
 * @throws QuorumFenceError INVALID_OPTION and everything ReplicaServer.start throws
 */
export async function runByzantineReplica(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(BYZANTINE_REPLICA_USAGE);
    return 0;
  }
  const { values } = parseFlags(argv, {
    ...REPLICA_RUN_FLAGS,
    behaviour: { type: 'string' },
    rate: { type: 'string' },
    seed: { type: 'string' },
    slow: { type: 'string' },
    flood: { type: 'string' },
    'other-key': { type: 'string' },
    'clock-jump': { type: 'string' },
  });
  const behaviours = parseBehaviours(values.behaviour ?? '');
  const seed = values.seed === undefined ? randomInt(0, 2 ** 31) : integerFlag(values.seed, 'seed', 0, 0, 2 ** 32 - 1);
  const params = byzantineParams({
    rate: rateFlag(values.rate),
    slowMs: parseDuration(values.slow, 'slow', p.slowMs),
    floodCount: integerFlag(values.flood, 'flood', p.floodCount, 0, 100_000),
    clockJumpMs: parseDuration(values['clock-jump'], 'clock-jump', p.clockJumpMs),
  });

  // no-record: the real signing record, in a directory that does not outlive the process.
  const noRecord = behaviours.includes('no-record');
  const dataRoot = resolve(required(values.data, 'data'));
  const dataDir = noRecord ? join(dataRoot, 'no-record') : dataRoot;
  if (noRecord) {
    rmSync(dataDir, { recursive: true, force: true });
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  }
  const storeProbe = probeSigningRecord(dataDir);
  storeProbe.catch(() => undefined); // Reported when ReplicaServer.start awaits it.

  // The real replica's flags, checked and loaded the way the replica does it.
  const { listen, limits, access, clusterJson, cluster, keyJson, key, operatorSecret } = loadReplicaRunSettings(values);
  const otherKey = values['other-key'] ? loadReplicaKeyFile(resolve(values['other-key']), cluster) : undefined;
  if (otherKey && otherKey.index === key.index)
    throw new QuorumFenceError('INVALID_OPTION', "--other-key must be another replica's key");

  const { ReplicaServer } = await import('../../replica/server.js');
  const logger = createLogger('byzantine-replica');
  const clock = new JumpClock();
  const watch = watchForStop(logger);
  let fatalError: Error | undefined;
  const server = await ReplicaServer.start({
    cluster,
    key,
    clusterJson,
    keyJson,
    dataDir,
    storeProbe,
    host: '127.0.0.1',
    port: 0,
    access,
    limits,
    // The real replica's admin endpoint (POST /admin/freeze), which the front passes on: a reshare freezes it too.
    ...(operatorSecret === undefined ? {} : { operatorSecret }),
    clock,
    logger,
    // A faulty replica may start from an empty record (no-record does on purpose): it is one of the f.
    createStore: true,
    onFatal: (error) => {
      fatalError = error;
      watch.stop();
    },
  }).catch((error: unknown) => {
    // One that cannot start exits at once with its error, rather than wait on stdin until a launcher gives up.
    watch.dispose();
    throw error;
  });
  let front: ByzantineFront;
  try {
    front = await ByzantineFront.start({
      innerUrl: server.url,
      cluster,
      replicaIndex: key.index,
      forger: new PartialForger(cluster.backend, key, otherKey),
      behaviours,
      params,
      seed,
      clock,
      host: listen.host,
      port: listen.port,
      maxFrameBytes: server.limits.maxFrameBytes,
      logger,
    });
  } catch (error) {
    await server.close();
    throw new QuorumFenceError(
      'IO_ERROR',
      `cannot listen on ${listen.host}:${listen.port}: ${(error as Error).message}`,
    );
  }
  logger.info(
    {
      url: front.url,
      healthUrl: front.url.replace(/^ws/, 'http') + '/healthz',
      replica: key.index,
      clusterId: cluster.idHex,
      behaviours,
      seed,
      realReplicaUrl: server.url,
      dataDir,
    },
    'listening',
  );
  const onJump = () => {
    clock.jump(front.state().params.clockJumpMs);
    logger.info({ offsetMs: clock.offsetMs }, 'clock jumped');
  };
  process.on('SIGUSR2', onJump);
  await watch.stopped;
  await front.close();
  await server.close();
  watch.dispose();
  process.off('SIGUSR2', onJump);
  if (fatalError) throw new QuorumFenceError('INTERNAL', fatalError.message);
  return 0;
}
