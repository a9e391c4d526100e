/** `quorumfence resource`: run the reference guarded key-value resource over HTTP. */
import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { QuorumFenceError } from '../common/errors.js';
import { createLogger } from '../common/log.js';
import { loadClusterFile, type Cluster } from '../cluster/description.js';
import { DEFAULT_MAX_KEY_BYTES } from '../guard/core.js';
import {
  DEFAULT_HEADERS_TIMEOUT_MS,
  DEFAULT_MAX_BODY_BYTES,
  DEFAULT_REQUEST_TIMEOUT_MS,
  ResourceServer,
  type ResourceServerOptions,
} from '../guard/resource-server.js';
import { DEFAULT_TOKEN_CACHE_SIZE } from '../guard/verifier.js';
import { DEFAULT_MAX_REFUSED_LOG_ENTRIES } from '../guard/lmdb-guard.js';
import { MIN_OPERATOR_SECRET_LENGTH, OPERATOR_SECRET_ENV, readOperatorSecret } from '../common/operator-secret.js';
import { integerFlag, parseDuration, parseFlags, parseListen, required, type Command } from '../command/args.js';
import { LOCK_FILES, takeDirectoryLock } from '../command/directory-lock.js';
import { watchForStop } from '../command/lifecycle.js';

const usage = `usage: quorumfence resource --cluster FILE --data DIR [options]

Serves a key-value store over HTTP whose every write is fenced by admission
tokens of the cluster: PUT/GET/DELETE /kv/<resource>/<key> with
"Authorization: QuorumFence <token>". Data, barriers and the guard log live in
one LMDB store in --data; an accepted write is on disk before its 200.
Also GET /barrier/<resource>, /log?after=N&limit=M, /healthz and /metrics.
Logs JSON lines; the "listening" line holds the actual url. SIGTERM or SIGINT
stops it gracefully. See src/guard/README.md for the status codes. One process
per --data directory: it holds DIR/resource.lock while it runs, and a second
one on the same directory is refused (STORE_LOCKED).

options:
  --cluster FILE        the cluster description (cluster.json)             (required)
  --data DIR            the store's directory, created if missing          (required)
  --listen HOST:PORT    where to listen; port 0 picks one     (default 127.0.0.1:0)
  --max-body BYTES      largest request body and value        (default ${DEFAULT_MAX_BODY_BYTES})
  --max-key BYTES       longest key, in UTF-8 bytes            (default ${DEFAULT_MAX_KEY_BYTES})
  --token-cache N       verified tokens to remember            (default ${DEFAULT_TOKEN_CACHE_SIZE})
  --headers-timeout DURATION  time a client has to send a request's head (default ${DEFAULT_HEADERS_TIMEOUT_MS}ms)
  --request-timeout DURATION  time a client has to send a whole request (default ${DEFAULT_REQUEST_TIMEOUT_MS}ms)
  --max-refused-log N   refused entries the guard log keeps, oldest dropped first;
                        accepted and conflict entries are always kept  (default ${DEFAULT_MAX_REFUSED_LOG_ENTRIES})
  --require-proof       refuse requests without a holder signature (QuorumFence-Proof)
  --audience NAME       this guard's name in proof transcripts (default: none)
  --operator-secret-file FILE
                        a secret (one line, at least ${MIN_OPERATOR_SECRET_LENGTH} characters) that
                        unlocks the tokens in /log for "Authorization: Bearer <secret>";
                        also read from $${OPERATOR_SECRET_ENV}. Without it, /log never shows tokens.

In production run with --require-proof: then a token alone (from a log, a
proxy, a crash dump) cannot write.
`;

export const command: Command = {
  summary: 'run the reference guarded key-value resource (HTTP)',
  usage,
  async run(argv) {
    const { values } = parseFlags(argv, {
      cluster: { type: 'string' },
      data: { type: 'string' },
      listen: { type: 'string' },
      'max-body': { type: 'string' },
      'max-key': { type: 'string' },
      'token-cache': { type: 'string' },
      'require-proof': { type: 'boolean' },
      audience: { type: 'string' },
      'operator-secret-file': { type: 'string' },
      'headers-timeout': { type: 'string' },
      'max-refused-log': { type: 'string' },
      'request-timeout': { type: 'string' },
    });
    const cluster = loadClusterFile(required(values.cluster, 'cluster'));
    const dataDir = resolve(required(values.data, 'data'));
    const listen = parseListen(values.listen, 'listen', { host: '127.0.0.1', port: 0 });
    const maxBodyBytes = integerFlag(values['max-body'], 'max-body', DEFAULT_MAX_BODY_BYTES, 0, 1 << 30);
    const maxKeyBytes = integerFlag(values['max-key'], 'max-key', DEFAULT_MAX_KEY_BYTES, 1, 1024);
    const tokenCacheSize = integerFlag(values['token-cache'], 'token-cache', DEFAULT_TOKEN_CACHE_SIZE, 0, 1 << 24);
    try {
      mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    } catch (error) {
      throw new QuorumFenceError('IO_ERROR', `cannot create --data ${dataDir}: ${(error as Error).message}`, {
        path: dataDir,
      });
    }

    const operatorSecret = readOperatorSecret(values['operator-secret-file']);
    const logger = createLogger('resource');
    const options: ResourceServerOptions = {
      host: listen.host,
      port: listen.port,
      maxBodyBytes,
      maxKeyBytes,
      tokenCacheSize,
      requireProof: values['require-proof'] ?? false,
      audience: values.audience ?? '',
      maxRefusedLogEntries: integerFlag(
        values['max-refused-log'],
        'max-refused-log',
        DEFAULT_MAX_REFUSED_LOG_ENTRIES,
        1,
        1_000_000_000,
      ),
      ...(values['headers-timeout'] === undefined
        ? {}
        : {
            headersTimeoutMs: parseDuration(values['headers-timeout'], 'headers-timeout', DEFAULT_HEADERS_TIMEOUT_MS),
          }),
      ...(values['request-timeout'] === undefined
        ? {}
        : {
            requestTimeoutMs: parseDuration(values['request-timeout'], 'request-timeout', DEFAULT_REQUEST_TIMEOUT_MS),
          }),
      ...(operatorSecret === undefined ? {} : { operatorSecret }),
      logger,
    };
    const releaseLock = takeDirectoryLock(dataDir, LOCK_FILES.resource, 'resource');
    // Watching before the start: the server's "listening" line is written during it, and a SIGTERM sent on that
    // line (a supervisor, a test) must stop it gracefully, not find no handler and end the process.
    const watch = watchForStop(logger);
    try {
      const server = await startServer(dataDir, cluster, options);
      await watch.stopped;
      await server.close();
      logger.info('stopped');
      return 0;
    } finally {
      watch.dispose();
      releaseLock();
    }
  },
};

/** The errors of listen(2) a --listen can cause, each said in one line (as the replica and the console say theirs). */
const LISTEN_ERRORS: Readonly<Record<string, string>> = {
  EADDRINUSE: 'the address is in use (another resource, or another program, listens there)',
  EADDRNOTAVAIL: 'that host is not an address of this machine',
  EACCES: 'permission denied (a port below 1024 needs privileges)',
};

/** @throws QuorumFenceError IO_ERROR for an address it cannot listen on, and ResourceServer.start's errors */
async function startServer(dataDir: string, cluster: Cluster, options: ResourceServerOptions): Promise<ResourceServer> {
  try {
    return await ResourceServer.start(dataDir, cluster, options);
  } catch (error) {
    const reason = LISTEN_ERRORS[(error as NodeJS.ErrnoException).code ?? ''];
    if (reason === undefined || error instanceof QuorumFenceError) throw error;
    throw new QuorumFenceError(
      'IO_ERROR',
      `cannot listen on ${options.host}:${options.port}: ${reason}; pass another --listen HOST:PORT`,
      { host: options.host, port: options.port },
    );
  }
}
