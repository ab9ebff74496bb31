/**
 * `@stowage/core`: what a user of stowage needs — the contracts, `StowageError` and its codes,
 * codecs, glob escaping, clocks for tests, `createStatePersistence` for awaitly, processes, and
 * the names of the diagnostics channels stowage publishes on (`STOWAGE_CHANNELS`).
 * What adapters are built with is in `@stowage/core/adapter`; the in-memory adapter is
 * `@stowage/core/memory`, the conformance suite `@stowage/core/conformance`.
 */
export { ERROR_CODES, StowageError, isStowageError, type StowageErrorCode } from './errors.js';
export { MAX_DURATION_MS, MAX_KEY_BYTES, compareKeys } from './keys.js';
export { escapeGlob } from './glob.js';
export { ManualClock, monotonicClock, type Clock } from './clock.js';
export { hasCapability, type Capabilities, type CapabilityName, type HasCapabilities } from './capabilities.js';
export { jsonCodec, richCodec, type Codec, type JsonObject, type JsonPrimitive, type JsonValue } from './json.js';
export { AwaitlyKeyValueStore, DEFAULT_STATE_PREFIX, createStatePersistence, type StatePersistenceOptions } from './persistence.js';
export {
  STOWAGE_CHANNELS,
  type BatchMessage,
  type CacheLookupMessage,
  type LockWaitMessage,
  type OperationMessage,
  type ProcessClaimMessage,
  type ProcessTransitionMessage,
  type StoreIdentity,
} from './diagnostics.js';
export type * from './contracts/common.js';
export type * from './contracts/kv.js';
export * from './contracts/snapshots.js';
export type * from './contracts/locks.js';
export type * from './contracts/cache.js';
export type * from './contracts/circuit-breaker.js';
export type * from './contracts/checkpoints.js';
export type * from './contracts/idempotency.js';
export * from './process/index.js';
