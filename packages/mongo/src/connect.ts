import { StowageError, type WorkflowSnapshot } from '@stowage/core';
import { StoreSet, describeType } from '@stowage/core/adapter';
import type { Db, MongoClient } from 'mongodb';
import { isClient, isDb, openConnection } from './connection.js';
import { parseStoreOptions, type MongoConnectionOptions, type MongoStoreOptions } from './options.js';
import { MongoProcessBackend, type MongoProcessBackendOptions } from './process/backend.js';
import { MongoCacheProvider, type MongoCacheProviderOptions } from './stores/cache.js';
import { MongoCheckpointStore, type MongoCheckpointStoreOptions } from './stores/checkpoints.js';
import { MongoCircuitBreakerStore, type MongoCircuitBreakerStoreOptions } from './stores/circuit-breaker.js';
import { MongoIdempotencyStore, type MongoIdempotencyStoreOptions } from './stores/idempotency.js';
import { MongoKeyValueStore, type MongoKeyValueStoreOptions } from './stores/kv.js';
import { MongoLockProvider, type MongoLockProviderOptions } from './stores/locks.js';
import {
  MongoLockingSnapshotStore,
  MongoSnapshotStore,
  mongo,
  type MongoSnapshotStoreOptions,
  type MongoWorkflowLockOptions,
} from './stores/snapshots.js';

/** Where to connect, plus the store options every store of the connection shares. */
export type MongoConnectOptions = MongoConnectionOptions & Pick<MongoStoreOptions, 'autoCreate' | 'dialect' | 'writeConcern' | 'cleanupInterval'>;

/** A store's own options under {@link connect}: everything but where to connect. */
export type StoreOptionsOf<T> = Omit<T, keyof MongoConnectionOptions>;

const CONNECTION_OPTIONS = ['url', 'connectionString', 'database', 'client', 'existingClient', 'existingDb', 'clientOptions'] as const;
const SHARED_STORE_OPTIONS = ['autoCreate', 'dialect', 'writeConcern', 'cleanupInterval'] as const;

/**
 * Every store on one MongoDB client, with the methods of `@stowage/postgres`'s `connect()`:
 *
 * ```ts
 * const db = connect(process.env.MONGODB_URI!);
 * const kv = db.kv();
 * const locks = db.locks();
 * const store = db.snapshots({ lock: true });
 * // …
 * await db.close(); // closes every store it handed out, then the client it opened
 * ```
 *
 * Give a connection string, a `MongoClient` or a `Db` you own (never closed by stowage), or
 * options: the connection options of every store plus `autoCreate`, `dialect`, `writeConcern`
 * and `cleanupInterval`, which every store of the connection takes unless its own options say
 * otherwise. Nothing connects before the first call (or a store's `ready()`).
 */
export function connect(options: MongoConnectOptions | MongoClient | Db | string): MongoStowage {
  return new MongoStowage(options);
}

/** The object {@link connect} returns. */
export class MongoStowage extends StoreSet<MongoStoreOptions> {
  constructor(options: MongoConnectOptions | MongoClient | Db | string) {
    const given: MongoConnectOptions =
      typeof options === 'string' ? { url: options } : isDb(options) ? { existingDb: options } : isClient(options) ? { client: options } : options;
    if (given === null || typeof given !== 'object') {
      throw new StowageError('E_INVALID_OPTION', `connect() takes a connection string, a MongoClient, a Db or options, got ${describeType(given)}`);
    }
    const settings = parseStoreOptions(given, 'kv', 'connect()'); // every option checked before a client opens
    // The client: opened here from a connection string (and closed by close()), else the caller's.
    const connection = openConnection(settings);
    const shared = Object.fromEntries(SHARED_STORE_OPTIONS.filter((name) => given[name] !== undefined).map((name) => [name, given[name]]));
    // Every store on this one client (a store given a client never closes it: close() does).
    super({ ...shared, client: connection.client, database: connection.db.databaseName }, CONNECTION_OPTIONS, () => connection.close());
  }

  kv(options: StoreOptionsOf<MongoKeyValueStoreOptions> = {}): MongoKeyValueStore {
    return this.open(new MongoKeyValueStore(this.storeOptions(options)));
  }

  snapshots<TSnapshot extends object = WorkflowSnapshot>(
    options: StoreOptionsOf<MongoSnapshotStoreOptions> & { lock: MongoWorkflowLockOptions | true },
  ): MongoLockingSnapshotStore<TSnapshot>;
  snapshots<TSnapshot extends object = WorkflowSnapshot>(options?: StoreOptionsOf<MongoSnapshotStoreOptions>): MongoSnapshotStore<TSnapshot>;
  snapshots<TSnapshot extends object = WorkflowSnapshot>(options: StoreOptionsOf<MongoSnapshotStoreOptions> = {}): MongoSnapshotStore<TSnapshot> {
    return this.open(mongo<TSnapshot>(this.storeOptions(options)));
  }

  locks(options: StoreOptionsOf<MongoLockProviderOptions> = {}): MongoLockProvider {
    return this.open(new MongoLockProvider(this.storeOptions(options)));
  }

  cache(options: StoreOptionsOf<MongoCacheProviderOptions> = {}): MongoCacheProvider {
    return this.open(new MongoCacheProvider(this.storeOptions(options)));
  }

  circuitBreaker(options: StoreOptionsOf<MongoCircuitBreakerStoreOptions> = {}): MongoCircuitBreakerStore {
    return this.open(new MongoCircuitBreakerStore(this.storeOptions(options)));
  }

  checkpoints(options: StoreOptionsOf<MongoCheckpointStoreOptions> = {}): MongoCheckpointStore {
    return this.open(new MongoCheckpointStore(this.storeOptions(options)));
  }

  idempotency(options: StoreOptionsOf<MongoIdempotencyStoreOptions> = {}): MongoIdempotencyStore {
    return this.open(new MongoIdempotencyStore(this.storeOptions(options)));
  }

  process(options: StoreOptionsOf<MongoProcessBackendOptions> = {}): MongoProcessBackend {
    return this.open(new MongoProcessBackend(this.storeOptions(options)));
  }
}
