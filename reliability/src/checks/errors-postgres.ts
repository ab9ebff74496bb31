/**
 * The error classes of `@stowage/postgres` (README, "Errors"), each produced for real on the
 * backend: through the server itself, PgBouncer or PGlite where the failure can happen there.
 * Roles (read-only, without privileges) only exist on the server; PgBouncer lets only the
 * user of its auth file in.
 */
import { randomBytes } from 'node:crypto';
import { PostgresCacheProvider, PostgresKeyValueStore, PostgresLockProvider, type PostgresStoreOptions } from '@stowage/postgres';
import { describeError, type BackendReport } from '../report.ts';
import { POSTGRES_BACKENDS, type Backend, type BackendName } from '../backends/types.ts';
import { APPLICATION_NAME, withClient } from '../backends/pg-admin.ts';
import { runCases, SetupFailed, type ErrorCase } from './error-cases.ts';
import { Roles, type Role } from './roles.ts';

interface Context {
  backend: BackendName;
  url: string;
  schema: string;
  roles: Roles;
  /** A login role with USAGE on the schema and nothing else (created on first use). */
  bare(): Promise<Role>;
  admin(sql: string, params?: unknown[]): Promise<void>;
}

const SERVER: readonly BackendName[] = ['postgres'];
const BOUNCER: readonly BackendName[] = ['pgbouncer'];
const SERVER_OR_BOUNCER: readonly BackendName[] = ['postgres', 'pgbouncer'];

const q = (name: string) => `"${name}"`;

function options(context: Context, extra: PostgresStoreOptions): PostgresStoreOptions {
  return { url: context.url, schema: context.schema, applicationName: APPLICATION_NAME, ...extra };
}

/** Runs `fn` on a key-value store and closes it, whatever happens. */
async function withKv(settings: PostgresStoreOptions, fn: (kv: PostgresKeyValueStore) => Promise<unknown>): Promise<void> {
  const kv = new PostgresKeyValueStore(settings);
  try {
    await fn(kv);
  } finally {
    await kv.close();
  }
}

/** Set-up steps that must succeed; a failure there is reported as such, not as the case's error. */
async function setup<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (error) {
    throw new SetupFailed(`${what}: ${describeError(error)}`);
  }
}

/** A URL of the backend with one part changed. */
function changed(url: string, change: (url: URL) => void): string {
  const parsed = new URL(url);
  change(parsed);
  return parsed.toString();
}

const CASES: ErrorCase<Context>[] = [
  {
    what: 'read-only server (role with default_transaction_read_only): write',
    code: 'E_UNAVAILABLE',
    cause: '25006',
    only: SERVER,
    produce: async (context) => {
      const table = 'errors_read_only';
      await setup('create the table', () => withKv(options(context, { table }), (kv) => kv.set('k', 'v')));
      const role = await setup('create the role', () =>
        context.roles.create('read_only', (name) => [
          `GRANT USAGE ON SCHEMA ${q(context.schema)} TO ${name}`,
          `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ${q(context.schema)} TO ${name}`,
          `GRANT USAGE ON ALL SEQUENCES IN SCHEMA ${q(context.schema)} TO ${name}`,
          `ALTER ROLE ${name} SET default_transaction_read_only = on`,
        ]),
      );
      await withKv(options(context, { url: role.url, table }), async (kv) => {
        // Reads work there, with the default autoCreate (the tables exist).
        const read = await setup('a read on the read-only server', () => kv.get('k'));
        if (read !== 'v') throw new SetupFailed(`a read on the read-only server returned ${JSON.stringify(read)}`);
        await kv.set('k', 'w');
      });
    },
  },
  {
    what: 'autoCreate without CREATE on the schema',
    code: 'E_INVALID_OPTION',
    cause: '42501',
    only: SERVER,
    produce: async (context) => {
      const role = await setup('create the role', () => context.bare());
      await withKv(options(context, { url: role.url, table: 'errors_no_create' }), (kv) => kv.get('k'));
    },
  },
  {
    what: "lock table's fence sequence without USAGE",
    code: 'E_INVALID_OPTION',
    cause: '42501',
    only: SERVER,
    produce: async (context) => {
      const table = 'errors_no_sequence';
      await setup('create the table', async () => {
        const locks = new PostgresLockProvider({ ...options(context, { table }), wakeups: false });
        await (await locks.acquire('job', 1000))?.release();
        await locks.close();
      });
      const role = await setup('create the role', () => context.bare());
      await setup('grant the table', () => context.admin(`GRANT SELECT, INSERT, UPDATE, DELETE ON ${q(context.schema)}.${q(table)} TO ${role.name}`));
      const locks = new PostgresLockProvider({ ...options(context, { url: role.url, table }), wakeups: false });
      try {
        await locks.acquire('job', 60_000);
      } finally {
        await locks.close();
      }
    },
  },
  {
    what: 'prefix + key too long for the index',
    code: 'E_INVALID_KEY',
    cause: '54000',
    only: POSTGRES_BACKENDS,
    produce: async (context) => {
      const table = 'errors_long_key';
      // Random characters do not compress: the prefix takes its full length in the index row.
      const prefix = randomBytes(750).toString('base64');
      const cache = new PostgresCacheProvider({ ...options(context, { table }), prefix });
      try {
        await setup('create the table', () => cache.ready());
        // Uncompressed storage: a long key shows in the index row as it is.
        await setup('store keys uncompressed', () => context.admin(`ALTER TABLE ${q(context.schema)}.${q(table)} ALTER COLUMN key SET STORAGE PLAIN`));
        await cache.set(Array.from({ length: 1000 }, (_, i) => (i % 2 ? '\u0000' : '\u0001')).join(''), 1);
      } finally {
        await cache.close();
      }
    },
  },
  {
    what: 'table named pg_class without a schema (refused before connecting)',
    code: 'E_INVALID_OPTION',
    cause: null,
    only: POSTGRES_BACKENDS,
    // On the server, unqualified names would land in the run's schema, should a table ever be created.
    produce: (context) =>
      withKv(
        {
          url: context.url,
          table: 'pg_class',
          applicationName: APPLICATION_NAME,
          ...(context.backend === 'postgres' ? { pool: { options: `-c search_path=${context.schema}` } } : {}),
        },
        (kv) => kv.get('k'),
      ),
  },
  {
    what: 'table name taken by a view',
    code: 'E_INVALID_OPTION',
    cause: '42809',
    only: POSTGRES_BACKENDS,
    produce: async (context) => {
      const view = 'errors_view';
      await setup('create the view', () =>
        context.admin(`CREATE SCHEMA IF NOT EXISTS ${q(context.schema)};
          CREATE VIEW ${q(context.schema)}.${q(view)} AS SELECT ''::text AS key, ''::text AS value, 0::bigint AS version,
          now() AS updated_at, NULL::timestamptz AS expires_at`),
      );
      await withKv(options(context, { table: view }), (kv) => kv.get('k'));
    },
  },
  {
    what: 'table with a renamed column',
    code: 'E_INVALID_OPTION',
    cause: '42703',
    only: POSTGRES_BACKENDS,
    produce: async (context) => {
      const table = 'errors_renamed';
      await withKv(options(context, { table }), async (kv) => {
        await setup('write a row', () => kv.set('k', 'v'));
        await setup('rename the column', () => context.admin(`ALTER TABLE ${q(context.schema)}.${q(table)} RENAME COLUMN value TO renamed`));
        await kv.get('k');
      });
    },
  },
  {
    what: 'missing table with autoCreate: false',
    code: 'E_INVALID_OPTION',
    cause: '42P01',
    only: POSTGRES_BACKENDS,
    produce: (context) => withKv(options(context, { table: 'errors_missing', autoCreate: false }), (kv) => kv.get('k')),
  },
  {
    what: 'value refused by a CHECK constraint of yours',
    code: 'E_INVALID_VALUE',
    cause: '23514',
    only: POSTGRES_BACKENDS,
    produce: async (context) => {
      const table = 'errors_checked';
      await withKv(options(context, { table }), async (kv) => {
        await setup('create the table', () => kv.set('k', 'v'));
        await setup('add the constraint', () => context.admin(`ALTER TABLE ${q(context.schema)}.${q(table)} ADD CONSTRAINT no_forbidden CHECK (value <> 'forbidden')`));
        await kv.set('k', 'forbidden');
      });
    },
  },
  {
    what: 'TLS: sslrootcert file that does not exist',
    code: 'E_INVALID_OPTION',
    cause: 'ENOENT',
    only: POSTGRES_BACKENDS,
    produce: (context) => {
      const url = changed(context.url, (u) => {
        u.searchParams.set('sslmode', 'verify-full');
        u.searchParams.set('sslrootcert', `/nonexistent/${context.schema}/root.crt`);
      });
      return withKv(options(context, { url, table: 'errors_tls' }), (kv) => kv.get('k'));
    },
  },
  {
    what: 'TLS: verify-full where it cannot verify (self-signed, or no TLS)',
    code: 'E_INVALID_OPTION',
    cause: 'any',
    only: SERVER_OR_BOUNCER,
    produce: (context) => {
      const url = changed(context.url, (u) => u.searchParams.set('sslmode', 'verify-full'));
      return withKv(options(context, { url, table: 'errors_tls' }), (kv) => kv.get('k'));
    },
  },
  {
    what: 'PgBouncer refusing statement_timeout (a startup parameter)',
    code: 'E_INVALID_OPTION',
    cause: '08P01',
    only: BOUNCER,
    produce: (context) => withKv(options(context, { table: 'errors_pooler', pool: { statement_timeout: 5000 } }), (kv) => kv.get('k')),
  },
  {
    what: 'database that does not exist',
    code: 'E_INVALID_OPTION',
    cause: '3D000',
    only: SERVER,
    produce: (context) => withKv(options(context, { url: changed(context.url, (u) => (u.pathname = `/${context.schema}_missing`)) }), (kv) => kv.get('k')),
  },
  {
    what: 'database that does not exist (PgBouncer: no such database)',
    code: 'E_INVALID_OPTION',
    cause: '08P01',
    only: BOUNCER,
    produce: (context) => withKv(options(context, { url: changed(context.url, (u) => (u.pathname = `/${context.schema}_missing`)) }), (kv) => kv.get('k')),
  },
  {
    what: 'credentials refused (a role that does not exist)',
    code: 'E_INVALID_OPTION',
    cause: '28000',
    only: SERVER,
    produce: (context) => withKv(options(context, { url: changed(context.url, (u) => (u.username = `${context.schema}_nobody`)) }), (kv) => kv.get('k')),
  },
  {
    what: 'credentials refused (PgBouncer: a user not in its auth file)',
    code: 'E_INVALID_OPTION',
    cause: '08P01',
    only: BOUNCER,
    produce: (context) => withKv(options(context, { url: changed(context.url, (u) => (u.username = `${context.schema}_nobody`)) }), (kv) => kv.get('k')),
  },
];

export async function postgresErrors(backend: Backend, report: BackendReport): Promise<void> {
  const url = backend.target.url!;
  const schema = backend.target.namespace;
  const roles = new Roles(url, schema);
  let bare: Promise<Role> | undefined;
  const context: Context = {
    backend: backend.target.name,
    url,
    schema,
    roles,
    bare: () => (bare ??= roles.create('bare', (name) => [`CREATE SCHEMA IF NOT EXISTS ${q(schema)}`, `GRANT USAGE ON SCHEMA ${q(schema)} TO ${name}`])),
    admin: (sql, params) => withClient(url, (client) => client.query(sql, params).then(() => undefined)),
  };
  try {
    await runCases(CASES, context, backend.target.name, report);
  } finally {
    await roles.dropAll();
  }
}
