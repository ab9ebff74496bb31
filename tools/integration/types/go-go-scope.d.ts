/**
 * The persistence types of `go-go-scope` (2.x), as its package root exports them
 * (`import type { PersistenceProviders } from 'go-go-scope'`). go-go-scope is not on the npm
 * registry this project installs from, so its declarations are restated here, member for
 * member, from its published `persistence/types` module (which `go-go-scope`'s index
 * re-exports, together with `PersistenceProviders` from its `types` module). Doc comments are
 * shortened; nothing is widened or narrowed. Only types: importing a value from 'go-go-scope'
 * would fail at run time here.
 */
declare module 'go-go-scope' {
  /** Distributed lock provider. */
  export interface LockProvider {
    /** Lock handle if acquired, null if the lock is held by another owner. `owner` lets the same owner extend. */
    acquire(key: string, ttl: number, owner?: string): Promise<LockHandle | null>;
    /** True if extended, false if the lock expired or the owner does not match. */
    extend(key: string, ttl: number, owner: string): Promise<boolean>;
    /** Releases the lock whoever holds it. */
    forceRelease(key: string): Promise<void>;
  }

  export interface LockHandle {
    release(): Promise<void>;
    extend(ttl: number): Promise<boolean>;
    isValid(): Promise<boolean>;
  }

  export interface CircuitBreakerStateProvider {
    getState(key: string): Promise<CircuitBreakerPersistedState | null>;
    setState(key: string, state: CircuitBreakerPersistedState): Promise<void>;
    /** Resolves to the new failure count. */
    recordFailure(key: string, maxFailures: number): Promise<number>;
    recordSuccess(key: string): Promise<void>;
    subscribe?(key: string, callback: (state: CircuitBreakerPersistedState) => void): () => void;
  }

  export interface CircuitBreakerPersistedState {
    state: 'closed' | 'open' | 'half-open';
    failureCount: number;
    lastFailureTime?: number;
    lastSuccessTime?: number;
  }

  export interface CacheProvider {
    /** The cached value, or null if not found or expired. */
    get<T>(key: string): Promise<T | null>;
    /** `ttl` in milliseconds (optional). */
    set<T>(key: string, value: T, ttl?: number): Promise<void>;
    delete(key: string): Promise<void>;
    has(key: string): Promise<boolean>;
    clear(): Promise<void>;
    keys(pattern?: string): Promise<string[]>;
  }

  export interface CacheStats {
    hits: number;
    misses: number;
    size: number;
    hitRatio: number;
  }

  /** Caches task results; `scope().task(fn, { idempotency: { key, ttl } })` stores its `[error, value]` tuple here. */
  export interface IdempotencyProvider {
    /** The value and its optional expiry (epoch ms), or null if not found or expired. */
    get<T>(key: string): Promise<{ value: T; expiresAt?: number } | null>;
    set<T>(key: string, value: T, ttl?: number): Promise<void>;
    delete(key: string): Promise<void>;
  }

  export interface Checkpoint<T = unknown> {
    id: string;
    taskId: string;
    /** Monotonically increasing. */
    sequence: number;
    timestamp: number;
    /** 0-100. */
    progress: number;
    /** Opaque to the framework. */
    data: T;
    estimatedTimeRemaining?: number;
  }

  /** Persists task progress; a missing checkpoint is `undefined`. */
  export interface CheckpointProvider {
    save<T>(checkpoint: Checkpoint<T>): Promise<void>;
    loadLatest<T>(taskId: string): Promise<Checkpoint<T> | undefined>;
    load<T>(checkpointId: string): Promise<Checkpoint<T> | undefined>;
    list(taskId: string): Promise<Checkpoint<unknown>[]>;
    /** Deletes old checkpoints, keeping the `keepCount` most recent. */
    cleanup(taskId: string, keepCount: number): Promise<void>;
    deleteAll(taskId: string): Promise<void>;
  }

  /** What `scope({ persistence })` takes. */
  export interface PersistenceProviders {
    lock?: LockProvider;
    circuitBreaker?: CircuitBreakerStateProvider;
    cache?: CacheProvider;
    idempotency?: IdempotencyProvider;
    checkpoint?: CheckpointProvider;
  }

  export interface PersistenceAdapterOptions {
    /** Key prefix for all operations (for namespacing). */
    keyPrefix?: string;
    defaultLockTTL?: number;
    createTables?: boolean;
  }

  export interface PersistenceAdapter {
    connect?(): Promise<void>;
    disconnect?(): Promise<void>;
    isConnected?(): boolean;
  }
}
