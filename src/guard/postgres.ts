/**
 * The package entry `quorumfence/guard/postgres`: the PostgreSQL guard (postgres-guard.ts) and what its callers
 * write against, from the modules that own each part.
 */
export { BARRIER_CACHE_SIZE, PostgresGuard, type PostgresGuardOptions } from './postgres-guard.js';
export { POSTGRES_GUARD_FORMAT } from './postgres-schema.js';
export type {
  PostgresPool,
  PostgresPoolClient,
  PostgresQueryConfig,
  PostgresQueryResult,
  PostgresRow,
} from './postgres-driver.js';
export type {
  FencedStatement,
  PostgresMutation,
  PostgresMutationRefusal,
  PostgresWriteContext,
  StatementResult,
  WriteForm,
} from './postgres-sql.js';
export { DEFAULT_MAX_LOG_PAGE, DEFAULT_MAX_REFUSED_LOG_ENTRIES } from './adapter.js';
