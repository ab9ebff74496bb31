import { describeKeyValueStore } from '@stowage/core/conformance';
import { describe, test } from 'vitest';
import { adoptedKeyValueAdapter } from './support/adopted.js';
import { serverTestSetup } from './support/server.js';

/**
 * The core conformance cases of the key-value store, unchanged, on tables created as
 * awaitly-postgres's docs show them (`key TEXT PRIMARY KEY, value TEXT NOT NULL, expires_at
 * TIMESTAMP` and its expiry index) and adopted in place by the stores' first use, on the
 * PostgreSQL server (whose C.UTF-8 default collation makes the adoption convert the key column).
 */
const { server, url, admin } = await serverTestSetup({ max: 2 });

if (server === null) {
  describe('adopted key-value tables: conformance on the server', () => {
    test.skip('no PostgreSQL server: set STOWAGE_POSTGRES_URL or make Docker available', () => {});
  });
} else {
  await admin.query('CREATE SCHEMA IF NOT EXISTS stowage_adopted');
  describeKeyValueStore(
    adoptedKeyValueAdapter({
      name: `adopted awaitly-postgres table (${server.label})`,
      connection: () => ({ url, pool: { max: 3 }, applicationName: 'stowage-conformance' }),
      admin: () => admin,
      schema: 'stowage_adopted',
    }),
  );
}
