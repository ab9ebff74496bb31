import { describeConformance } from '@stowage/core/conformance';
import { describe, test } from 'vitest';
import { postgresConformanceAdapter } from './support/context.js';
import { serverTestSetup } from './support/server.js';

/**
 * The core conformance suite, unchanged, against a real PostgreSQL server
 * (STOWAGE_POSTGRES_URL, else testcontainers postgres:17). Each instance opens its own small
 * pool from the URL, the way separate processes would; tables live in their own schema.
 */
const { server, url, admin } = await serverTestSetup({ max: 2 });

if (server === null) {
  describe('postgres server conformance', () => {
    test.skip('no PostgreSQL server: set STOWAGE_POSTGRES_URL or make Docker available', () => {});
  });
} else {
  console.log(`[stowage postgres] conformance backend: ${server.label}`);
  describeConformance(
    postgresConformanceAdapter({
      name: `postgres (${server.label})`,
      connection: () => ({ url, pool: { max: 3 }, applicationName: 'stowage-conformance' }),
      admin: () => admin,
      schema: 'stowage_conformance',
    }),
  );
}
