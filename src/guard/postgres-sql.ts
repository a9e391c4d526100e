/**
 * The SQL text of the PostgreSQL guard's statements and the shape of a
 * caller's statement (postgres-guard.ts runs them; postgres-schema.ts creates
 * the tables and functions they use). Kept apart from the adapter so each SQL
 * shape is written once and can be read in one place.
 */
import { BoundedMap } from '../common/bounded-map.js';
import { createHash } from 'node:crypto';
import {
  escapeLiteral,
  type PostgresPoolClient,
  type PostgresQueryResult,
  type PostgresRow,
} from './postgres-driver.js';
import type { MutationRefusal } from './adapter.js';
import { QuorumFenceError } from '../common/errors.js';
import type { Barrier } from './fence.js';
import type { Tables } from './postgres-schema.js';

export interface BarrierRow {
  epoch: string;
  token_digest: Buffer;
  token: Buffer;
  replay_high: string | null;
  replay_seen: string | null;
  writes: string;
}

export const BARRIER_COLUMNS = 'epoch, token_digest, token, replay_high, replay_seen, writes';

/** A barrier row as a guard saw it committed: the barrier, and the count of accepted writes it had then. */
export interface KnownBarrier {
  readonly barrier: Barrier;
  readonly writes: bigint;
}

export function toBarrier(row: BarrierRow): Barrier | undefined {
  return toKnownBarrier(row)?.barrier;
}

export function toKnownBarrier(row: BarrierRow): KnownBarrier | undefined {
  if (row.epoch === '0') return undefined; // the placeholder of a resource nothing was accepted for yet
  const barrier = {
    epoch: BigInt(row.epoch),
    tokenDigest: new Uint8Array(row.token_digest),
    token: new Uint8Array(row.token),
    replay: row.replay_high === null ? null : { high: BigInt(row.replay_high), seen: BigInt(row.replay_seen ?? '0') },
  };
  return { barrier, writes: BigInt(row.writes) };
}

/**
 * A SQL literal. The guard's batched statements go through the simple-query
 * protocol (several statements, one round trip), which takes no parameters;
 * every value in them passes through here (pg's escaping, right whatever
 * standard_conforming_strings says).
 */
export function literal(value: string | bigint | Uint8Array | null): string {
  if (value === null) return 'NULL';
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'string') return escapeLiteral(value);
  return `${escapeLiteral(`\\x${Buffer.from(value).toString('hex')}`)}::bytea`;
}

/** The columns of a barrier as SQL literals, in BARRIER_COLUMNS order. */
export function barrierLiterals(b: Barrier): string[] {
  return [
    literal(b.epoch),
    literal(b.tokenDigest),
    literal(b.token),
    literal(b.replay ? b.replay.high : null),
    b.replay ? `${b.replay.seen.toString()}::numeric` : 'NULL',
  ];
}

/**
 * Opens the transaction form: BEGIN, then locks and reads the barrier row.
 * With `placeholder` (the guard has not seen the row yet), first inserts a
 * placeholder row (epoch 0) unless one exists: a racing transaction waits on
 * our uncommitted row, then finds it and waits on its lock. Barrier rows are
 * never deleted once real, so a row the guard has seen needs no placeholder.
 */
export function lockSql(t: Tables, resource: string, placeholder: boolean): string {
  const r = literal(resource);
  const insert = `INSERT INTO ${t.barrier} (resource, epoch, token_digest, token) VALUES (${r}, 0, '\\x', '\\x')
      ON CONFLICT (resource) DO NOTHING RETURNING true AS placeholder;`;
  return `BEGIN; ${placeholder ? insert : ''}
    SELECT ${BARRIER_COLUMNS} FROM ${t.barrier} WHERE resource = ${r} FOR UPDATE`;
}

/** An accepted write's change to its (locked) barrier row: one more write, and the raised barrier when it changed. */
export function acceptSql(t: Tables, resource: string, raised: Barrier | undefined): string {
  let raise = '';
  if (raised) {
    const [epoch, digest, token, high, seen] = barrierLiterals(raised);
    raise = `, epoch = ${epoch}, token_digest = ${digest}, token = ${token}, replay_high = ${high}, replay_seen = ${seen}`;
  }
  return `UPDATE ${t.barrier} SET writes = writes + 1${raise} WHERE resource = ${literal(resource)}`;
}

/** Appends one entry with its seq from the sequence; returns the entry as stored. */
export function appendSql(t: Tables, entryJson: string, resource: string, refused: boolean): string {
  return `WITH next AS (SELECT nextval('${t.seq}') AS seq)
    INSERT INTO ${t.log} (seq, resource, entry, refused)
    SELECT seq, ${literal(resource)}, ${literal(entryJson)}::jsonb || jsonb_build_object('seq', seq), ${refused} FROM next
    RETURNING entry`;
}

/**
 * What follows a refused entry's append, in its transaction: count it (the
 * row lock on refusedKept serialises refusals, so the next statement's fresh
 * snapshot sees every refused entry committed before), then drop the oldest
 * past `max` and move the counters.
 */
export function retainSql(t: Tables, max: number): string {
  return `UPDATE ${t.meta} SET value = (value::bigint + 1)::text WHERE key = 'refusedKept';
    WITH excess AS (SELECT greatest(0, value::bigint - ${max}) AS n FROM ${t.meta} WHERE key = 'refusedKept'),
    gone AS (
      DELETE FROM ${t.log} WHERE seq IN (SELECT seq FROM ${t.log} WHERE refused ORDER BY seq LIMIT (SELECT n FROM excess))
      RETURNING 1
    ),
    dropped AS (SELECT count(*) AS n FROM gone)
    UPDATE ${t.meta} SET value = (value::bigint + CASE key WHEN 'refusedDropped' THEN d.n ELSE -d.n END)::text
    FROM dropped d WHERE d.n > 0 AND key IN ('refusedKept', 'refusedDropped')`;
}

/**
 * The single-statement fenced write. The caller's statement keeps its own
 * parameters $1..$n; the guard's follow ($n+1..). Execution order is fixed by
 * what reads what: the primary SELECT calls fence_held on the log CTE, which
 * reads the fence CTE, so the barrier row is locked (an UPDATE that
 * compare-and-sets the whole row the guard decided against, its count of
 * writes included, row-locked until commit) before the caller's statement
 * runs: after it, when it is read through the LATERAL join, or at the end of
 * the statement when nothing reads it. A row that changed since the guard saw
 * it (the barrier moved, or any write was accepted: the statement's snapshot
 * might not hold it) makes the fence CTE match no row, fence_held raise
 * FENCE_MOVED, and the statement (the caller's write included) abort as one.
 * It answers the new entry's seq; the entry itself is the one the guard sent.
 */
export function statementSql(
  t: Tables,
  callerText: string,
  callerValues: number,
  options: { returning: boolean; requireRow: boolean; raise: boolean },
): { text: string; name: string } {
  const p = (i: number) => `$${callerValues + i}`;
  const expected = `resource = ${p(1)}::text AND epoch = ${p(2)}::bigint AND token_digest = ${p(3)}::bytea
        AND replay_high IS NOT DISTINCT FROM ${p(4)}::bigint AND replay_seen IS NOT DISTINCT FROM ${p(5)}::numeric
        AND writes = ${p(7)}::bigint`;
  const raise = options.raise
    ? `, epoch = ${p(8)}::bigint, token_digest = ${p(9)}::bytea, token = ${p(10)}::bytea,
        replay_high = ${p(11)}::bigint, replay_seen = ${p(12)}::numeric`
    : '';
  const fence = `quorumfence_fence AS (
      UPDATE ${t.barrier} SET writes = writes + 1${raise}
      WHERE ${expected}
      RETURNING resource
    )`;
  const logged = `quorumfence_logged AS (
      INSERT INTO ${t.log} (seq, resource, entry)
      SELECT s.seq, ${p(1)}::text, ${p(6)}::jsonb || jsonb_build_object('seq', s.seq)
      FROM (SELECT nextval('${t.seq}') AS seq FROM quorumfence_fence) s
      RETURNING seq
    )`;
  const head = `WITH ${fence}, ${logged}, quorumfence_write AS (${callerText})`;
  // Target-list order: the fence first, then (with requireRow) the caller's rows.
  const found = options.requireRow
    ? `, ${t.rowRequired}((SELECT true FROM quorumfence_write LIMIT 1)) AS quorumfence_found`
    : '';
  const held = `SELECT ${t.fenceHeld}((SELECT seq FROM quorumfence_logged)) AS quorumfence_seq${found}`;
  const text = !options.returning
    ? `${head} ${held}`
    : `${head}
    SELECT g.*, w.* FROM (${held}) g
    LEFT JOIN LATERAL (SELECT true AS quorumfence_row, * FROM quorumfence_write WHERE g.quorumfence_seq IS NOT NULL) w
    ON true`;
  return { text, name: preparedName(text) };
}

/** The guard's parameters of statementSql, after the caller's: the new barrier only when it raises. */
export function statementValues(
  resource: string,
  known: KnownBarrier,
  next: Barrier | undefined,
  entryJson: string,
): unknown[] {
  const columns = (b: Barrier) => [
    b.epoch.toString(),
    Buffer.from(b.tokenDigest),
    Buffer.from(b.token),
    b.replay ? b.replay.high.toString() : null,
    b.replay ? b.replay.seen.toString() : null,
  ];
  const [epoch, digest, , high, seen] = columns(known.barrier);
  return [resource, epoch, digest, high, seen, entryJson, known.writes.toString(), ...(next ? columns(next) : [])];
}

export type PostgresMutationRefusal = MutationRefusal;

/** What the caller's mutation gets: SQL inside the guard's transaction. */
export interface PostgresWriteContext {
  readonly resource: string;
  readonly epoch: bigint;
  readonly holder: Uint8Array;
  /** Runs one statement in the guard's transaction, on the guard's connection. */
  query<R extends PostgresRow = PostgresRow>(text: string, values?: unknown[]): Promise<PostgresQueryResult<R>>;
  /** Refuse the attempt (e.g. an UPDATE ... WHERE version = $n matched no row); everything is rolled back. */
  refuse(reason: 'version_mismatch', message?: string): PostgresMutationRefusal;
}

export type PostgresMutation<T> = (tx: PostgresWriteContext) => T | Promise<T>;

/** How a write went, for the bench and tests: `statement` = one round trip. */
export type WriteForm = 'statement' | 'transaction';

/** One data statement for `writeStatement`. */
export interface FencedStatement {
  /** INSERT, UPDATE or DELETE (it runs as a CTE), with its own parameters $1..$n; no trailing semicolon needed. */
  readonly text: string;
  readonly values?: readonly unknown[];
  /** The statement ends in RETURNING: its rows come back in `result.rows`. Default false. */
  readonly returning?: boolean;
  /** Refuse with version_mismatch, applying nothing, when the statement returns no row (needs `returning`). */
  readonly requireRow?: boolean;
  /**
   * Run it as a named prepared statement (parsed and planned once per
   * connection). Default true: keep the text constant and the values in
   * `values`; pass false for text built per call, or each connection keeps
   * every text it saw.
   */
  readonly prepare?: boolean;
}

export interface StatementResult<R> {
  /** The statement's RETURNING rows; empty without `returning`. */
  readonly rows: R[];
}

export const NO_ROW = 'the statement changed no row';

/**
 * The statement's text, checked; a trailing semicolon is dropped (it runs inside the guard's WITH).
 * @throws QuorumFenceError INVALID_ARGUMENT
 */
export function checkStatement(statement: FencedStatement): string {
  const bad = (field: string, expected: string) =>
    new QuorumFenceError('INVALID_ARGUMENT', `"${field}" expected ${expected}`, { field });
  if (typeof statement !== 'object' || statement === null) throw bad('statement', 'an object');
  if (typeof statement.text !== 'string') throw bad('text', 'a string');
  const text = statement.text.trim().replace(/;+$/, '').trim();
  if (text.length === 0) throw bad('text', 'a statement');
  if (statement.values !== undefined && !Array.isArray(statement.values)) throw bad('values', 'an array');
  if (statement.requireRow && !statement.returning) throw bad('requireRow', 'a statement with returning: true');
  for (const flag of ['returning', 'requireRow', 'prepare'] as const) {
    if (statement[flag] !== undefined && typeof statement[flag] !== 'boolean') throw bad(flag, 'a boolean');
  }
  return text;
}

/** Several statements in one simple-query message (one round trip); pg answers one result per statement. */
export async function batch(client: PostgresPoolClient, text: string): Promise<PostgresQueryResult[]> {
  const results = (await client.query(text)) as unknown as PostgresQueryResult | PostgresQueryResult[];
  return Array.isArray(results) ? results : [results];
}

/**
 * PostgreSQL text and jsonb cannot hold U+0000: refused before any SQL rather than failing inside a transaction.
 * @throws QuorumFenceError INVALID_ARGUMENT
 */
export function checkNoNul(request: { resource: string; key?: string; op?: string }): void {
  for (const [field, value] of [
    ['resource', request.resource],
    ['key', request.key ?? ''],
    ['op', request.op ?? ''],
  ] as const) {
    if (value.includes('\u0000'))
      throw new QuorumFenceError('INVALID_ARGUMENT', `"${field}" must not contain U+0000 in a PostgreSQL guard`, {
        field,
      });
  }
}

/** The caller's RETURNING rows out of statementSql's answer: real rows only, the guard's columns removed. */
export function statementRows<R>(rows: Record<string, unknown>[]): R[] {
  return rows
    .filter((row) => row.quorumfence_row === true)
    .map(({ quorumfence_seq: _s, quorumfence_row: _r, quorumfence_found: _f, ...rest }) => rest as R);
}

/** A prepared statement's name, from its text: one text, one name, on every connection. */
export function preparedName(sql: string): string {
  return `quorumfence_${createHash('sha256').update(sql).digest('hex').slice(0, 32)}`;
}

/** Statement texts whose guard SQL is kept built (first in, first out). */
const BUILT_TEXTS = 256;

/** statementSql per caller text, built once: a hot loop sends one text, and hashing it per write shows in the bench. */
export class StatementTexts {
  readonly #built = new BoundedMap<string, { text: string; name: string }>(BUILT_TEXTS);
  constructor(private readonly tables: Tables) {}

  /** The guard's SQL around `text`, with its prepared-statement name unless `prepare` is false. */
  get(
    text: string,
    values: number,
    options: { returning: boolean; requireRow: boolean; raise: boolean },
    prepare = true,
  ): { text: string; name?: string } {
    const key = `${values}|${options.returning}|${options.requireRow}|${options.raise}|${text}`;
    let sql = this.#built.get(key);
    if (sql === undefined) {
      sql = statementSql(this.tables, text, values, options);
      // Bounded: texts built per call (prepare: false) must not grow it without end.
      this.#built.set(key, sql);
    }
    return prepare ? sql : { text: sql.text };
  }
}

/** Carries a mutation's own error past the connection clean-up, so the connection is not discarded for it. */
export class MutationFailure extends Error {
  constructor(override readonly cause: unknown) {
    super('mutation failed');
  }
}
