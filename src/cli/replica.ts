/**
 * `quorumfence replica`: run a replica (the default when only flags are
 * given), or `export` / `import` its signing record.
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { createLogger } from '../common/log.js';
import { readJsonFile, refuseIrregularFile, writeFileDurably } from '../common/files.js';
import { loadClusterFile, type Cluster } from '../cluster/description.js';
import { loadReplicaKeyFile, type ReplicaKey } from '../cluster/replica-key.js';
import { signFrozenExport } from '../replica/frozen-export.js';
import { exportInterchange, parseInterchange } from '../replica/interchange.js';
import { DEFAULT_REPLICA_LIMITS } from '../replica/options.js';
import { probeSigningRecord, SigningRecord } from '../replica/signing-record.js';
import { parseFlags, required, runSubcommand, type Command } from '../command/args.js';
import { directoryLockHolder, LOCK_FILES } from '../command/directory-lock.js';
import { watchForStop } from '../command/lifecycle.js';
import { readPem } from '../command/pem.js';
import { endpointListenAddress, endpointPort } from '../command/endpoint-listen.js';
import { INIT_USAGE, initNode } from './replica-init.js';
import { loadReplicaRunSettings, REPLICA_RUN_FLAGS } from '../command/replica-settings.js';

const d = DEFAULT_REPLICA_LIMITS;

const usage = `usage: quorumfence replica [run] --cluster FILE --key FILE --data DIR [options]
       quorumfence replica export --data DIR [--out FILE] [--key FILE --cluster FILE]
       quorumfence replica import --data DIR --in FILE --cluster FILE
       quorumfence replica init --data DIR --endpoint URL [--card FILE] [--if-missing]
       quorumfence replica init --data DIR --cluster FILE --key FILE

run (the default): serve the replica protocol over WebSocket, with GET /healthz
and GET /metrics on the same port. Logs JSON lines; the "listening" line holds
the actual url. SIGTERM or SIGINT stops it gracefully.

  --cluster FILE            the cluster description (cluster.json)              (required)
  --key FILE                this replica's key file (replica-<i>.key)            (required)
  --data DIR                the signing record's directory                        (required)
                            never created here: a replica without its record refuses to start
                            (STORE_MISSING); "replica init --cluster --key", "keygen --data", "dkg run"
                            and "reshare inherit" make it, once
  --listen HOST:PORT        where to listen; port 0 picks one (default: the host and port of this
                            replica's endpoint in --cluster, which must be an address of this machine)
  --config FILE             access rules (quorumfence/replica-access/v1); default: all holders, all resources
  --signing-workers N       signing threads, used while the main thread is busy; 0 = main thread only
                                                                                (default ${d.signingWorkers})
  --min-ttl DURATION        shortest lease a client may ask for                  (default ${d.minTtlMs}ms)
  --max-ttl DURATION        longest lease, and every lease's length after a restart (default ${d.maxTtlMs}ms)
  --max-in-flight N         unanswered requests per connection                  (default ${d.maxInFlightPerConnection})
  --rate-limit N            requests per second per connection (also the burst)  (default ${d.requestsPerSecondPerConnection})
  --leases-rate-limit N     \`leases\` requests (the console's) per second per connection, on top of
                            --rate-limit (also the burst)                      (default ${d.leasesPerSecondPerConnection})
  --max-connections N       open connections                                    (default ${d.maxConnections})
  --max-unauthenticated-per-address N
                            connections from one address prefix (an IPv4 address, an IPv6 /64) not yet
                            authenticated; a newcomer beyond it displaces the oldest (default ${d.maxUnauthenticatedPerAddress})
  --max-unauthenticated N   connections not yet authenticated, from all addresses; a newcomer beyond it, or
                            beyond --max-connections, displaces the oldest of the prefix holding the most
                                                                                (default ${d.maxUnauthenticated})
  --retention DURATION      keep a record this long after its grant once its lease ended (default ${d.retentionMs}ms)
  --compaction-interval DURATION
                            how often records past retention are folded into the floor (default ${d.compactionIntervalMs}ms)
  --free-epoch-step N       how far above its record for a resource the replica grants without catch-up
                            evidence (default ${d.freeEpochStep}; docs/protocol.md, "Epoch steps")
  --max-epoch-step N        how far above its record (or floor) it grants on evidence from fewer than f+1
                            other replicas (default and most ${d.maxEpochStep}); clients' maxEpochStep option must match
  --tls-cert FILE           PEM certificate: serve wss:// (needs --tls-key)
  --tls-key FILE            PEM private key for --tls-cert
  --operator-secret-file FILE
                            a secret (one line, at least 22 characters) that opens POST /admin/freeze
                            ("quorumfence reshare freeze --url"); also read from $QUORUMFENCE_OPERATOR_SECRET.
                            Without it, the admin endpoint refuses everyone.

export: write the signing record as JSON (format quorumfence/signing-record/v2, with the floor)
to --out FILE (never replaced: FILE_EXISTS) or stdout. Safe while the replica
runs (read-only); it then says on stderr that the record may move on after the
export, unless the replica is frozen. With --key and --cluster (this replica's
key file and cluster.json), a FROZEN record is signed with the replica's share
(format v3): the only export "reshare inherit" takes. A record that is not
frozen is not signed (EXPORT_NOT_FROZEN). A --data without a signing record is
INVALID_OPTION, naming the directory.

import: raise the watermarks in --data from an interchange file. Never lowers
a watermark; refuses (changing nothing) a file from another cluster or replica,
or one that names another holder at an equal epoch. The replica must be stopped.

${INIT_USAGE}`;

export const command: Command = {
  summary: 'run a replica, export/import its signing record, or init its node key',
  usage,
  run: (argv) =>
    runSubcommand(argv, { run: runReplica, export: exportRecord, import: importRecord, init: initNode }, runReplica),
};

async function runReplica(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, {
    ...REPLICA_RUN_FLAGS,
    'tls-cert': { type: 'string' },
    'tls-key': { type: 'string' },
  });
  if ((values['tls-cert'] === undefined) !== (values['tls-key'] === undefined)) {
    throw new QuorumFenceError('INVALID_OPTION', '--tls-cert and --tls-key go together');
  }
  // The store check runs in a child process; start it now so it overlaps loading the key.
  const storeProbe = probeSigningRecord(resolve(required(values.data, 'data')));
  storeProbe.catch(() => undefined); // Reported when ReplicaServer.start awaits it.
  const tls = values['tls-cert']
    ? { cert: readPem(values['tls-cert'], 'tls-cert'), key: readPem(values['tls-key']!, 'tls-key') }
    : undefined;
  const { dataDir, listenGiven, limits, access, clusterJson, cluster, keyJson, key, operatorSecret, ...settings } =
    loadReplicaRunSettings(values);
  const endpoint = cluster.replicas[key.index - 1]!.endpoint;
  const listen = listenGiven ? settings.listen : await endpointListenAddress(endpoint);

  // Loaded here, not at the top: export and import need none of the network stack.
  const { ReplicaServer } = await import('../replica/server.js');
  const logger = createLogger('replica');
  const endpointPortNumber = endpointPort(new URL(endpoint));
  if (listenGiven && listen.port !== 0 && listen.port !== endpointPortNumber)
    logger.warn(
      { listen: `${listen.host}:${listen.port}`, endpoint },
      `--listen port ${listen.port} is not the port of this replica's endpoint in the cluster description (${endpointPortNumber}); clients connect to the endpoint, so something must forward it here`,
    );
  const watch = watchForStop(logger);
  let fatalError: Error | undefined;
  const server = await ReplicaServer.start({
    cluster,
    key,
    clusterJson,
    keyJson,
    dataDir,
    storeProbe,
    host: listen.host,
    port: listen.port,
    access,
    limits,
    tls,
    logger,
    ...(operatorSecret === undefined ? {} : { operatorSecret }),
    onFatal: (error) => {
      fatalError = error;
      watch.stop();
    },
  }).catch((error: unknown) => {
    // One that cannot start exits at once with its error, rather than wait on stdin until a launcher gives up.
    watch.dispose();
    throw error;
  });
  logger.info(
    {
      url: server.url,
      healthUrl: server.healthUrl,
      replica: key.index,
      clusterId: cluster.idHex,
      backend: cluster.backend.name,
      signingWorkers: limits.signingWorkers,
      dataDir,
    },
    'listening',
  );
  await watch.stopped;
  await server.close();
  watch.dispose();
  if (fatalError) throw new QuorumFenceError('INTERNAL', fatalError.message);
  return 0;
}

async function exportRecord(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, {
    data: { type: 'string' },
    out: { type: 'string' },
    key: { type: 'string' },
    cluster: { type: 'string' },
  });
  if ((values.key === undefined) !== (values.cluster === undefined))
    throw new QuorumFenceError('INVALID_OPTION', '--key and --cluster go together (they sign a frozen export)');
  const signer = values.key === undefined ? undefined : loadSigner(values.key, values.cluster!);
  const dataDir = existingRecordDir(values.data);
  if (values.out !== undefined) refuseOutFile(values.out);
  const store = SigningRecord.open(dataDir, undefined, { readOnly: true });
  let text: string;
  let frozen: boolean;
  try {
    text = signer ? frozenExportText(store, signer) : interchangeText(store);
    frozen = store.frozen !== undefined;
  } finally {
    await store.close();
  }
  writeInterchangeText(text, values.out);
  const running = directoryLockHolder(dataDir, LOCK_FILES.replica);
  if (running !== undefined && !frozen)
    process.stderr.write(
      `note: replica process ${running} runs on ${dataDir} and is not frozen: this export is its record as of now, and grants it signs later are not in it (freeze it first for a record that no longer changes: "quorumfence reshare freeze")\n`,
    );
  return 0;
}

/**
 * The --data of a command that reads an existing signing record (export, freeze): refused when it holds none,
 * before anything else is done, so a mistyped path says so instead of "store corrupt".
 * @throws QuorumFenceError INVALID_OPTION
 */
export function existingRecordDir(value: string | undefined): string {
  const dir = resolve(required(value, 'data'));
  // A directory whose identity file survives but whose data.mdb is gone is a damaged store: the store says so.
  if (!existsSync(join(dir, 'data.mdb')) && !existsSync(join(dir, 'signing-record.json')))
    throw new QuorumFenceError(
      'INVALID_OPTION',
      `--data ${dir} holds no signing record (${existsSync(dir) ? 'no data.mdb there' : 'no such directory'}); give the directory the replica runs with (its --data)`,
      { dir },
    );
  return dir;
}

/**
 * An --out the export will be written to: refused when something is there already (an export is evidence of
 * what a replica signed; one must not silently replace another), or when it is a link or a device.
 * @throws QuorumFenceError FILE_EXISTS, NOT_A_REGULAR_FILE
 */
export function refuseOutFile(out: string): void {
  const path = resolve(out);
  refuseIrregularFile(path);
  if (existsSync(path))
    throw new QuorumFenceError(
      'FILE_EXISTS',
      `--out ${path} already exists; refusing to replace it (choose another file, or remove it first)`,
      { path },
    );
}

/** The signing record as `replica export` prints it without a key: the (unsigned) interchange document. */
export function interchangeText(store: SigningRecord): string {
  return JSON.stringify(exportInterchange(store), null, 2) + '\n';
}

/** A replica's cluster.json and key file, loaded and checked against each other, to sign its frozen export. */
export interface ExportSigner {
  readonly cluster: Cluster;
  readonly key: ReplicaKey;
}

export function loadSigner(keyPath: string, clusterPath: string): ExportSigner {
  const cluster = loadClusterFile(resolve(clusterPath));
  return { cluster, key: loadReplicaKeyFile(resolve(keyPath), cluster) };
}

/**
 * The frozen record signed by its replica's share (format v3), as `reshare freeze --data` and
 * `replica export --key` print it.
 * @throws QuorumFenceError EXPORT_NOT_FROZEN, CLUSTER_MISMATCH, RESHARE_REFUSED (see signFrozenExport)
 */
export function frozenExportText(store: SigningRecord, signer: ExportSigner): string {
  return JSON.stringify(signFrozenExport(store, signer.cluster, signer.key), null, 2) + '\n';
}

/** An export to the file `out` (written durably, mode 0600, never replacing a file) or, without --out, to stdout. */
export function writeInterchangeText(text: string, out: string | undefined): void {
  if (out) writeFileDurably(resolve(out), text, { mode: 0o600, exclusive: true });
  else process.stdout.write(text);
}

async function importRecord(argv: string[]): Promise<number> {
  const { values } = parseFlags(argv, {
    data: { type: 'string' },
    in: { type: 'string' },
    cluster: { type: 'string' },
  });
  const cluster = loadClusterFile(resolve(required(values.cluster, 'cluster')));
  const inPath = resolve(required(values.in, 'in'));
  const { replica, entries, floor } = parseInterchange(
    readJsonFile(inPath, 'interchange file', 'BAD_INTERCHANGE'),
    cluster.id,
  );
  if (replica > cluster.n)
    throw new QuorumFenceError(
      'BAD_INTERCHANGE',
      `interchange: "replica" ${replica} is not in this cluster of ${cluster.n}`,
    );
  // A replica moved to new storage takes its record here: the file is its record, so the store may be made for it.
  const store = SigningRecord.open(
    resolve(required(values.data, 'data')),
    { clusterId: cluster.id, replicaIndex: replica },
    { create: true },
  );
  try {
    const summary = await store.raiseFrom(entries, floor);
    process.stdout.write(
      `imported ${inPath} into replica ${replica}'s signing record: ${summary.raised} watermark(s) raised, ${summary.unchanged} already at or above the file; floor ${store.floor}\n`,
    );
  } finally {
    await store.close();
  }
  return 0;
}
