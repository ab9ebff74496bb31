import type { WorkflowSnapshot } from '@stowage/core';
import { StoreSet } from '@stowage/core/adapter';
import { PostgresConnection } from './connection/store-connection.js';
import type { PostgresPool } from './connection/types.js';
import { isPool, postgresSettings, type PostgresConnectionOptions, type PostgresStoreOptions } from './options.js';
import { PostgresProcessBackend, type PostgresProcessBackendOptions } from './process/backend.js';
import { PostgresCacheProvider, type PostgresCacheProviderOptions } from './stores/cache.js';
import { PostgresCheckpointStore, type PostgresCheckpointStoreOptions } from './stores/checkpoints.js';
import { PostgresCircuitBreakerStore, type PostgresCircuitBreakerStoreOptions } from './stores/circuit-breaker.js';
import { PostgresIdempotencyStore, type PostgresIdempotencyStoreOptions } from './stores/idempotency.js';
import { PostgresKeyValueStore, type PostgresKeyValueStoreOptions } from './stores/kv.js';
import { PostgresLockProvider, type PostgresLockProviderOptions } from './stores/locks.js';
import {
  PostgresLockingSnapshotStore,
  PostgresSnapshotStore,
  postgres,
  type PostgresSnapshotStoreOptions,
  type PostgresWorkflowLockOptions,
} from './stores/snapshots.js';

/** Where to connect, plus the store options every store of the connection shares. */
export type PostgresConnectOptions = PostgresConnectionOptions &
  Pick<PostgresStoreOptions, 'schema' | 'autoCreate' | 'autoCreateTable' | 'cleanupInterval'>;

/** A store's own options under {@link connect}: everything but where to connect. */
export type StoreOptionsOf<T> = Omit<T, keyof PostgresConnectionOptions>;

const CONNECTION_OPTIONS = [
  'url',
  'connectionString',
  'host',
  'port',
  'database',
  'user',
  'password',
  'pool',
  'existingPool',
  'applicationName',
  'preparedStatements',
  'listenUrl',
] as const;
const SHARED_STORE_OPTIONS = ['schema', 'autoCreate', 'autoCreateTable', 'cleanupInterval'] as const;

/**
 * Every store on one database, sharing one `pg.Pool` and one LISTEN connection. Give a
 * connection URL, options, or a `pg.Pool` of your own (`connect(pool)` is
 * `connect({ existingPool: pool })`: stowage never ends it):
 *
 * ```ts
 * const db = connect(process.env.DATABASE_URL!);
 * const kv = db.kv();
 * const locks = db.locks();
 * const store = db.snapshots({ lock: true });
 * // …
 * await db.close(); // closes every store it handed out, then ends the pool (unless it is yours)
 * ```
 *
 * Stores created directly from the same settings share the same pool too; `connect` keeps it
 * open between stores and closes them all at once. `@stowage/mongo`'s `connect` hands out its
 * stores under the same method names.
 */
export function connect(database: PostgresConnectOptions | PostgresPool | string): PostgresStowage {
  return new PostgresStowage(database);
}

/** The object {@link connect} returns. */
export class PostgresStowage extends StoreSet<PostgresConnectOptions> {
  constructor(database: PostgresConnectOptions | PostgresPool | string) {
    const { options: given, settings } = postgresSettings<PostgresConnectOptions>(isPool(database) ? { existingPool: database } : database);
    // The connection settings travel to each store (they may hold the password: never printed).
    const shared = Object.fromEntries(
      [...CONNECTION_OPTIONS, ...SHARED_STORE_OPTIONS].filter((name) => given[name] !== undefined).map((name) => [name, given[name]]),
    );
    // Holds the pool between stores; the stores find the same one from the same settings.
    const connection = new PostgresConnection(settings.connection);
    super(shared, CONNECTION_OPTIONS, () => connection.end());
  }

  kv(options: StoreOptionsOf<PostgresKeyValueStoreOptions> = {}): PostgresKeyValueStore {
    return this.open(new PostgresKeyValueStore(this.storeOptions(options)));
  }

  snapshots<TSnapshot extends object = WorkflowSnapshot>(
    options: StoreOptionsOf<PostgresSnapshotStoreOptions> & { lock: PostgresWorkflowLockOptions | true },
  ): PostgresLockingSnapshotStore<TSnapshot>;
  snapshots<TSnapshot extends object = WorkflowSnapshot>(options?: StoreOptionsOf<PostgresSnapshotStoreOptions>): PostgresSnapshotStore<TSnapshot>;
  snapshots<TSnapshot extends object = WorkflowSnapshot>(options: StoreOptionsOf<PostgresSnapshotStoreOptions> = {}): PostgresSnapshotStore<TSnapshot> {
    return this.open(postgres<TSnapshot>(this.storeOptions(options)));
  }

  locks(options: StoreOptionsOf<PostgresLockProviderOptions> = {}): PostgresLockProvider {
    return this.open(new PostgresLockProvider(this.storeOptions(options)));
  }

  cache(options: StoreOptionsOf<PostgresCacheProviderOptions> = {}): PostgresCacheProvider {
    return this.open(new PostgresCacheProvider(this.storeOptions(options)));
  }

  circuitBreaker(options: StoreOptionsOf<PostgresCircuitBreakerStoreOptions> = {}): PostgresCircuitBreakerStore {
    return this.open(new PostgresCircuitBreakerStore(this.storeOptions(options)));
  }

  checkpoints(options: StoreOptionsOf<PostgresCheckpointStoreOptions> = {}): PostgresCheckpointStore {
    return this.open(new PostgresCheckpointStore(this.storeOptions(options)));
  }

  idempotency(options: StoreOptionsOf<PostgresIdempotencyStoreOptions> = {}): PostgresIdempotencyStore {
    return this.open(new PostgresIdempotencyStore(this.storeOptions(options)));
  }

  process(options: StoreOptionsOf<PostgresProcessBackendOptions> = {}): PostgresProcessBackend {
    return this.open(new PostgresProcessBackend(this.storeOptions(options)));
  }
}
