/**
 * Type-level proof, checked by `tsc` (this package's `typecheck` script: strict mode, no casts)
 * against go-go-scope's own declarations (restated in ../../types/go-go-scope.d.ts):
 *
 * 1. `goGoScopePersistence(...)` of every backend is go-go-scope's `PersistenceProviders`
 *    (all five slots) and `PersistenceAdapter`, as it is returned.
 * 2. Which raw stowage stores fit a slot by themselves: lock, lock handle, cache, circuit
 *    breaker and idempotency do. Checkpoint stores do not (go-go-scope's `save<T>` takes any
 *    data and a missing checkpoint is `undefined`; stowage's answers `null`): that is what the
 *    go-go-scope layer is for, and the `@ts-expect-error` lines keep it on record.
 */
import type {
  CacheProvider,
  CheckpointStore,
  CircuitBreakerStore,
  IdempotencyStore,
  LockHandle,
  LockProvider,
} from '@stowage/core';
import { goGoScopePersistence as inMemory } from '@stowage/core/go-go-scope';
import type {
  MemoryCacheProvider,
  MemoryCheckpointStore,
  MemoryCircuitBreakerStore,
  MemoryIdempotencyStore,
  MemoryLockProvider,
} from '@stowage/core/memory';
import {
  goGoScopePersistence as onMongo,
  type MongoCacheProvider,
  type MongoCheckpointStore,
  type MongoCircuitBreakerStore,
  type MongoIdempotencyStore,
  type MongoLockProvider,
} from '@stowage/mongo';
import {
  goGoScopePersistence as onPostgres,
  type PostgresCacheProvider,
  type PostgresCheckpointStore,
  type PostgresCircuitBreakerStore,
  type PostgresIdempotencyStore,
  type PostgresLockProvider,
} from '@stowage/postgres';
import type * as GoGoScope from 'go-go-scope';
import type { Db, MongoClient } from 'mongodb';
import type { Pool } from 'pg';

// 1. The go-go-scope layer, wired as go-go-scope's adapters are (a pool, a Db, a URL).
export function wire(pool: Pool, db: Db, client: MongoClient) {
  const memory = inMemory({}, { keyPrefix: 'myapp:' });
  const postgres = onPostgres(pool, { keyPrefix: 'myapp:' });
  const mongo = onMongo(db, { keyPrefix: 'myapp:' });
  const providers: GoGoScope.PersistenceProviders[] = [
    memory,
    postgres,
    mongo,
    onPostgres('postgresql://localhost/app'),
    onPostgres({ url: 'postgresql://localhost/app', schema: 'app', tables: { lock: 'app_locks' } }),
    onMongo(client),
    onMongo('mongodb://127.0.0.1:27017/app'),
    onMongo({ url: 'mongodb://127.0.0.1:27017', database: 'app', collections: { cache: 'app_cache' } }),
  ];
  const adapters: GoGoScope.PersistenceAdapter[] = [memory, postgres, mongo];
  // Every slot is filled with go-go-scope's own interface.
  const slots: Required<GoGoScope.PersistenceProviders> = memory;
  // go-go-scope's generic calls, as scope() makes them.
  const latest: Promise<GoGoScope.Checkpoint<{ processed: number; at: Date }> | undefined> = memory.checkpoint.loadLatest('job');
  const cached: Promise<{ value: [undefined, number]; expiresAt?: number } | null> = memory.idempotency.get<[undefined, number]>('key');
  return { providers, adapters, slots, latest, cached };
}

// 2. The raw stores, slot by slot.
/** Compiles only when every provider fits go-go-scope's interface for its slot. */
type Fits<Providers extends Required<Omit<GoGoScope.PersistenceProviders, 'checkpoint'>>> = Providers;

export type Contracts = Fits<{
  lock: LockProvider;
  cache: CacheProvider;
  circuitBreaker: CircuitBreakerStore;
  idempotency: IdempotencyStore;
}>;
export type Memory = Fits<{
  lock: MemoryLockProvider;
  cache: MemoryCacheProvider;
  circuitBreaker: MemoryCircuitBreakerStore;
  idempotency: MemoryIdempotencyStore;
}>;
export type Postgres = Fits<{
  lock: PostgresLockProvider;
  cache: PostgresCacheProvider;
  circuitBreaker: PostgresCircuitBreakerStore;
  idempotency: PostgresIdempotencyStore;
}>;
export type Mongo = Fits<{
  lock: MongoLockProvider;
  cache: MongoCacheProvider;
  circuitBreaker: MongoCircuitBreakerStore;
  idempotency: MongoIdempotencyStore;
}>;

declare const handle: LockHandle;
export const lockHandle: GoGoScope.LockHandle = handle;

declare const checkpoints: CheckpointStore;
declare const memoryCheckpoints: MemoryCheckpointStore;
declare const postgresCheckpoints: PostgresCheckpointStore;
declare const mongoCheckpoints: MongoCheckpointStore;
// @ts-expect-error a CheckpointStore answers null and takes JSON data: use the go-go-scope layer's `checkpoint`
export const checkpointContract: GoGoScope.CheckpointProvider = checkpoints;
// @ts-expect-error same on the in-memory class
export const checkpointMemory: GoGoScope.CheckpointProvider = memoryCheckpoints;
// @ts-expect-error same on the Postgres class
export const checkpointPostgres: GoGoScope.CheckpointProvider = postgresCheckpoints;
// @ts-expect-error same on the MongoDB class
export const checkpointMongo: GoGoScope.CheckpointProvider = mongoCheckpoints;
