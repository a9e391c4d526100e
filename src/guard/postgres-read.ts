/**
 * The PostgreSQL guard's reads, outside any write: a resource's committed
 * barrier, the log's retention counters, and a page of the log. Each is one
 * query on the pool; writes and their SQL are postgres-guard.ts and
 * postgres-sql.ts.
 */
import type { PostgresPool } from './postgres-driver.js';
import type { Barrier } from './fence.js';
import { parseGuardLogEntry, type GuardLogEntry } from './log.js';
import { BARRIER_COLUMNS, toBarrier, type BarrierRow } from './postgres-sql.js';
import type { Tables } from './postgres-schema.js';

export async function readBarrier(pool: PostgresPool, t: Tables, resource: string): Promise<Barrier | undefined> {
  const result = await pool.query<BarrierRow>(`SELECT ${BARRIER_COLUMNS} FROM ${t.barrier} WHERE resource = $1`, [
    resource,
  ]);
  return result.rows[0] && toBarrier(result.rows[0]);
}

/** Refused entries kept (conflicts excepted) and dropped so far. */
export async function readRetention(
  pool: PostgresPool,
  t: Tables,
): Promise<{ refusedKept: number; refusedDropped: number }> {
  const rows = (
    await pool.query<{ key: string; value: string }>(
      `SELECT key, value FROM ${t.meta} WHERE key IN ('refusedKept', 'refusedDropped')`,
    )
  ).rows;
  const meta = new Map(rows.map((r) => [r.key, Number(r.value)]));
  return { refusedKept: meta.get('refusedKept') ?? 0, refusedDropped: meta.get('refusedDropped') ?? 0 };
}

/** Entries with seq > after, in seq order, at most `limit`. */
export async function readLogPage(
  pool: PostgresPool,
  t: Tables,
  after: number,
  limit: number,
): Promise<GuardLogEntry[]> {
  const result = await pool.query<{ entry: unknown }>(
    `SELECT entry FROM ${t.log} WHERE seq > $1 ORDER BY seq LIMIT $2`,
    [after, limit],
  );
  return result.rows.map((row) => parseGuardLogEntry(row.entry));
}
