/**
 * What the PostgreSQL guard needs of `pg`, as its own types, and pg itself loaded when a guard opens. pg is an
 * optional peer dependency of the package: a project that never uses this guard installs neither pg nor
 * @types/pg, so nothing the guard declares may name pg's types, and importing the guard must not load pg.
 * A pg.Pool is a PostgresPool (the tests pass real ones).
 */
import { QuorumFenceError } from '../common/errors.js';

/** A row as pg returns it: column name to value (pg types values by column, so the caller narrows them). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- pg's own row type; a narrower one would make every caller cast
export type PostgresRow = { [column: string]: any };

export interface PostgresQueryResult<R extends PostgresRow = PostgresRow> {
  readonly rows: R[];
  readonly rowCount: number | null;
}

/** A statement with its values and, for a prepared statement, its name. */
export interface PostgresQueryConfig {
  readonly text: string;
  readonly values?: unknown[];
  readonly name?: string;
}

export interface PostgresQueryable {
  query<R extends PostgresRow = PostgresRow>(
    textOrConfig: string | PostgresQueryConfig,
    values?: unknown[],
  ): Promise<PostgresQueryResult<R>>;
}

/** A connection checked out of the pool. */
export interface PostgresPoolClient extends PostgresQueryable {
  /** Back to the pool; `true` or an error discards the connection. */
  release(destroy?: boolean | Error): void;
}

/** The caller's pool (a pg.Pool). */
export interface PostgresPool extends PostgresQueryable {
  connect(): Promise<PostgresPoolClient>;
}

/** The two things the guard calls in pg's module itself. */
interface PgModule {
  escapeLiteral(text: string): string;
  readonly DatabaseError: abstract new (...args: never[]) => Error & { readonly code?: string | undefined };
}

let loaded: PgModule | undefined;

/**
 * Loads pg once (the first guard to open).
 * @throws QuorumFenceError DEPENDENCY_MISSING when pg is not installed
 */
export async function loadPg(): Promise<void> {
  if (loaded) return;
  try {
    loaded = ((await import('pg')) as { default: PgModule }).default;
  } catch (error) {
    throw new QuorumFenceError(
      'DEPENDENCY_MISSING',
      `the PostgreSQL guard needs the pg package, an optional peer dependency of quorumfence: npm install pg (${(error as Error).message})`,
      undefined,
      { cause: error },
    );
  }
}

function pgModule(): PgModule {
  if (!loaded) throw new QuorumFenceError('INTERNAL', 'pg is used before a PostgreSQL guard opened');
  return loaded;
}

/** pg's quoting of a literal (E'...' when it holds a backslash). */
export function escapeLiteral(text: string): string {
  return pgModule().escapeLiteral(text);
}

/** The SQLSTATE of an error the server sent, or undefined for any other error (connection, pool, ours). */
export function databaseErrorCode(error: unknown): string | undefined {
  return error instanceof pgModule().DatabaseError ? error.code : undefined;
}
