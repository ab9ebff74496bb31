export { MongoKeyValueStore, type KeyValueDocument, type MongoKeyValueStoreOptions } from './kv.js';
export {
  MongoSnapshotStore,
  MongoLockingSnapshotStore,
  mongo,
  type MongoSnapshotOptions,
  type MongoSnapshotStoreOptions,
  type MongoWorkflowLockOptions,
  type SnapshotDocument,
} from './snapshots.js';
export { MongoLockProvider, type LockDocument, type MongoLockProviderOptions } from './locks.js';
export { MongoCacheProvider, type MongoCacheProviderOptions } from './cache.js';
export { MongoCircuitBreakerStore, type CircuitDocument, type MongoCircuitBreakerStoreOptions } from './circuit-breaker.js';
export { MongoCheckpointStore, type CheckpointDocument, type MongoCheckpointStoreOptions } from './checkpoints.js';
export { MongoIdempotencyStore, type IdempotencyDocument, type MongoIdempotencyStoreOptions } from './idempotency.js';
export { createMongoPersistence, type MongoPersistenceOptions } from './persistence.js';
export { MongoConnection, type MongoConnectionOptions } from './connection.js';
export type { MongoStoreOptions } from './resource.js';
export type { MongoDialect, MongoDialectOption } from './server-features.js';
export {
  DEFAULT_COLLECTIONS,
  collectionSpec,
  indexSpecs,
  type MongoCollectionKind,
  type MongoCollectionSpec,
  type MongoIndexSpec,
} from './schema.js';
export { createMongoProcessBackend, MongoProcessBackend, processIndexSpec, DEFAULT_PROCESS_COLLECTION, type MongoProcessBackendOptions, type ProcessVersionDocument, type ClaimTicketDocument } from './state-machine.js';
