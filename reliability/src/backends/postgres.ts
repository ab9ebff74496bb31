import { createHash } from 'node:crypto';
import pg from 'pg';
import type { JsonObject } from '@stowage/core';
import {
  PostgresCacheProvider,
  PostgresIdempotencyStore,
  PostgresKeyValueStore,
  PostgresLockProvider,
  PostgresSnapshotStore,
  type PostgresStoreOptions,
} from '@stowage/postgres';
import { PostgresGuardStore } from '../guard.ts';
import { APPLICATION_NAME, withClient } from './pg-admin.ts';
import type { Backend, BackendTarget, CanaryAccess, OpenOptions, SharedConnection } from './types.ts';

/**
 * `@stowage/postgres` against a real server or embedded PGlite (the same code: only the URL
 * differs). The run's tables live in a schema of its own, named by the namespace.
 */
export function postgresBackend(target: BackendTarget): Backend & { canary: CanaryAccess } {
  const url = target.url!;
  const endpoint = new URL(url);

  const options = (open: OpenOptions | undefined): PostgresStoreOptions => {
    const timeout = open?.timeoutMs;
    return {
      url: open?.url ?? url,
      schema: open?.schema ?? target.namespace,
      ...(open?.table !== undefined ? { table: open.table } : {}),
      applicationName: open?.applicationName ?? APPLICATION_NAME,
      ...(open?.shared
        ? { pool: open.shared.handle as pg.Pool }
        : timeout !== undefined
          ? // Without a client-side query timeout, a query on a connection whose packets vanish waits forever.
            { pool: { connectionTimeoutMillis: timeout, query_timeout: timeout } }
          : {}),
    };
  };

  return {
    target,
    crossProcess: true,
    address: { host: endpoint.hostname, port: Number(endpoint.port || 5432) },
    timeoutSettings: 'pool: { connectionTimeoutMillis, query_timeout }',
    kv: async (open) => new PostgresKeyValueStore(options(open)),
    snapshots: async (open) =>
      new PostgresSnapshotStore<JsonObject>({ ...options(open), ...(open?.prefix !== undefined ? { prefix: open.prefix } : {}) }),
    locks: async (open) => new PostgresLockProvider(options(open)),
    cache: async (open) => new PostgresCacheProvider({ ...options(open), prefix: open?.prefix ?? 'cache:' }),
    idempotency: async (open) => new PostgresIdempotencyStore(options(open)),
    guard: () => PostgresGuardStore.open(url, target.namespace, 'reliability_guard', true),
    sharedConnection: async () => sharedPool(url),
    cleanup: () =>
      withClient(url, async (client) => {
        const { rows } = await client.query<{ name: string }>(
          `SELECT quote_ident(nspname) AS name FROM pg_namespace WHERE nspname = $1 OR nspname LIKE $2`,
          [target.namespace, `${target.namespace}\\_%`],
        );
        for (const { name } of rows) await client.query(`DROP SCHEMA IF EXISTS ${name} CASCADE`);
      }),
    close: async () => {},
    canary: postgresCanary(url, target.namespace),
  };
}

function sharedPool(url: string): SharedConnection {
  const pool = new pg.Pool({ connectionString: url, max: 4, application_name: `${APPLICATION_NAME}-byo` });
  return {
    handle: pool,
    listenerCounts: () => Object.fromEntries(pool.eventNames().map((name) => [String(name), pool.listenerCount(name)])),
    checkedOut: () => pool.totalCount - pool.idleCount,
    transaction: async (fn) => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const result = await fn(client);
        await client.query('COMMIT');
        return result;
      } catch (error) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw error;
      } finally {
        client.release();
      }
    },
    close: () => pool.end(),
  };
}

/**
 * A table outside the run's schemas (in `public`), with rows stowage never writes. The digest
 * covers its rows and every row of every table in the bystander schema (`<namespace>_by`),
 * where the hostile-input check keeps stowage data it must not disturb.
 */
function postgresCanary(url: string, namespace: string): CanaryAccess {
  const table = `public.${namespace}_canary`;
  return {
    plant: () =>
      withClient(url, async (client) => {
        await client.query(`CREATE TABLE ${table} (id int PRIMARY KEY, body text NOT NULL, data jsonb NOT NULL)`);
        for (let id = 1; id <= 20; id++) {
          await client.query(`INSERT INTO ${table} VALUES ($1, $2, $3)`, [
            id,
            `row ${id} '"; DROP TABLE x; -- %_*?`,
            JSON.stringify({ id, $gt: '', nested: { 'a.b': [id, null, true] } }),
          ]);
        }
      }),
    digest: () =>
      withClient(url, async (client) => {
        const parts: unknown[] = [(await client.query(`SELECT id, body, data::text FROM ${table} ORDER BY id`)).rows];
        const tables = await client.query<{ name: string }>(
          `SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) AS name FROM information_schema.tables
            WHERE table_schema = $1 ORDER BY table_name`,
          [`${namespace}_by`],
        );
        for (const { name } of tables.rows) {
          const content = await client.query(`SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) AS md5 FROM ${name} t`);
          parts.push(name, content.rows[0]);
        }
        return createHash('sha256').update(JSON.stringify(parts)).digest('hex');
      }),
    remove: () => withClient(url, (client) => client.query(`DROP TABLE IF EXISTS ${table}`).then(() => undefined)),
  };
}
