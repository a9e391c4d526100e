/**
 * Guard benchmark (never a test): what fencing costs at the resource.
 *
 *   lmdb        accepted writes/s through LmdbGuard with one cached token per
 *               writer, many writers in flight (group commit), every write
 *               durable before it resolves
 *   firstUse    a token the guard has not seen: decode + pairing alone, and a
 *               whole guarded write (verify + fence + durable commit)
 *   postgres    the same UPDATE of one row per writer, in one loop shape,
 *               three ways: plain (no guard), through the single-statement
 *               form (writeStatement) and through the transaction form
 *               (write), with each form's ratio to plain from the same run;
 *               and the plain UPDATE through the `postgres` driver beside
 *               `pg`, for the driver choice. Only with a database.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { PoolConfig } from 'pg';
import { describeDealtKey, localEndpoints, parseCluster, type Cluster } from '../cluster/description.js';
import type { BackendName } from '../crypto/backend.js';
import { QuorumFenceError } from '../common/errors.js';
import { loadBackend } from '../crypto/load.js';
import { systemRandom } from '../crypto/random.js';
import { combinePartials, dealKey, type DealtKey } from '../crypto/threshold.js';
import { encodeToken, tokenToText } from '../token/admission-token.js';
import { grantMessage } from '../token/grant.js';
import { LmdbGuard } from '../guard/lmdb-guard.js';
import { PostgresGuard } from '../guard/postgres-guard.js';
import { TokenVerifier } from '../guard/verifier.js';
import { summarise, type BenchSize, type Skipped, type Timing } from './measure.js';

export interface GuardBenchOptions {
  readonly backend?: BackendName;
  /** How long to run (default full). */
  readonly size?: BenchSize;
  /** Writers in flight for the throughput runs. Default 256 (LMDB), 16 (PostgreSQL). */
  readonly concurrency?: number;
  readonly postgresConcurrency?: number;
  /** A database the benchmark may create tables in; without it the PostgreSQL figures are skipped. */
  readonly postgres?: PoolConfig;
  /** Where the LMDB store goes (a fresh folder under it). Default the OS temp folder. */
  readonly dir?: string;
}

export interface Throughput {
  readonly concurrency: number;
  readonly writes: number;
  readonly seconds: number;
  readonly perSecond: number;
}

export interface GuardBenchFigures {
  readonly backend: BackendName;
  readonly lmdbCachedToken: Throughput;
  readonly firstUse: {
    /** Decode (point checks) + pairing of a token never seen, in ms. */
    readonly verifyMs: Timing;
    /** A whole guarded write with a token never seen (raising the barrier), durable, in ms. */
    readonly writeMs: Timing;
  };
  /** Skipped (and why) when no database was given. */
  readonly postgres: PostgresFigures | Skipped;
}

/** Why the PostgreSQL figures are missing when no database is given. */
export const POSTGRES_SKIPPED: Skipped = {
  skipped: 'no database given (--postgres postgres://user:pass@host/db)',
};

export interface PostgresFigures {
  /** The UPDATE alone, autocommit, through pg. */
  readonly plainUpdate: Throughput;
  /** writeStatement with a cached token: one round trip. */
  readonly statement: Throughput;
  /** write (the transaction form) with a cached token: three round trips. */
  readonly transaction: Throughput;
  /** statement / plainUpdate. */
  readonly statementRatio: number;
  /** transaction / plainUpdate. */
  readonly transactionRatio: number;
  /** Of the statement-form writes measured, how many held in one statement (the rest fell back). */
  readonly statementShare: number;
  /** The same plain UPDATE through the `postgres` driver (null when it is not installed). */
  readonly plainUpdatePostgresDriver: Throughput | null;
}

interface Issuer {
  readonly cluster: Cluster;
  issue(resource: string, epoch: bigint): string;
}

/** Tokens straight from a dealt key: the benchmark needs no replicas. */
function makeIssuer(backendName: BackendName | undefined): Issuer {
  const backend = loadBackend(backendName);
  const key: DealtKey = dealKey(4, 3, systemRandom);
  const cluster = parseCluster(describeDealtKey(key, localEndpoints(4)), { backend });
  const secrets = key.shares
    .slice(0, key.t)
    .map((s) => ({ index: s.index, key: backend.secretKeyFromBytes(s.scaledSecretShare) }));
  const holder = new Uint8Array(32).fill(7);
  return {
    cluster,
    issue(resource, epoch) {
      const grant = { clusterId: cluster.id, resource, epoch, holder };
      const message = grantMessage(grant);
      const signature = combinePartials(
        backend,
        key.n,
        secrets.map((s) => ({ index: s.index, signature: backend.sign(s.key, message) })),
      )!;
      return tokenToText(encodeToken(grant, signature));
    },
  };
}

/** Runs `writers` loops of `write` until `seconds` pass; counts completed writes. */
async function measureThroughput(
  writers: number,
  seconds: number,
  write: (writer: number, n: number) => Promise<boolean>,
): Promise<Throughput> {
  const deadline = performance.now() + seconds * 1000;
  let writes = 0;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: writers }, async (_, writer) => {
      for (let n = 0; performance.now() < deadline; n++) {
        if (!(await write(writer, n))) throw new Error('a benchmark write was refused');
        writes++;
      }
    }),
  );
  const elapsed = (performance.now() - start) / 1000;
  return { concurrency: writers, writes, seconds: elapsed, perSecond: writes / elapsed };
}

/**
 * Several write loops measured in turns (slices of `sliceSeconds` each, round
 * after round, for `seconds` in all per loop), so a change in the machine's
 * load during the run weighs on every loop alike and their ratios hold.
 */
async function measureInTurns(
  writers: number,
  seconds: number,
  loops: readonly ((writer: number, n: number) => Promise<boolean>)[],
  sliceSeconds = 0.25,
): Promise<Throughput[]> {
  const totals = loops.map(() => ({ writes: 0, seconds: 0 }));
  for (let round = 0; round * sliceSeconds < seconds; round++) {
    for (const [i, loop] of loops.entries()) {
      const slice = await measureThroughput(writers, sliceSeconds, loop);
      totals[i]!.writes += slice.writes;
      totals[i]!.seconds += slice.seconds;
    }
  }
  return totals.map((t) => ({
    concurrency: writers,
    writes: t.writes,
    seconds: t.seconds,
    perSecond: t.writes / t.seconds,
  }));
}

export async function benchGuard(options: GuardBenchOptions = {}): Promise<GuardBenchFigures> {
  const issuer = makeIssuer(options.backend);
  const size = options.size ?? 'full';
  const seconds = { full: 5, quick: 2, smoke: 0.25 }[size];
  const dir = mkdtempSync(join(options.dir ?? tmpdir(), 'quorumfence-bench-guard-'));
  const value = new TextEncoder().encode('a sixteen-byte v');
  try {
    const guard = await LmdbGuard.open(dir, issuer.cluster);
    let lmdbCachedToken: Throughput;
    let writeMs: Timing;
    try {
      // Cached token: one token, verified once, then every write is a cache hit.
      const token = issuer.issue('bench/cached', 1n);
      const concurrency = options.concurrency ?? 256;
      const keys = Array.from({ length: concurrency }, (_, k) => `key-${k}`);
      for (let warm = 0; warm < (size === 'smoke' ? 20 : 200); warm++)
        await guard.write({ token, resource: 'bench/cached', key: keys[0]! }, (tx) => tx.put(keys[0]!, value));
      lmdbCachedToken = await measureThroughput(concurrency, seconds, async (writer) => {
        const key = keys[writer]!;
        return (await guard.write({ token, resource: 'bench/cached', key, op: 'put' }, (tx) => tx.put(key, value))).ok;
      });

      // First use: each write brings a token the guard has never seen, one after another.
      const count = { full: 200, quick: 50, smoke: 5 }[size];
      const fresh = Array.from({ length: count }, (_, i) => issuer.issue('bench/first-use', BigInt(i + 1)));
      const samples: number[] = [];
      for (const t of fresh) {
        const start = performance.now();
        const result = await guard.write({ token: t, resource: 'bench/first-use', key: 'k', op: 'put' }, (tx) =>
          tx.put('k', value),
        );
        samples.push(performance.now() - start);
        if (!result.ok) throw new Error(`first-use write refused: ${result.reason}`);
      }
      writeMs = summarise(samples);
    } finally {
      await guard.close();
    }

    const verifyTokens = Array.from({ length: { full: 400, quick: 100, smoke: 5 }[size] }, (_, i) =>
      issuer.issue('bench/verify', BigInt(i + 1)),
    );
    const verifier = new TokenVerifier(issuer.cluster, { cacheSize: 0 });
    const verifySamples = verifyTokens.map((t) => {
      const start = performance.now();
      if (!verifier.verify(t).ok) throw new Error('a fresh token did not verify');
      return performance.now() - start;
    });

    return {
      backend: issuer.cluster.backend.name,
      lmdbCachedToken,
      firstUse: { verifyMs: summarise(verifySamples), writeMs },
      postgres: options.postgres
        ? await benchPostgres(issuer, options.postgres, options.postgresConcurrency ?? 16, seconds, value)
        : POSTGRES_SKIPPED,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function benchPostgres(
  issuer: Issuer,
  config: PoolConfig,
  concurrency: number,
  seconds: number,
  value: Uint8Array,
): Promise<PostgresFigures> {
  const { default: pg } = await import('pg');
  const pool = new pg.Pool({ ...config, max: concurrency });
  const prefix = `bench_${process.pid}_`;
  const table = `${prefix}kv`;
  const text = new TextDecoder().decode(value);
  try {
    try {
      await pool.query('SELECT 1');
    } catch (error) {
      // pg's message names the host and port or the user, never the password.
      throw new QuorumFenceError(
        'CONNECTION_FAILED',
        `bench guard: cannot use the --postgres database: ${(error as Error).message}`,
        undefined,
        { cause: error },
      );
    }
    await pool.query(
      `CREATE TABLE ${table} (resource text NOT NULL, key text NOT NULL, value text NOT NULL, PRIMARY KEY (resource, key))`,
    );
    // One resource (and row) per writer: independent holders, as with independent locks.
    const resources = Array.from({ length: concurrency }, (_, w) => `bench/pg/${w}`);
    for (const resource of resources) await pool.query(`INSERT INTO ${table} VALUES ($1, 'k', '')`, [resource]);
    const tokens = resources.map((r) => issuer.issue(r, 1n));
    const guard = await PostgresGuard.open(pool, issuer.cluster, { tablePrefix: prefix });
    const update = `UPDATE ${table} SET value = $3 WHERE resource = $1 AND key = $2`;
    const request = (writer: number) => ({ token: tokens[writer]!, resource: resources[writer]!, key: 'k', op: 'put' });
    try {
      // Warm-up: each token verified once and each barrier known (cached token, as the target says).
      for (let w = 0; w < concurrency; w++) {
        await guard.write(request(w), (tx) => tx.query(update, [resources[w], 'k', text]));
      }
      const formsBefore = guard.forms;
      const turns = await measureInTurns(concurrency, seconds, [
        async (writer) => (await pool.query(update, [resources[writer], 'k', text])).rowCount === 1,
        async (writer) =>
          (await guard.writeStatement(request(writer), { text: update, values: [resources[writer], 'k', text] })).ok,
        async (writer) =>
          (await guard.write(request(writer), (tx) => tx.query(update, [resources[writer], 'k', text]))).ok,
      ]);
      const [plainUpdate, statement, transaction] = [turns[0]!, turns[1]!, turns[2]!];
      const held = guard.forms.statement - formsBefore.statement;
      const plainUpdatePostgresDriver = await plainUpdateThroughPostgresDriver(
        config,
        concurrency,
        seconds,
        update,
        resources,
        text,
      );
      return {
        plainUpdate,
        statement,
        transaction,
        statementRatio: statement.perSecond / plainUpdate.perSecond,
        transactionRatio: transaction.perSecond / plainUpdate.perSecond,
        statementShare: statement.writes === 0 ? 0 : held / statement.writes,
        plainUpdatePostgresDriver,
      };
    } finally {
      await guard.close();
      for (const t of ['meta', 'barrier', 'guard_log', 'kv']) await pool.query(`DROP TABLE IF EXISTS ${prefix}${t}`);
      await pool.query(`DROP SEQUENCE IF EXISTS ${prefix}guard_log_seq`);
      await pool.query(`DROP FUNCTION IF EXISTS ${prefix}fence_held(bigint), ${prefix}row_required(boolean)`);
    }
  } finally {
    await pool.end();
  }
}

/** The plain UPDATE through the `postgres` driver (a development dependency): null when it is not installed. */
async function plainUpdateThroughPostgresDriver(
  config: PoolConfig,
  concurrency: number,
  seconds: number,
  update: string,
  resources: readonly string[],
  text: string,
): Promise<Throughput | null> {
  type Connect = typeof import('postgres');
  let connect: Connect;
  try {
    // The package's types say `export =`; its ESM build has a default export. Either shape works here.
    const loaded = (await import('postgres')) as Connect | { default: Connect };
    connect = 'default' in loaded ? loaded.default : loaded;
  } catch {
    return null;
  }
  const options = { max: concurrency, onnotice: () => undefined };
  const sql = config.connectionString
    ? connect(config.connectionString, options)
    : connect({
        ...options,
        host: config.host ?? '127.0.0.1',
        port: config.port ?? 5432,
        ...(config.user ? { user: config.user } : {}),
        ...(typeof config.password === 'string' ? { password: config.password } : {}),
        ...(config.database ? { database: config.database } : {}),
      });
  try {
    return await measureThroughput(concurrency, seconds, async (writer) => {
      const result = await sql.unsafe(update, [resources[writer]!, 'k', text], { prepare: true });
      return result.count === 1;
    });
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/** The PostgreSQL figures as table rows (the bench command's table). */
export function postgresRows(p: PostgresFigures | Skipped): [string, string][] {
  if ('skipped' in p) return [['PostgreSQL fenced writes', `skipped: ${p.skipped}`]];
  const rate = (t: Throughput) =>
    `${t.perSecond.toFixed(0)} writes/s (${t.concurrency} connections, ${t.writes} writes)`;
  return [
    ['PostgreSQL plain UPDATE (pg)', rate(p.plainUpdate)],
    ['PostgreSQL fenced, single statement', rate(p.statement)],
    ['PostgreSQL fenced, transaction', rate(p.transaction)],
    ['single statement / plain', p.statementRatio.toFixed(2)],
    ['transaction / plain', p.transactionRatio.toFixed(2)],
    ['single-statement writes that held in one statement', `${(p.statementShare * 100).toFixed(1)}%`],
    [
      'PostgreSQL plain UPDATE (postgres driver)',
      p.plainUpdatePostgresDriver ? rate(p.plainUpdatePostgresDriver) : 'not installed',
    ],
  ];
}
