import { startEmbeddedPostgres } from '@stowage/test-env';
import { describeKeyValueStore } from '@stowage/core/conformance';
import pg from 'pg';
import { afterAll } from 'vitest';
import { adoptedKeyValueAdapter } from './support/adopted.js';

/**
 * The core conformance cases of the key-value store on tables created as awaitly-postgres's
 * docs show them and adopted in place, on embedded PGlite (one pooled connection, cases one
 * at a time: see conformance.pglite.test.ts).
 */
const embedded = await startEmbeddedPostgres({ separateProcess: true });
const pool = new pg.Pool({ connectionString: embedded.url, max: 1, application_name: 'stowage-conformance' });
afterAll(async () => {
  await pool.end();
  await embedded.stop();
});

describeKeyValueStore(
  adoptedKeyValueAdapter({
    name: `adopted awaitly-postgres table (${embedded.label})`,
    connection: () => ({ pool }),
    admin: () => pool,
  }),
);
