import { findPostgresServer } from '@stowage/test-env';
import pg from 'pg';
import { afterAll, describe } from 'vitest';
import { dropTables, tableSet, type TableSet } from './context.js';

/**
 * What a test file on the PostgreSQL server works with: its `describe` (skipped when there is
 * no server), the server's URL, an admin pool, and tables of its own. When the file ends (after
 * its suites' own `afterAll`s), every table it asked for is dropped, the pool ended and a
 * server the test environment started stopped.
 */
export async function serverTestSetup(adminOptions: pg.PoolConfig = {}) {
  const server = await findPostgresServer();
  const url = server?.url ?? '';
  // pg connects on the first query: without a server this pool never opens a connection.
  const admin = new pg.Pool({ connectionString: url, max: 3, application_name: 'stowage-test-admin', ...adminOptions });
  const created: { tables: TableSet; schema?: string }[] = [];
  afterAll(async () => {
    for (const { tables, schema } of created) await dropTables(admin, tables, schema);
    await admin.end();
    await server?.stop();
  });
  return {
    server,
    url,
    admin,
    describeServer: (server ? describe : describe.skip) as typeof describe,
    /** New table names (in `schema`, if given; `names` chosen by the case), dropped when the file ends. */
    freshTables(schema?: string, names: Partial<TableSet> = {}): TableSet {
      const tables = { ...tableSet(), ...names };
      created.push({ tables, schema });
      return tables;
    },
  };
}
