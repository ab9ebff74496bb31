export { connect, MongoStowage, type MongoConnectOptions, type StoreOptionsOf } from './connect.js';
export { MongoKeyValueStore, type MongoKeyValueStoreOptions } from './stores/kv.js';
export {
  MongoSnapshotStore,
  MongoLockingSnapshotStore,
  mongo,
  type MongoSnapshotOptions,
  type MongoSnapshotRetention,
  type MongoSnapshotStoreOptions,
  type MongoWorkflowLockOptions,
} from './stores/snapshots.js';
export { MongoLockProvider, type MongoLockProviderOptions } from './stores/locks.js';
export { MongoCacheProvider, type MongoCacheProviderOptions } from './stores/cache.js';
export { MongoCircuitBreakerStore, type MongoCircuitBreakerStoreOptions } from './stores/circuit-breaker.js';
export { MongoCheckpointStore, type MongoCheckpointStoreOptions } from './stores/checkpoints.js';
export { MongoIdempotencyStore, type MongoIdempotencyStoreOptions } from './stores/idempotency.js';
export { createMongoPersistence, type MongoPersistenceOptions } from './stores/persistence.js';
export type {
  CacheDocument,
  CheckpointDocument,
  CircuitDocument,
  IdempotencyDocument,
  KeyValueDocument,
  LockDocument,
  SnapshotDocument,
} from './documents.js';
export { MongoConnection } from './connection.js';
export type { MongoConnectionOptions, MongoStoreOptions } from './options.js';
export type { MongoDialect, MongoDialectName, MongoDialectOption } from './dialects/dialect.js';
export {
  DEFAULT_COLLECTIONS,
  collectionSpec,
  indexSpecs,
  rolePrivileges,
  type MongoCollectionKind,
  type MongoCollectionSpec,
  type MongoIndexSpec,
  type MongoPrivilege,
  type MongoShardKey,
  type RolePrivilegesOptions,
} from './schema.js';
export {
  DEFAULT_PROCESS_COLLECTION,
  MongoProcessBackend,
  createMongoProcessBackend,
  processIndexSpec,
  type MongoProcessBackendOptions,
} from './process/backend.js';
export type { ClaimTicketDocument, ProcessVersionDocument } from './process/documents.js';
export { goGoScopePersistence, type MongoGoGoScopeOptions } from './go-go-scope.js';
