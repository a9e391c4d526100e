/**
 * Guard benchmark (never a test): what fencing costs at the resource.
 *
 *   lmdb        accepted writes/s through LmdbGuard with one cached token per
 *               writer, many writers in flight (group commit), every write
 *               durable before it resolves
 *   firstUse    a token the guard has not seen: decode + pairing alone, and a
 *               whole guarded write (verify + fence + durable commit)
 *   postgres    guarded writes/s (PostgresGuard around an UPDATE) beside the
 *               same UPDATE without the guard, as a ratio; only with a database
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { PoolConfig } from 'pg';
import { describeDealtKey, localEndpoints, parseCluster, type Cluster } from '../cluster/description.js';
import type { BackendName } from '../crypto/backend.js';
import { loadBackend } from '../crypto/load.js';
import { systemRandom } from '../crypto/random.js';
import { combinePartials, dealKey, type DealtKey } from '../crypto/threshold.js';
import { encodeToken, tokenToText } from '../token/admission-token.js';
import { grantMessage } from '../token/grant.js';
import { LmdbGuard } from '../guard/lmdb-guard.js';
import { PostgresGuard } from '../guard/postgres-guard.js';
import { TokenVerifier } from '../guard/verifier.js';
import { summarise, type Timing } from './measure.js';

export interface GuardBenchOptions {
  readonly backend?: BackendName;
  /** Shorter runs. */
  readonly quick?: boolean;
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
  readonly postgres?: {
    readonly guarded: Throughput;
    readonly plainUpdate: Throughput;
    /** guarded / plain. */
    readonly ratio: number;
  };
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

export async function benchGuard(options: GuardBenchOptions = {}): Promise<GuardBenchFigures> {
  const issuer = makeIssuer(options.backend);
  const seconds = options.quick ? 2 : 5;
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
      for (let warm = 0; warm < 200; warm++)
        await guard.write({ token, resource: 'bench/cached', key: keys[0]! }, (tx) => tx.put(keys[0]!, value));
      lmdbCachedToken = await measureThroughput(concurrency, seconds, async (writer) => {
        const key = keys[writer]!;
        return (await guard.write({ token, resource: 'bench/cached', key, op: 'put' }, (tx) => tx.put(key, value))).ok;
      });

      // First use: each write brings a token the guard has never seen, one after another.
      const count = options.quick ? 50 : 200;
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

    const verifyTokens = Array.from({ length: options.quick ? 100 : 400 }, (_, i) =>
      issuer.issue('bench/verify', BigInt(i + 1)),
    );
    const verifier = new TokenVerifier(issuer.cluster, { cacheSize: 0 });
    const verifySamples = verifyTokens.map((t) => {
      const start = performance.now();
      if (!verifier.verify(t).ok) throw new Error('a fresh token did not verify');
      return performance.now() - start;
    });

    const figures: GuardBenchFigures = {
      backend: issuer.cluster.backend.name,
      lmdbCachedToken,
      firstUse: { verifyMs: summarise(verifySamples), writeMs },
    };
    if (!options.postgres) return figures;
    return {
      ...figures,
      postgres: await benchPostgres(issuer, options.postgres, options.postgresConcurrency ?? 16, seconds, value),
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
): Promise<NonNullable<GuardBenchFigures['postgres']>> {
  const { default: pg } = await import('pg');
  const pool = new pg.Pool({ ...config, max: concurrency });
  const prefix = `bench_${process.pid}_`;
  const table = `${prefix}kv`;
  const text = new TextDecoder().decode(value);
  try {
    await pool.query(
      `CREATE TABLE ${table} (resource text NOT NULL, key text NOT NULL, value text NOT NULL, PRIMARY KEY (resource, key))`,
    );
    // One resource (and row) per writer: independent holders, as with independent locks.
    const resources = Array.from({ length: concurrency }, (_, w) => `bench/pg/${w}`);
    for (const resource of resources) await pool.query(`INSERT INTO ${table} VALUES ($1, 'k', '')`, [resource]);
    const tokens = resources.map((r) => issuer.issue(r, 1n));
    const guard = await PostgresGuard.open(pool, issuer.cluster, { tablePrefix: prefix });
    const update = `UPDATE ${table} SET value = $3 WHERE resource = $1 AND key = $2`;
    try {
      for (let w = 0; w < concurrency; w++) {
        await guard.write({ token: tokens[w]!, resource: resources[w]!, key: 'k' }, (tx) =>
          tx.query(update, [resources[w], 'k', text]),
        );
      }
      const guarded = await measureThroughput(concurrency, seconds, async (writer) => {
        const resource = resources[writer]!;
        const result = await guard.write({ token: tokens[writer]!, resource, key: 'k', op: 'put' }, (tx) =>
          tx.query(update, [resource, 'k', text]),
        );
        return result.ok;
      });
      const plainUpdate = await measureThroughput(concurrency, seconds, async (writer) => {
        const result = await pool.query(update, [resources[writer], 'k', text]);
        return result.rowCount === 1;
      });
      return { guarded, plainUpdate, ratio: guarded.perSecond / plainUpdate.perSecond };
    } finally {
      await guard.close();
      for (const t of ['meta', 'barrier', 'guard_log', 'kv']) await pool.query(`DROP TABLE IF EXISTS ${prefix}${t}`);
      await pool.query(`DROP SEQUENCE IF EXISTS ${prefix}guard_log_seq`);
    }
  } finally {
    await pool.end();
  }
}

/** A few lines for people. */
export function formatGuardFigures(f: GuardBenchFigures): string {
  const ms = (t: Timing) => `median ${t.median.toFixed(3)} ms, p99 ${t.p99.toFixed(3)} ms (${t.samples} samples)`;
  const lines = [
    `guard benchmark (${f.backend} backend)`,
    `  LMDB, cached token:      ${f.lmdbCachedToken.perSecond.toFixed(0)} accepted durable writes/s (${f.lmdbCachedToken.concurrency} in flight, ${f.lmdbCachedToken.writes} writes)`,
    `  first use, verify only:  ${ms(f.firstUse.verifyMs)}`,
    `  first use, whole write:  ${ms(f.firstUse.writeMs)}`,
  ];
  if (f.postgres) {
    lines.push(
      `  PostgreSQL, guarded:     ${f.postgres.guarded.perSecond.toFixed(0)} writes/s (${f.postgres.guarded.concurrency} connections)`,
      `  PostgreSQL, plain UPDATE: ${f.postgres.plainUpdate.perSecond.toFixed(0)} writes/s`,
      `  ratio guarded / plain:   ${f.postgres.ratio.toFixed(2)}`,
    );
  }
  return lines.join('\n');
}
