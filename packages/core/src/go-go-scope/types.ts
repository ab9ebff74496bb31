import type { CacheProvider } from '../contracts/cache.js';
import type { Checkpoint, CheckpointStore } from '../contracts/checkpoints.js';
import type { CircuitBreakerPersistedState, CircuitBreakerStore, RecordFailureOptions } from '../contracts/circuit-breaker.js';
import type { IdempotencyRecord, IdempotencyStore } from '../contracts/idempotency.js';
import type { LockHandle, LockProvider } from '../contracts/locks.js';

/*
 * The provider shapes go-go-scope's `scope({ persistence })` takes, restated structurally so
 * that stowage needs no go-go-scope at run time or in its types. Each is the go-go-scope
 * interface of its slot (`lock`, `circuitBreaker`, `cache`, `idempotency`, `checkpoint`),
 * sometimes with wider parameters (a cache `keys` that also takes a RegExp) or richer results
 * (stowage's `LockHandle`, with its fencing token), so every one is assignable to go-go-scope's.
 */

/** go-go-scope's `LockProvider`; `acquire` resolves to stowage's handle (with `fence`). */
export interface GoGoScopeLockProvider {
  acquire(key: string, ttl: number, owner?: string): Promise<LockHandle | null>;
  extend(key: string, ttl: number, owner: string): Promise<boolean>;
  forceRelease(key: string): Promise<void>;
}

/** go-go-scope's `CircuitBreakerStateProvider` (plus stowage's optional cool-down). */
export interface GoGoScopeCircuitBreakerProvider {
  getState(key: string): Promise<CircuitBreakerPersistedState | null>;
  setState(key: string, state: CircuitBreakerPersistedState): Promise<void>;
  recordFailure(key: string, maxFailures: number, options?: RecordFailureOptions): Promise<number>;
  recordSuccess(key: string): Promise<void>;
  /**
   * go-go-scope's optional push of state changes. Declared so that go-go-scope's own call,
   * `circuitBreaker.subscribe?.(key, callback)`, type-checks on this type; stowage's providers
   * leave it out (no store pushes circuit state), so go-go-scope reads `getState` instead.
   */
  subscribe?(key: string, callback: (state: CircuitBreakerPersistedState) => void): () => void;
}

/**
 * go-go-scope's `CacheProvider`. A ttl of 0 means no expiry and a fractional ttl is rounded up,
 * as go-go-scope's own adapters take them; a key of more than 1024 UTF-8 bytes is stored (and
 * listed by `keys()`) as its start, `'#'` and its SHA-256.
 */
export interface GoGoScopeCacheProvider {
  get<T>(key: string): Promise<T | null>;
  set<T>(key: string, value: T, ttl?: number): Promise<void>;
  delete(key: string): Promise<void>;
  has(key: string): Promise<boolean>;
  clear(): Promise<void>;
  /** A string is a glob; a `RegExp` is tested against each key (without the cache's prefix). */
  keys(pattern?: string | RegExp): Promise<string[]>;
}

/**
 * go-go-scope's `IdempotencyProvider`. A ttl of 0 means no expiry and a fractional ttl is
 * rounded up, as go-go-scope's own adapters take them; a key (with `keyPrefix`) of more than
 * 1024 UTF-8 bytes is stored as its start, `'#'` and its SHA-256.
 */
export interface GoGoScopeIdempotencyProvider {
  get<T>(key: string): Promise<IdempotencyRecord<T> | null>;
  set<T>(key: string, value: T, ttl?: number): Promise<void>;
  delete(key: string): Promise<void>;
}

/**
 * go-go-scope's `CheckpointProvider`: `save` takes a checkpoint of any data type, a missing
 * checkpoint is `undefined`, and saving an id again replaces it (go-go-scope's interval
 * auto-save saves the current checkpoint over and over).
 */
export interface GoGoScopeCheckpointProvider {
  save<T>(checkpoint: Checkpoint<T>): Promise<void>;
  loadLatest<T>(taskId: string): Promise<Checkpoint<T> | undefined>;
  load<T>(checkpointId: string): Promise<Checkpoint<T> | undefined>;
  list(taskId: string): Promise<Checkpoint<unknown>[]>;
  cleanup(taskId: string, keepCount: number): Promise<void>;
  deleteAll(taskId: string): Promise<void>;
}

/** The stowage stores behind a {@link GoGoScopePersistence}, with their whole contracts. */
export interface GoGoScopeStores {
  lock: LockProvider;
  circuitBreaker: CircuitBreakerStore;
  cache: CacheProvider;
  idempotency: IdempotencyStore;
  checkpoint: CheckpointStore<unknown>;
}

/**
 * go-go-scope's `PersistenceProviders` (every slot filled) and `PersistenceAdapter`
 * (`connect`, `disconnect`, `isConnected`): pass it as `scope({ persistence })`.
 */
export interface GoGoScopePersistence extends AsyncDisposable {
  readonly lock: GoGoScopeLockProvider;
  readonly circuitBreaker: GoGoScopeCircuitBreakerProvider;
  readonly cache: GoGoScopeCacheProvider;
  readonly idempotency: GoGoScopeIdempotencyProvider;
  readonly checkpoint: GoGoScopeCheckpointProvider;
  /**
   * The stowage stores themselves, for what go-go-scope does not ask for: fencing `withLock`,
   * idempotency `reserve`/`complete`, cache `getOrSet`, strict checkpoints… Their keys are
   * stored keys: the `keyPrefix` of lock, circuit-breaker and idempotency keys is not added
   * for you there (the cache's prefix is its namespace, so it is).
   */
  readonly stores: GoGoScopeStores;
  /** Creates the tables or collections and indexes now (optional: the first call of each store does it). */
  connect(): Promise<void>;
  /** True once `connect()` resolved, until `close()`. */
  isConnected(): boolean;
  /** Same as {@link close}. */
  disconnect(): Promise<void>;
  /** Closes every store, then the connection if it was opened for them; idempotent. */
  close(): Promise<void>;
}

/** What the go-go-scope layer is told besides its stores. */
export interface GoGoScopeOptions {
  /**
   * Namespace of this application's entries, as go-go-scope's adapters' `keyPrefix`: put in
   * front of every lock, circuit-breaker and idempotency key, and the cache's `prefix` (a
   * namespace: `clear()` and `keys()` see only it). Checkpoints are not prefixed (go-go-scope's
   * adapters do not prefix them either). Default `''`.
   */
  keyPrefix?: string;
}

/** The table (Postgres) or collection (MongoDB) names of go-go-scope's own adapters, by slot. */
export interface GoGoScopeNames {
  lock: string;
  circuitBreaker: string;
  cache: string;
  idempotency: string;
  checkpoint: string;
}

/** go-go-scope's adapters' names (`go_goscope_locks`, …): the default on every backend. */
export const GO_GO_SCOPE_NAMES: Readonly<GoGoScopeNames> = Object.freeze({
  lock: 'go_goscope_locks',
  circuitBreaker: 'go_goscope_circuit',
  cache: 'go_goscope_cache',
  idempotency: 'go_goscope_idempotency',
  checkpoint: 'go_goscope_checkpoints',
});
