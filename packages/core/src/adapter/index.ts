/**
 * `@stowage/core/adapter`: the kit adapters are built on. Each contract's public behaviour
 * (state, argument checks with the stable error codes, encoding, codecs, versions, lock
 * handles, `withLock`, `getOrSet`) is written once here, in a base class; an adapter extends
 * it and implements the small `_` operations, one statement each. See "Writing an adapter" in
 * the package README.
 */
// Only what adapter authors use is exported here (the database adapters, the SQLite example,
// the bench and the reliability battery); the helpers the base classes are written with stay
// inside core. `node tools/entry-exports.mjs` lists each export and who imports it.

/**
 * The base every store class extends, and the handle a backend builds once and hands to each
 * store (its capabilities, readiness, error mapping, close, transactions). `localHandle` is the
 * handle of a store that needs no connection.
 */
export { StoreBase, localHandle, type StoreHandle } from './store.js';
/** What a backend's `connect()` returns is built on: stores on one connection, closed together. */
export { StoreSet } from './store-set.js';
/** The system, database and table a store reports in telemetry. */
export type { StoreIdentity } from '../diagnostics.js';

// One base class per contract: extend it and implement its `_` operations. The `Stored…`
// types are the rows those operations read and write.
export { KeyValueStoreBase, type KeyValueStoreBaseOptions, type KeyValueWriteOp } from './kv.js';
/** What a coalesced batch (`_deleteEach`) answers for a key it skipped because another transaction holds its row: that call runs alone. */
export { RUN_ALONE } from './coalesce.js';
export {
  SnapshotStoreBase,
  type SnapshotCursor,
  type SnapshotStoreBaseOptions,
  type StoredSnapshot,
  type StoredSnapshotItem,
} from './snapshots.js';
/** Locks: the base takes a `LeaseDriver` (acquire, extend, release… one lease row each). */
export { LockProviderBase } from './locks.js';
export type { Lease, LeaseDriver } from './lock-support.js';
export { CacheProviderBase, type CacheWrite } from './cache.js';
/**
 * Circuit breakers: `_recordFailure` applies `nextCircuitOnFailure` atomically on the server;
 * `effectiveCircuitState` is how a stored `open` circuit reads once its cool-down is over.
 */
export { CircuitBreakerStoreBase, effectiveCircuitState, nextCircuitOnFailure } from './circuit-breaker.js';
export { CheckpointStoreBase, type CheckpointStoreBaseOptions, type StoredCheckpoint } from './checkpoints.js';
export {
  IdempotencyStoreBase,
  type IdempotencyStoreBaseOptions,
  type RunClaim,
  type StoredReservation,
  type StoredResult,
} from './idempotency.js';
/** Processes: the base validates every request before the backend's `_` operation sees it. */
export { ProcessBackendBase } from './process.js';
/** awaitly's key-value persistence for an adapter's async factory: resolves once its prefix is recorded. */
export { openStatePersistence } from '../persistence.js';

/** An adapter's own options: the options object and flags (`E_INVALID_OPTION`). */
export { assertOptionsObject, booleanOption } from './options.js';
/** Keys: their order (code points), their size in UTF-8 bytes, and how to name a bad value in an error. */
export { compareKeys, describeType, describeValue, utf8ByteLength } from '../keys.js';
/**
 * Globs: the kit hands a backend each pattern parsed (`Glob`: its literal `prefix`, `tokens`,
 * `matches(key)`); the backend narrows its scan with the prefix and tokens, escaping literal
 * text for its dialect (`escapeLike`, `escapeRegex`), and filters with `matches`, which runs
 * in O(key × pattern) (`globMatcher`). `compileGlob` parses a pattern (`E_INVALID_KEY`).
 */
export { compileGlob, escapeLike, escapeRegex, globMatcher, type Glob, type GlobToken } from '../glob.js';
/** A raw socket error a driver passed on unwrapped, as `E_UNAVAILABLE` or `E_TIMEOUT`. */
export { socketErrorCode } from '../errors.js';
/** A database's clock estimated over round trips, for a backend whose statements cannot read the server's time. */
export { MeasuredClock, type MeasuredClockOptions } from '../measured-clock.js';
/** Waits `ms`; rejects with the signal's reason as soon as its AbortSignal aborts. */
export { sleep } from '../clock.js';
/**
 * Cleanup the same on every backend: the background sweeper of each table or collection
 * (`Sweepers` per shared connection, `activeSweepers` for tests and diagnostics), the
 * `cleanupInterval` option (`cleanupIntervalOf`, default `DEFAULT_CLEANUP_INTERVAL`), and
 * retention: its periods (`retentionOf`; the snapshot and process bases read their options),
 * which snapshots are finished (`FINISHED_STATUSES`), and deleting in bounded batches
 * (`clearInBatches`).
 */
export {
  DEFAULT_CLEANUP_INTERVAL,
  Sweepers,
  activeSweepers,
  cleanupIntervalOf,
  type SweepJob,
  type SweepRegistration,
  type TableSweeper,
} from './sweeper.js';
export { FINISHED_STATUSES, clearInBatches, retentionOf } from './retention.js';
