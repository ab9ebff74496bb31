/**
 * The backends the go-go-scope tests run on, each through its one-call factory
 * (`goGoScopePersistence`) with go-go-scope's default table or collection names: in memory,
 * PostgreSQL on embedded PGlite and on the server, and the MongoDB stand-in. Each test gets a
 * namespace of its own (a Postgres schema, a MongoDB database), so the default names never
 * collide between tests or runs, and drops it afterwards.
 */
import { randomUUID } from 'node:crypto';
import { goGoScopePersistence as inMemory, type GoGoScopeOptions, type GoGoScopePersistence } from '@stowage/core/go-go-scope';
import { createMemoryStorage } from '@stowage/core/memory';
import { goGoScopePersistence as onMongo } from '@stowage/mongo';
import { goGoScopePersistence as onPostgres } from '@stowage/postgres';
import { findMongoServer, findPostgresServer, startEmbeddedPostgres, type FoundBackend } from '@stowage/test-env';
import { MongoClient } from 'mongodb';
import pg from 'pg';

/** One isolated place on a backend; every `open()` is another process on the same data. */
export interface GoGoScopeNamespace {
  open(options?: GoGoScopeOptions): GoGoScopePersistence;
  /** The tables (Postgres) or collections (MongoDB) that exist in the namespace; `null` in memory. */
  names(): Promise<string[] | null>;
  drop(): Promise<void>;
}

export interface StartedBackend {
  label: string;
  url: string | null;
  namespace(): GoGoScopeNamespace;
  stop(): Promise<void>;
}

export interface GoGoScopeBackend {
  name: string;
  kind: 'memory' | 'postgres' | 'mongo';
  /** `null` when the server is not available (outside CI only). */
  start(): Promise<StartedBackend | null>;
}

export function unique(prefix: string): string {
  return `${prefix}_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
}

function postgresBackend(found: FoundBackend): StartedBackend {
  return {
    label: found.label,
    url: found.url,
    namespace() {
      const schema = unique('gogoscope');
      const query = async (text: string, values?: unknown[]) => {
        const client = new pg.Client({ connectionString: found.url });
        await client.connect();
        try {
          return (await client.query(text, values)).rows as Record<string, unknown>[];
        } finally {
          await client.end();
        }
      };
      return {
        open: (options) => onPostgres({ url: found.url, schema, pool: { max: 2 } }, options),
        names: async () =>
          (await query('SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1', [schema])).map(
            (row) => row.table_name as string,
          ),
        drop: async () => void (await query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)),
      };
    },
    stop: () => found.stop(),
  };
}

export const GO_GO_SCOPE_BACKENDS: GoGoScopeBackend[] = [
  {
    name: 'memory',
    kind: 'memory',
    start: async () => ({
      label: 'in-memory (@stowage/core/go-go-scope)',
      url: null,
      namespace() {
        const storage = createMemoryStorage();
        return { open: (options) => inMemory({ storage }, options), names: async () => null, drop: async () => {} };
      },
      stop: async () => {},
    }),
  },
  { name: 'postgres (embedded PGlite)', kind: 'postgres', start: async () => postgresBackend(await startEmbeddedPostgres()) },
  {
    name: 'postgres (server)',
    kind: 'postgres',
    start: async () => {
      const found = await findPostgresServer();
      return found && postgresBackend(found);
    },
  },
  {
    name: 'mongo (server)',
    kind: 'mongo',
    start: async () => {
      const found = await findMongoServer();
      if (found === null) return null;
      return {
        label: found.label,
        url: found.url,
        namespace() {
          const database = unique('gogoscope');
          const withDb = async <T>(use: (db: import('mongodb').Db) => Promise<T>) => {
            const client = new MongoClient(found.url);
            try {
              return await use(client.db(database));
            } finally {
              await client.close();
            }
          };
          return {
            open: (options) => onMongo({ url: found.url, database }, options),
            names: () => withDb(async (db) => (await db.listCollections({}, { nameOnly: true }).toArray()).map((c) => c.name).sort()),
            drop: () => withDb(async (db) => void (await db.dropDatabase())),
          };
        },
        stop: () => found.stop(),
      };
    },
  },
];
