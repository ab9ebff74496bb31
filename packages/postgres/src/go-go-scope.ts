import { StowageError } from '@stowage/core';
import { describeType } from '@stowage/core/adapter';
import { assertOptionsObject } from '@stowage/core/adapter';
import { GO_GO_SCOPE_NAMES, goGoScopeProviders, type GoGoScopeNames, type GoGoScopeOptions, type GoGoScopePersistence } from '@stowage/core/go-go-scope';
import { registerGoGoScopeTable } from './adopt-go-go-scope.js';
import { PostgresConnection } from './connection/store-connection.js';
import type { PostgresPool } from './connection/types.js';
import { isPool, postgresSettings, type PostgresStoreOptions } from './options.js';
import { TableName, type TableKind } from './schema/names.js';
import { PostgresCacheProvider } from './stores/cache.js';
import { PostgresCheckpointStore } from './stores/checkpoints.js';
import { PostgresCircuitBreakerStore } from './stores/circuit-breaker.js';
import { PostgresIdempotencyStore } from './stores/idempotency.js';
import { PostgresLockProvider } from './stores/locks.js';

/** Where go-go-scope's persistence lives on PostgreSQL: a connection, the schema, the table names. */
export interface PostgresGoGoScopeOptions extends Omit<PostgresStoreOptions, 'table' | 'tableName'> {
  /** Table of each slot; default go-go-scope's own adapter's names (`go_goscope_locks`, …). */
  tables?: Partial<GoGoScopeNames>;
  /**
   * The `keyPrefix` go-go-scope's `PostgresIdempotencyAdapter` was given (default `''`, its own
   * default). Its records are adopted under the key goGoScopePersistence uses: `keyPrefix`
   * (go-go-scope's option) + their key without this prefix.
   */
  idempotencyKeyPrefix?: string;
}

/**
 * go-go-scope's persistence providers on PostgreSQL, every store on one pool, for
 * `scope({ persistence })`. Give a `pg.Pool` (as go-go-scope's `new PostgresAdapter(pool)`;
 * never ended by stowage), a connection URL, or options. The tables default to go-go-scope's
 * adapter's names and are created on first use (or by `connect()`); go-go-scope's own tables
 * found there are converted in place, their rows kept (see the README). `close()` (or
 * `disconnect()`) closes the stores and ends the pool if it was opened here.
 *
 * ```ts
 * const persistence = goGoScopePersistence(process.env.DATABASE_URL, { keyPrefix: 'myapp:' });
 * await using s = scope({ persistence });
 * ```
 */
export function goGoScopePersistence(
  database: PostgresPool | string | PostgresGoGoScopeOptions,
  goGoScope: GoGoScopeOptions = {},
): GoGoScopePersistence {
  const options: PostgresGoGoScopeOptions = typeof database === 'string' ? { url: database } : isPool(database) ? { pool: database } : database;
  if (options === null || typeof options !== 'object') {
    throw new StowageError('E_INVALID_OPTION', `goGoScopePersistence takes a pg.Pool, a URL or options, got ${describeType(options)}`);
  }
  assertOptionsObject(goGoScope, 'go-go-scope options');
  const names = { ...GO_GO_SCOPE_NAMES, ...options.tables };
  const { settings } = postgresSettings(options); // every option checked before a connection opens
  // One pool for every store: the given one, or one opened here and ended by `close()` after the stores.
  const connection = new PostgresConnection(settings.connection);
  // Each store gets that pool, and every other option as given (schema, autoCreate, …).
  const {
    tables: _tables,
    idempotencyKeyPrefix = '',
    url: _url,
    connectionString: _connectionString,
    existingPool: _existingPool,
    pool: _pool,
    ...shared
  } = options;
  const keyPrefix = goGoScope.keyPrefix ?? '';
  if (typeof keyPrefix !== 'string' || typeof idempotencyKeyPrefix !== 'string') {
    throw new StowageError('E_INVALID_OPTION', 'keyPrefix and idempotencyKeyPrefix must be strings');
  }
  // Each store's table, where it is go-go-scope's own, is adopted on first use (adopt-go-go-scope.ts).
  const on = (kind: TableKind, table: string) => {
    registerGoGoScopeTable(connection.pool, kind, new TableName(table, options.schema), { keyPrefix, idempotencyKeyPrefix });
    return { ...shared, pool: connection.pool, table };
  };
  return goGoScopeProviders(
    {
      lock: () => new PostgresLockProvider(on('locks', names.lock)),
      circuitBreaker: () => new PostgresCircuitBreakerStore(on('circuitBreaker', names.circuitBreaker)),
      cache: (needs) => new PostgresCacheProvider({ ...on('cache', names.cache), ...needs }),
      idempotency: (needs) => new PostgresIdempotencyStore({ ...on('idempotency', names.idempotency), ...needs }),
      checkpoint: (needs) => new PostgresCheckpointStore<unknown>({ ...on('checkpoints', names.checkpoint), ...needs }),
    },
    { ...goGoScope, afterClose: () => connection.end() },
  );
}
