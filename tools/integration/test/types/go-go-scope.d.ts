/**
 * The persistence provider shapes of `go-go-scope` (restated: the package is not on the npm
 * registry, so it cannot be installed and imported here).
 *
 * Sources: seed 001 (the go-go-scope MongoDB adapter page) describes LockProvider, LockHandle,
 * CacheProvider and CircuitBreakerStateProvider method by method. Seed 001 names checkpoint and
 * idempotency support but not their signatures; those two are restated from go-go-scope's
 * public `persistence/types` module. Comments are ours.
 */
declare module 'go-go-scope/persistence' {
  export interface LockHandle {
    release(): Promise<void>;
    extend(ttl: number): Promise<boolean>;
    isValid(): Promise<boolean>;
  }

  export interface LockProvider {
    /** `null` when another owner holds the lock. */
    acquire(key: string, ttl: number, owner?: string): Promise<LockHandle | null>;
    extend(key: string, ttl: number, owner: string): Promise<boolean>;
    forceRelease(key: string): Promise<void>;
  }

  export interface CircuitBreakerPersistedState {
    state: 'closed' | 'open' | 'half-open';
    failureCount: number;
    lastFailureTime?: number;
    lastSuccessTime?: number;
  }

  export interface CircuitBreakerStateProvider {
    getState(key: string): Promise<CircuitBreakerPersistedState | null>;
    setState(key: string, state: CircuitBreakerPersistedState): Promise<void>;
    /** Resolves to the failure count after this failure. */
    recordFailure(key: string, maxFailures: number): Promise<number>;
    recordSuccess(key: string): Promise<void>;
    subscribe?(key: string, callback: (state: CircuitBreakerPersistedState) => void): () => void;
  }

  export interface CacheProvider {
    get<T>(key: string): Promise<T | null>;
    set<T>(key: string, value: T, ttl?: number): Promise<void>;
    delete(key: string): Promise<void>;
    has(key: string): Promise<boolean>;
    clear(): Promise<void>;
    keys(pattern?: string): Promise<string[]>;
  }

  export interface IdempotencyProvider {
    get<T>(key: string): Promise<{ value: T; expiresAt?: number } | null>;
    set<T>(key: string, value: T, ttl?: number): Promise<void>;
    delete(key: string): Promise<void>;
  }

  export interface Checkpoint<T = unknown> {
    id: string;
    taskId: string;
    sequence: number;
    timestamp: number;
    progress: number;
    data: T;
    estimatedTimeRemaining?: number;
  }

  /** Note: a missing checkpoint is `undefined` here, not `null`. */
  export interface CheckpointProvider {
    save<T>(checkpoint: Checkpoint<T>): Promise<void>;
    loadLatest<T>(taskId: string): Promise<Checkpoint<T> | undefined>;
    load<T>(checkpointId: string): Promise<Checkpoint<T> | undefined>;
    list(taskId: string): Promise<Checkpoint<unknown>[]>;
    cleanup(taskId: string, keepCount: number): Promise<void>;
    deleteAll(taskId: string): Promise<void>;
  }

  export interface PersistenceProviders {
    lock?: LockProvider;
    circuitBreaker?: CircuitBreakerStateProvider;
    cache?: CacheProvider;
    idempotency?: IdempotencyProvider;
    checkpoint?: CheckpointProvider;
  }
}
