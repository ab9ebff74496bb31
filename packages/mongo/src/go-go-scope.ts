import { StowageError } from '@stowage/core';
import { describeType } from '@stowage/core/adapter';
import { assertOptionsObject } from '@stowage/core/adapter';
import { GO_GO_SCOPE_NAMES, goGoScopeProviders, type GoGoScopeNames, type GoGoScopeOptions, type GoGoScopePersistence } from '@stowage/core/go-go-scope';
import type { Db, MongoClient } from 'mongodb';
import { registerGoGoScopeAdoption } from './adopt.js';
import { isClient, isDb, openConnection } from './connection.js';
import { parseStoreOptions, type MongoStoreOptions } from './options.js';
import { assertValidCollectionName } from './schema.js';
import { MongoCacheProvider } from './stores/cache.js';
import { MongoCheckpointStore } from './stores/checkpoints.js';
import { MongoCircuitBreakerStore } from './stores/circuit-breaker.js';
import { MongoIdempotencyStore } from './stores/idempotency.js';
import { MongoLockProvider } from './stores/locks.js';

/** Where go-go-scope's persistence lives on MongoDB: a connection, the database, the collection names. */
export interface MongoGoGoScopeOptions extends Omit<MongoStoreOptions, 'collection'> {
  /** Collection of each slot; default go-go-scope's own adapter's names (`go_goscope_locks`, …). */
  collections?: Partial<GoGoScopeNames>;
  /**
   * Where documents of go-go-scope's own adapters are, per slot, when not in the slot's
   * collection itself: they are moved from there into it at first use (for a server that cannot
   * drop go-go-scope's indexes, such as jongodb). Default: each slot's collection (adopted in place).
   */
  adoptFrom?: Partial<GoGoScopeNames>;
  /**
   * The `keyPrefix` go-go-scope's `MongoDBIdempotencyAdapter` was given (default `''`, its own
   * default). Its records are adopted under the key goGoScopePersistence uses: `keyPrefix`
   * (go-go-scope's option) + their key without this prefix.
   */
  idempotencyKeyPrefix?: string;
}

/**
 * go-go-scope's persistence providers on MongoDB, every store on one client, for
 * `scope({ persistence })`. Give a `Db` (as go-go-scope's `new MongoDBAdapter(db)`) or a
 * `MongoClient` (both never closed by stowage), a connection string, or options. The
 * collections default to go-go-scope's adapter's names and are created with their indexes on
 * first use (or by `connect()`). `close()` (or `disconnect()`) closes the stores and the
 * client if it was opened here.
 *
 * ```ts
 * const persistence = goGoScopePersistence(client.db('myapp'), { keyPrefix: 'myapp:' });
 * await using s = scope({ persistence });
 * ```
 */
export function goGoScopePersistence(
  database: Db | MongoClient | string | MongoGoGoScopeOptions,
  goGoScope: GoGoScopeOptions = {},
): GoGoScopePersistence {
  const options: MongoGoGoScopeOptions =
    typeof database === 'string' ? { url: database } : isDb(database) ? { existingDb: database } : isClient(database) ? { client: database } : database;
  if (options === null || typeof options !== 'object') {
    throw new StowageError('E_INVALID_OPTION', `goGoScopePersistence takes a Db, a MongoClient, a URL or options, got ${describeType(options)}`);
  }
  assertOptionsObject(goGoScope, 'go-go-scope options');
  const names = { ...GO_GO_SCOPE_NAMES, ...options.collections };
  const sources = { ...names, ...options.adoptFrom };
  const settings = parseStoreOptions(options, 'locks', 'goGoScopePersistence'); // checked before a client opens
  const keyPrefix = goGoScope.keyPrefix ?? '';
  const idempotencyKeyPrefix = options.idempotencyKeyPrefix ?? '';
  if (typeof keyPrefix !== 'string' || typeof idempotencyKeyPrefix !== 'string') {
    throw new StowageError('E_INVALID_OPTION', 'keyPrefix and idempotencyKeyPrefix must be strings');
  }
  for (const name of Object.values(sources)) assertValidCollectionName(name, 'adoptFrom');
  // One client for every store: the given one, or one opened here and closed by `close()` after the stores.
  const connection = openConnection(settings);
  const { autoCreate, dialect, writeConcern } = options;
  // Documents go-go-scope's own adapters left in these collections are adopted on first use (adopt.ts).
  const slots = (Object.keys(GO_GO_SCOPE_NAMES) as (keyof GoGoScopeNames)[]).map((slot) => ({ slot, source: sources[slot], target: names[slot] }));
  registerGoGoScopeAdoption(connection.db, { keyPrefix, idempotencyKeyPrefix, slots });
  const on = (collection: string) => ({ existingDb: connection.db, autoCreate, dialect, writeConcern, collection });
  return goGoScopeProviders(
    {
      lock: () => new MongoLockProvider(on(names.lock)),
      circuitBreaker: () => new MongoCircuitBreakerStore(on(names.circuitBreaker)),
      cache: (needs) => new MongoCacheProvider({ ...on(names.cache), ...needs }),
      idempotency: (needs) => new MongoIdempotencyStore({ ...on(names.idempotency), ...needs }),
      checkpoint: (needs) => new MongoCheckpointStore<unknown>({ ...on(names.checkpoint), ...needs }),
    },
    { ...goGoScope, afterClose: () => connection.close() },
  );
}
