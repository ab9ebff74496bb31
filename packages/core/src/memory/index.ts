/**
 * `@stowage/core/memory`: every stowage contract in process memory, with the same semantics
 * as the database adapters (TTL on the store's own clock, fencing tokens, version checks).
 * Build several objects on one `createMemoryStorage()` to share state between them.
 */
export {
  MEMORY_CAPABILITIES,
  MemoryStorage,
  SWEEP_EVERY_WRITES,
  createMemoryStorage,
  type MemoryOptions,
  type MemoryStorageOptions,
} from './storage.js';
export { MemoryKeyValueStore, type MemoryKeyValueStoreOptions } from './kv.js';
export {
  MemoryLockingSnapshotStore,
  MemorySnapshotStore,
  memory,
  type MemoryLockingSnapshotStoreOptions,
  type MemorySnapshotStoreOptions,
  type MemoryWorkflowLockOptions,
} from './snapshots.js';
export { MemoryLockProvider, type MemoryLockProviderOptions } from './locks.js';
export { MemoryCacheProvider, type MemoryCacheProviderOptions } from './cache.js';
export { MemoryCircuitBreakerStore, type MemoryCircuitBreakerStoreOptions } from './circuit-breaker.js';
export { MemoryCheckpointStore, type MemoryCheckpointStoreOptions } from './checkpoints.js';
export { MemoryIdempotencyStore, type MemoryIdempotencyStoreOptions } from './idempotency.js';
export { MemoryProcessBackend, MEMORY_PROCESS_CAPABILITIES, type MemoryProcessBackendOptions } from './process.js';
