import { findPgBouncer, findPostgresServer } from '@stowage/test-env';
import { describeConformance } from '@stowage/core/conformance';
import pg from 'pg';
import { afterAll, describe, test } from 'vitest';
import { postgresConformanceAdapter } from './support/context.js';

/**
 * The core conformance suite, unchanged, through PgBouncer in transaction mode
 * (STOWAGE_PGBOUNCER_URL; under CI=true a missing PgBouncer fails the run). Every statement
 * goes through the pooler, which hands each transaction to any server session; LISTEN does not
 * work there, so the stores report `wakeups: false` and the suite skips the wake-up cases.
 * Tables are dropped through a direct connection to the server.
 */
const bouncer = await findPgBouncer();
const server = bouncer ? await findPostgresServer() : null;

if (bouncer === null || server === null) {
  describe('postgres conformance through PgBouncer', () => {
    test.skip('no PgBouncer: set STOWAGE_PGBOUNCER_URL (`.ci/pgbouncer.sh start` prints one)', () => {});
  });
} else {
  console.log(`[stowage postgres] conformance backend: ${bouncer.label}`);
  const admin = new pg.Pool({ connectionString: server.url, max: 2, application_name: 'stowage-test-admin' });
  afterAll(async () => {
    await admin.end();
    await bouncer.stop();
    await server.stop();
  });
  describeConformance(
    postgresConformanceAdapter({
      name: `postgres (${bouncer.label})`,
      connection: () => ({ url: bouncer.url, pool: { max: 3 }, applicationName: 'stowage-conformance-pgbouncer' }),
      admin: () => admin,
      schema: 'stowage_conformance_pgbouncer',
    }),
  );
}
