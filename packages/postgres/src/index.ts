export { postgres, PostgresSnapshotStore, PostgresLockingSnapshotStore } from './snapshots.js';
export type { PostgresSnapshotStoreOptions, PostgresWorkflowLockOptions } from './snapshots.js';
export { createPostgresPersistence } from './persistence.js';
export type { PostgresPersistenceOptions } from './persistence.js';
export { PostgresKeyValueStore } from './kv.js';
export type { PostgresKeyValueStoreOptions } from './kv.js';
export { PostgresLockProvider } from './locks.js';
export type { PostgresLockProviderOptions } from './locks.js';
export { PostgresCacheProvider } from './cache.js';
export type { PostgresCacheProviderOptions } from './cache.js';
export { PostgresCircuitBreakerStore } from './circuit-breaker.js';
export type { PostgresCircuitBreakerStoreOptions } from './circuit-breaker.js';
export { PostgresCheckpointStore } from './checkpoints.js';
export type { PostgresCheckpointStoreOptions } from './checkpoints.js';
export { PostgresIdempotencyStore } from './idempotency.js';
export type { PostgresIdempotencyStoreOptions } from './idempotency.js';
export {
  schemaSql,
  tableDdl,
  TableName,
  DEFAULT_TABLE_NAMES,
  DEFAULT_WORKFLOW_LOCK_TABLE,
  assertValidIdentifier,
  quoteIdentifier,
} from './schema.js';
export type { SchemaSqlOptions, TableKind } from './schema.js';
export { PostgresConnection, DEFAULT_APPLICATION_NAME } from './connection.js';
export type {
  PostgresConnectionOptions,
  PostgresPool,
  PostgresPoolClient,
  PostgresStatement,
  PostgresPoolOptions,
  PostgresQueryResult,
} from './connection.js';
export { PostgresStoreBase, POSTGRES_CAPABILITIES } from './store.js';
export type { PostgresStoreOptions } from './store.js';
export { toStowageError } from './errors.js';
export { createPostgresProcessBackend, PostgresProcessBackend, processSchemaSql, processTablesDdl, DEFAULT_PROCESS_ITEMS_TABLE, DEFAULT_PROCESS_TRANSITIONS_TABLE, type PostgresProcessBackendOptions, type ProcessSchemaSqlOptions } from './state-machine.js';
