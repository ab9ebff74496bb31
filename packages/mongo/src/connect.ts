import { StowageError, type WorkflowSnapshot } from '@stowage/core';
import { describeType } from '@stowage/core/adapter';
import type { Db, MongoClient } from 'mongodb';
import { isClient, isDb, openConnection, type MongoConnection } from './connection.js';
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
export class MongoStowage {
  /** What every store gets: the client and database, and the shared store options. */
  readonly #base: MongoStoreOptions;
  /** The client: opened here from a connection string (and closed by {@link close}), else the caller's. */
  readonly #connection: MongoConnection;
  readonly #stores = new Set<{ close(): Promise<void> }>();
  #closing: Promise<void> | undefined;

  constructor(options: MongoConnectOptions | MongoClient | Db | string) {
    const given: MongoConnectOptions =
      typeof options === 'string' ? { url: options } : isDb(options) ? { existingDb: options } : isClient(options) ? { client: options } : options;
    if (given === null || typeof given !== 'object') {
      throw new StowageError('E_INVALID_OPTION', `connect() takes a connection string, a MongoClient, a Db or options, got ${describeType(given)}`);
    }
    const settings = parseStoreOptions(given, 'kv', 'connect()'); // every option checked before a client opens
    this.#connection = openConnection(settings);
    const shared = Object.fromEntries(SHARED_STORE_OPTIONS.filter((name) => given[name] !== undefined).map((name) => [name, given[name]]));
    // Every store on this one client (a store given a client never closes it: close() does).
    this.#base = { ...shared, client: this.#connection.client, database: this.#connection.db.databaseName };
  }

  kv(options: StoreOptionsOf<MongoKeyValueStoreOptions> = {}): MongoKeyValueStore {
    return this.#open(new MongoKeyValueStore(this.#options(options)));
  }

  snapshots<TSnapshot extends object = WorkflowSnapshot>(
    options: StoreOptionsOf<MongoSnapshotStoreOptions> & { lock: MongoWorkflowLockOptions | true },
  ): MongoLockingSnapshotStore<TSnapshot>;
  snapshots<TSnapshot extends object = WorkflowSnapshot>(options?: StoreOptionsOf<MongoSnapshotStoreOptions>): MongoSnapshotStore<TSnapshot>;
  snapshots<TSnapshot extends object = WorkflowSnapshot>(options: StoreOptionsOf<MongoSnapshotStoreOptions> = {}): MongoSnapshotStore<TSnapshot> {
    return this.#open(mongo<TSnapshot>(this.#options(options)));
  }

  locks(options: StoreOptionsOf<MongoLockProviderOptions> = {}): MongoLockProvider {
    return this.#open(new MongoLockProvider(this.#options(options)));
  }

  cache(options: StoreOptionsOf<MongoCacheProviderOptions> = {}): MongoCacheProvider {
    return this.#open(new MongoCacheProvider(this.#options(options)));
  }

  circuitBreaker(options: StoreOptionsOf<MongoCircuitBreakerStoreOptions> = {}): MongoCircuitBreakerStore {
    return this.#open(new MongoCircuitBreakerStore(this.#options(options)));
  }

  checkpoints(options: StoreOptionsOf<MongoCheckpointStoreOptions> = {}): MongoCheckpointStore {
    return this.#open(new MongoCheckpointStore(this.#options(options)));
  }

  idempotency(options: StoreOptionsOf<MongoIdempotencyStoreOptions> = {}): MongoIdempotencyStore {
    return this.#open(new MongoIdempotencyStore(this.#options(options)));
  }

  process(options: StoreOptionsOf<MongoProcessBackendOptions> = {}): MongoProcessBackend {
    return this.#open(new MongoProcessBackend(this.#options(options)));
  }

  /** Closes every store handed out (each waits for its calls in flight), then the client if it was opened here. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      await Promise.all([...this.#stores].map((store) => store.close()));
      await this.#connection.close();
    })();
    return this.#closing;
  }

  #options<T extends object>(options: T): T & MongoStoreOptions {
    if (this.#closing !== undefined) throw new StowageError('E_CLOSED', 'this connection is closed');
    if (options === null || typeof options !== 'object') throw new StowageError('E_INVALID_OPTION', 'store options must be an object');
    const misplaced = CONNECTION_OPTIONS.filter((name) => name in options);
    if (misplaced.length > 0) {
      throw new StowageError('E_INVALID_OPTION', `${misplaced.join(', ')}: connection settings belong to connect(), not to one store`);
    }
    return { ...this.#base, ...options };
  }

  #open<T extends { close(): Promise<void> }>(store: T): T {
    this.#stores.add(store);
    return store;
  }
}
