/**
 * `@stowage/core/adapter`: the kit adapters are built on. Each contract's public behaviour
 * (state, argument checks with the stable error codes, encoding, codecs, versions, lock
 * handles, `withLock`, `getOrSet`) is written once here, in a base class; an adapter extends
 * it and implements the small `_` operations, one statement each. See "Writing an adapter" in
 * the package README.
 */
export { StoreBase, callerCode, callerError, localHandle, type OperationSubject, type StoreHandle } from './store.js';
export type { StoreIdentity } from '../diagnostics.js';
export { KeyValueStoreBase, type KeyValueStoreBaseOptions, type KeyValueWriteOp } from './kv.js';
export { Coalescer, RUN_ALONE, type CoalescedOperation } from './coalesce.js';
export {
  SnapshotStoreBase,
  encodeSnapshot,
  compareSnapshotItems,
  isAfterCursor,
  type SnapshotCursor,
  type SnapshotStoreBaseOptions,
  type StoredSnapshot,
  type StoredSnapshotItem,
} from './snapshots.js';
export { LockProviderBase } from './locks.js';
/** awaitly's key-value persistence for an adapter's async factory: resolves once its prefix is recorded. */
export { openStatePersistence } from '../persistence.js';
export {
  DEFAULT_POLL_INTERVAL,
  StowageLockHandle,
  acquireWithWait,
  WaitLines,
  newOwnerToken,
  parseAcquireArgs,
  runWithLock,
  type Lease,
  type LeaseDriver,
  type LockCallRunner,
  type ParsedAcquireOptions,
} from './lock-support.js';
export { CacheProviderBase, SingleFlight, type CacheWrite } from './cache.js';
export {
  CircuitBreakerStoreBase,
  assertCircuitState,
  assertMaxFailures,
  effectiveCircuitState,
  nextCircuitOnFailure,
} from './circuit-breaker.js';
export { CheckpointStoreBase, assertCheckpoint, assertKeepCount, type CheckpointStoreBaseOptions, type StoredCheckpoint } from './checkpoints.js';
export {
  IdempotencyStoreBase,
  assertReservationToken,
  type IdempotencyStoreBaseOptions,
  type RunClaim,
  type StoredReservation,
  type StoredResult,
} from './idempotency.js';
export { ProcessBackendBase } from './process.js';
export {
  assertExpectedVersion,
  assertOptionsObject,
  assertValidPrefix,
  booleanOption,
  parseKeyValueWrites,
  ttlOfSetOptions,
  type KeyValueWrites,
} from './options.js';
// The rules adapters build on, for backends that compile them to their own dialect.
export * from '../process/validation.js';
export { MAX_KEY_BYTES, MAX_DURATION_MS, assertValidKey, assertValidKeys, assertValidOwner, assertValidStringValue, assertValidDuration, assertOptionalDuration, compareKeys, describeType, describeValue, utf8ByteLength } from '../keys.js';
export { compileGlob, escapeGlob, escapeLike, escapeRegex, globMatcher, globToLike, globToRegExp, globToRegexSource, parseGlob, type Glob, type GlobToken, type RegexFlavor } from '../glob.js';
export { assertCodec, assertJsonValue, decodeValue, encodeValue } from '../json.js';
export { closedError, socketErrorCode } from '../errors.js';
export { MeasuredClock, type ClockSample, type MeasuredClockOptions } from '../measured-clock.js';
export { sleep } from '../clock.js';
// Cleanup the same on every backend: the background sweeper, its `cleanupInterval`, retention.
export {
  DEFAULT_CLEANUP_INTERVAL,
  Sweepers,
  activeSweepers,
  cleanupIntervalOf,
  type SweepJob,
  type SweepRegistration,
  type TableSweeper,
} from './sweeper.js';
export { FINISHED_STATUSES, clearInBatches, finishedAfterOf, retentionOf } from './retention.js';
