/**
 * What each implementation of the open-loop service does per route. The baselines send the
 * obvious statements a service written without stowage would: raw `pg` with prepared
 * (named) statements and unnamed ones, @keyv/postgres, and the MongoDB driver.
 */
import KeyvPostgres from '@keyv/postgres';
import type { CacheProvider, KeyValueStore } from '@stowage/core';
import { MongoCacheProvider, MongoKeyValueStore } from '@stowage/mongo';
import { PostgresCacheProvider, PostgresKeyValueStore } from '@stowage/postgres';
import Keyv from 'keyv';
import { MongoClient } from 'mongodb';
import pg from 'pg';
import { ANCHOR_CACHE_PREFIX, ANCHOR_TABLES } from '../anchor-postgres.ts';
import { CACHE_VALUE, KV_VALUE } from '../workload.ts';

export type ImplName = 'stowage' | 'raw pg, prepared' | 'raw pg, unnamed' | '@keyv/postgres' | 'raw driver';

export interface ServiceConfig {
  backend: 'postgres' | 'mongo';
  impl: ImplName;
  url: string;
  /** Postgres schema or MongoDB database of the anchor tables/collections. */
  namespace: string;
  poolSize: number;
  /** Keys 1…rows exist in the anchor tables (keyv gets them seeded in its own table). */
  rows: number;
  /** stowage on PostgreSQL: its stores' `maxWaiting` (fail fast past saturation). */
  maxWaiting?: number;
}

export type Route = (key: string) => Promise<string>;

export interface Routes {
  get: Route;
  read: Route;
  write: Route;
  close(): Promise<void>;
}

const CACHE_TTL = 60_000;

/** stowage's routes, the same on every backend: only the stores differ. */
function stowageRoutes(kv: KeyValueStore, cache: CacheProvider, end: () => Promise<void>): Routes {
  return {
    get: async (key) => (await kv.get(key)) ?? '',
    read: async (key) => {
      const value = await cache.getOrSet(key, async () => ({ ...CACHE_VALUE, loaded: await kv.get(key) }), CACHE_TTL);
      await kv.set(key, KV_VALUE);
      return JSON.stringify(value);
    },
    write: async (key) => {
      await kv.set(key, KV_VALUE);
      return 'ok';
    },
    close: async () => {
      await Promise.all([kv.close(), cache.close()]);
      await end();
    },
  };
}

/** Counts every statement `pg` sends from this process (one `Client#query` is one round trip). */
function countPgStatements(onStatement: () => void): void {
  const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = proto.query;
  proto.query = function countedQuery(this: object, ...args: unknown[]): unknown {
    onStatement();
    return original.apply(this, args);
  };
}

export async function routesFor(config: ServiceConfig, onStatement: () => void): Promise<Routes> {
  if (config.backend === 'mongo') return mongoRoutes(config, onStatement);
  countPgStatements(onStatement);
  const pool = new pg.Pool({ connectionString: config.url, max: config.poolSize });
  const end = async (): Promise<void> => void (await pool.end());
  switch (config.impl) {
    case 'stowage': {
      const shared = { pool, schema: config.namespace, cleanupInterval: false, maxWaiting: config.maxWaiting } as const;
      const kv = new PostgresKeyValueStore({ ...shared, table: ANCHOR_TABLES.kv });
      const cache = new PostgresCacheProvider({ ...shared, table: ANCHOR_TABLES.cache, prefix: ANCHOR_CACHE_PREFIX });
      await kv.ready();
      await cache.ready();
      return stowageRoutes(kv, cache, end);
    }
    case 'raw pg, prepared':
    case 'raw pg, unnamed':
      return rawPgRoutes(pool, config, config.impl === 'raw pg, prepared', end);
    case '@keyv/postgres': {
      const keyv = new Keyv({ store: new KeyvPostgres({ uri: config.url, schema: config.namespace, table: 'keyv', max: config.poolSize }), namespace: 'bench' });
      await keyv.set('created', 1); // keyv creates its table on first use
      await pool.query(
        `INSERT INTO ${config.namespace}.keyv (key, value) SELECT 'bench:' || g, $1 FROM generate_series(1, $2::int) g
         UNION ALL SELECT 'bench:c' || g, $3 FROM generate_series(1, $2::int) g
         ON CONFLICT (key) DO NOTHING`,
        [JSON.stringify({ value: KV_VALUE }), config.rows, JSON.stringify({ value: CACHE_VALUE })],
      );
      return {
        get: async (key) => ((await keyv.get(key)) as string | undefined) ?? '',
        read: async (key) => {
          let value = await keyv.get(`c${key}`);
          if (value === undefined) {
            value = { ...CACHE_VALUE, loaded: await keyv.get(key) };
            await keyv.set(`c${key}`, value, CACHE_TTL);
          }
          await keyv.set(key, KV_VALUE);
          return JSON.stringify(value);
        },
        write: async (key) => String(await keyv.set(key, KV_VALUE)),
        close: async () => {
          await keyv.disconnect();
          await end();
        },
      };
    }
    default:
      throw new Error(`no ${config.impl} on PostgreSQL`);
  }
}

function rawPgRoutes(pool: pg.Pool, config: ServiceConfig, prepared: boolean, end: () => Promise<void>): Routes {
  const kv = `${config.namespace}.${ANCHOR_TABLES.kv}`;
  const cache = `${config.namespace}.${ANCHOR_TABLES.cache}`;
  const live = '(expires_at IS NULL OR expires_at > now())';
  const statement = (name: string, text: string) => (values: unknown[]) =>
    pool.query<{ value: string }>(prepared ? { name, text, values } : { text, values });
  const getKv = statement('kv_get', `SELECT value FROM ${kv} WHERE key = $1 AND ${live}`);
  const setKv = statement(
    'kv_set',
    `INSERT INTO ${kv} AS e (key, value, version, updated_at) VALUES ($1, $2, 1, now())
     ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = e.version + 1, updated_at = now(), expires_at = NULL`,
  );
  const getCache = statement('cache_get', `SELECT value FROM ${cache} WHERE prefix = $1 AND key = $2 AND ${live}`);
  const setCache = statement(
    'cache_set',
    `INSERT INTO ${cache} (prefix, key, value, updated_at, expires_at) VALUES ($1, $2, $3, now(), now() + $4 * interval '1 millisecond')
     ON CONFLICT (prefix, key) DO UPDATE SET value = EXCLUDED.value, updated_at = now(), expires_at = EXCLUDED.expires_at`,
  );
  return {
    get: async (key) => (await getKv([key])).rows[0]?.value ?? '',
    read: async (key) => {
      const cached = (await getCache([ANCHOR_CACHE_PREFIX, key])).rows[0];
      let value: unknown;
      if (cached !== undefined) value = JSON.parse(cached.value);
      else {
        value = { ...CACHE_VALUE, loaded: (await getKv([key])).rows[0]?.value ?? null };
        await setCache([ANCHOR_CACHE_PREFIX, key, JSON.stringify(value), CACHE_TTL]);
      }
      await setKv([key, KV_VALUE]);
      return JSON.stringify(value);
    },
    write: async (key) => String((await setKv([key, KV_VALUE])).rowCount),
    close: end,
  };
}

async function mongoRoutes(config: ServiceConfig, onStatement: () => void): Promise<Routes> {
  // monitoring costs the same on both implementations; it is how statements are counted
  const client = new MongoClient(config.url, { maxPoolSize: config.poolSize, monitorCommands: true });
  client.on('commandStarted', onStatement);
  await client.connect();
  const database = config.namespace;
  if (config.impl === 'stowage') {
    const kv = new MongoKeyValueStore({ client, database, collection: ANCHOR_TABLES.kv });
    const cache = new MongoCacheProvider({ client, database, collection: ANCHOR_TABLES.cache, prefix: ANCHOR_CACHE_PREFIX });
    return stowageRoutes(kv, cache, () => client.close());
  }
  const db = client.db(database);
  type Doc = { _id: string; value?: string; expiresAt?: Date };
  const kv = db.collection<Doc>(ANCHOR_TABLES.kv);
  const cache = db.collection<Doc>(ANCHOR_TABLES.cache);
  const live = (doc: Doc | null): string | null => (doc === null || (doc.expiresAt !== undefined && doc.expiresAt <= new Date()) ? null : (doc.value ?? null));
  const projection = { value: 1, expiresAt: 1 };
  const setKv = (key: string) =>
    kv.updateOne({ _id: key }, { $set: { value: KV_VALUE, updatedAt: new Date() }, $inc: { version: 1 }, $unset: { expiresAt: '' } }, { upsert: true });
  return {
    get: async (key) => live(await kv.findOne({ _id: key }, { projection })) ?? '',
    read: async (key) => {
      const id = `${ANCHOR_CACHE_PREFIX}\u0000${key}`;
      const cached = live(await cache.findOne({ _id: id }, { projection }));
      let value: unknown;
      if (cached !== null) value = JSON.parse(cached);
      else {
        value = { ...CACHE_VALUE, loaded: live(await kv.findOne({ _id: key }, { projection })) };
        await cache.updateOne({ _id: id }, { $set: { value: JSON.stringify(value), expiresAt: new Date(Date.now() + CACHE_TTL) } }, { upsert: true });
      }
      await setKv(key);
      return JSON.stringify(value);
    },
    write: async (key) => String((await setKv(key)).modifiedCount),
    close: () => client.close(),
  };
}
