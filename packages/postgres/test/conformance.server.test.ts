import { findPostgresServer } from '@stowage/test-env';
import { describeConformance } from '@stowage/core/conformance';
import pg from 'pg';
import { afterAll, describe, test } from 'vitest';
import { postgresConformanceAdapter } from './support/context.js';

/**
 * The core conformance suite, unchanged, against a real PostgreSQL server
 * (STOWAGE_POSTGRES_URL, else testcontainers postgres:17). Each instance opens its own small
 * pool from the URL, the way separate processes would; tables live in their own schema.
 */
const server = await findPostgresServer();

if (server === null) {
  describe('postgres server conformance', () => {
    test.skip('no PostgreSQL server: set STOWAGE_POSTGRES_URL or make Docker available', () => {});
  });
} else {
  console.log(`[stowage postgres] conformance backend: ${server.label}`);
  const admin = new pg.Pool({ connectionString: server.url, max: 2, application_name: 'stowage-test-admin' });
  afterAll(async () => {
    await admin.end();
    await server.stop();
  });
  describeConformance(
    postgresConformanceAdapter({
      name: `postgres (${server.label})`,
      connection: () => ({ url: server.url, pool: { max: 3 }, applicationName: 'stowage-conformance' }),
      admin: () => admin,
      schema: 'stowage_conformance',
    }),
  );
}
